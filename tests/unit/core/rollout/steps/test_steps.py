"""The step policy (core.rollout.steps): what each action writes and records, from what the API answers.
The executor and the world model (eventedpleg_lab.sim.rolloutworld) both run it; these tests pin the
decisions."""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from eventedpleg import protocol
from eventedpleg.core.rollout import steps
from eventedpleg.core.rollout.actions import Action, Cordon, Drain, MarkFailed, Release, Uncordon
from eventedpleg.core.rollout.drain import pods as drainpods
from eventedpleg.core.rollout.drain.pods import Blocker, DrainResult, EvictionProblem, PodRef
from eventedpleg.core.rollout.drain.policy import DrainPolicy
from eventedpleg.core.rollout.drain.survey import PodSurvey
from eventedpleg.core.rollout.drain.taints import NodeTaints, Taint
from eventedpleg.core.rollout.drain.takeverdict import FORCE_DELETE_DISABLED
from eventedpleg.core.rollout.snapshot import NodeMarks
from eventedpleg.core.rollout.steps import (
    AttemptDrain,
    Emit,
    FindMirrorPods,
    StepEnd,
    SurveyPods,
    Write,
)
from eventedpleg.models.nodeconfig import DrainSpec, LabelSelector, OnDrainBlocked, OnDrainTimeout
from eventedpleg.protocol import NodeState
from eventedpleg_lab.sim.rolloutworld import T0, World, fleet, spec


@dataclass
class Recorded:
    """Answers from the test's arguments, recording every request in order."""

    mirror: tuple[str, ...]
    survey_mirror: tuple[str, ...]
    pods_to_evict: bool
    drain: DrainResult
    never: str = ""
    protected: str = ""
    requests: list[steps.Request] = field(default_factory=list)

    def write(self, request: Write) -> None:
        self.requests.append(request)

    def survey_pods(self) -> PodSurvey:
        self.requests.append(SurveyPods())
        return PodSurvey(
            self.survey_mirror,
            nothing_to_evict=not self.pods_to_evict,
            never=self.never,
            protected=self.protected,
        )

    def find_mirror_pods(self) -> tuple[str, ...]:
        self.requests.append(FindMirrorPods())
        return self.mirror

    def attempt_drain(self, request: AttemptDrain) -> DrainResult:
        self.requests.append(request)
        return self.drain

    def emit(self, request: Emit) -> None:
        self.requests.append(request)


def run(
    action: Action,
    *,
    mirror: tuple[str, ...] = (),
    drain: DrainResult | None = None,
    allow_force_delete: bool = True,
    pods_to_evict: bool = False,
    survey_mirror: tuple[str, ...] | None = None,
    never: str = "",
    protected: str = "",
) -> tuple[list[steps.Request], StepEnd]:
    """Run a step to its end with the interpreter the executor uses, answering from the arguments
    (`pods_to_evict`: what a look at the pods before the cordon finds; `survey_mirror`: the static pods it
    sees, when not `mirror`; `never`: the blockers it finds that cannot clear by themselves, `protected`:
    the part of them that are pods asking not to be disrupted); returns its requests in order."""
    step = steps.step(action, clock=lambda: T0, nodeconfig="cluster", allow_force_delete=allow_force_delete)
    seen = mirror if survey_mirror is None else survey_mirror
    answers = Recorded(mirror, seen, pods_to_evict, drain or DrainResult(True), never, protected)
    end = steps.run(step, answers)
    return answers.requests, end


POLICY = DrainPolicy.of(DrainSpec(timeout_seconds=60, on_timeout=OnDrainTimeout.FAIL, retries=0))
CORDON = Cordon(
    "n", "1", "cluster", "h", include_control_plane=False, was_unschedulable=False, agent_options="{}",
    drain=POLICY,
)  # fmt: skip
DRAIN = Drain(
    "n", "1", "h", "{}", include_control_plane=False, deadline_reached=False, drain=POLICY,
    was_unschedulable=False, reason="evicting pods",
)  # fmt: skip


def cordon(**kw: Any) -> Cordon:
    return replace(CORDON, **kw)


def drain(*, policy: dict[str, Any] | None = None, **kw: Any) -> Drain:
    """DRAIN with these fields, and these fields of its drain policy."""
    return replace(DRAIN, drain=replace(POLICY, **(policy or {})), **kw)


def writes(requests: list[steps.Request]) -> list[Write]:
    return [r for r in requests if isinstance(r, Write)]


def events(requests: list[steps.Request]) -> list[tuple[str, str]]:
    return [(r.kind, r.reason) for r in requests if isinstance(r, Emit)]


def test_a_node_with_nothing_to_evict_is_cordoned_and_asked_to_apply_in_one_write() -> None:
    requests, end = run(cordon())
    (write,) = writes(requests)
    assert write.unschedulable is True and write.annotations[protocol.ANN_CORDONED_BY_US] == "true"
    assert (
        write.annotations[protocol.ANN_OWNER] == "cluster"
        and write.annotations[protocol.ANN_WAS_UNSCHEDULABLE] == "false"
    )
    assert (
        write.annotations[protocol.ANN_STATE] == "Applying" and write.annotations[protocol.ANN_DESIRED] == "h"
    )
    assert write.annotations[protocol.ANN_AGENT_OPTIONS] == "{}"
    # kubectl drain's list after the cordon still happens, after the write
    assert isinstance(requests[0], SurveyPods) and isinstance(requests[2], AttemptDrain)
    assert events(requests) == []  # nothing was evicted; the agent's "Applying" Event says the rest
    assert end == StepEnd(NodeState.APPLYING)


def test_a_pod_bound_before_the_scheduler_saw_the_cordon_is_evicted_and_named() -> None:
    late = DrainResult(False, "evicting 1 pod(s)", frozenset())
    requests, end = run(cordon(), drain=late)
    (write,) = writes(requests)
    assert write.annotations[protocol.ANN_STATE] == "Applying"
    assert AttemptDrain() in requests
    assert events(requests) == [("Warning", "PodsBoundDuringCordon")]
    assert end == StepEnd(NodeState.APPLYING)


def test_a_node_with_pods_is_cordoned_first_then_drained_then_asked_to_apply() -> None:
    """kubectl drain's order: the cordon is written before any eviction."""
    requests, end = run(cordon(), pods_to_evict=True)
    first, second = writes(requests)
    assert first.unschedulable is True
    assert (
        first.annotations[protocol.ANN_STATE] == "Draining"
        and first.annotations[protocol.ANN_CORDONED_BY_US] == "true"
    )
    assert protocol.ANN_DESIRED not in first.annotations
    assert requests.index(first) < requests.index(AttemptDrain())
    assert (
        second.annotations[protocol.ANN_STATE] == "Applying"
        and second.annotations[protocol.ANN_DESIRED] == "h"
    )
    assert events(requests) == [("Normal", "Drained")]
    assert end == StepEnd(NodeState.APPLYING)

    blocked = DrainResult(False, "PDB blocks eviction", frozenset({Blocker.EVICTION_REFUSED}))
    requests, end = run(cordon(), pods_to_evict=True, drain=blocked)
    first, second = writes(requests)
    assert first.annotations[protocol.ANN_STATE] == "Draining" and second.annotations == {
        protocol.ANN_REASON: "PDB blocks eviction"
    }
    assert end == StepEnd(NodeState.DRAINING, drain_retry=True)


def test_static_pods_mark_the_node_skipped_without_a_cordon_unless_opted_in() -> None:
    requests, end = run(cordon(), mirror=("kube-system/etcd-n",))
    (skip,) = writes(requests)
    assert skip.unschedulable is None and protocol.ANN_CORDONED_BY_US not in skip.annotations
    assert (
        skip.annotations[protocol.ANN_OWNER] == "cluster"
        and skip.annotations[protocol.ANN_STATE] == "Skipped"
    )
    assert "kube-system/etcd-n" in str(skip.annotations[protocol.ANN_REASON])
    assert events(requests) == [("Warning", "Skipped")] and end.transition == "Skipped"
    assert not [r for r in requests if isinstance(r, AttemptDrain)]  # nothing evicted

    _, opted_in = run(cordon(include_control_plane=True), mirror=("kube-system/etcd-n",))
    assert opted_in.transition == "Applying"


def test_a_drain_looks_for_static_pods_too() -> None:
    """A Cordon cut off after its first write (409, crash) never reached its static-pod check."""
    requests, end = run(drain(), mirror=("kube-system/etcd-n",))
    assert end.transition == "Skipped" and events(requests) == [("Warning", "Skipped")]


def test_blockers_decide_the_warning_by_kind_not_by_text() -> None:
    pdb = drainpods.result(
        drainpods.DrainSelection((PodRef("ns", "web"),), (), (), ()),
        [EvictionProblem(PodRef("ns", "web"), Blocker.EVICTION_REFUSED, "Cannot evict pod")],
    )
    assert pdb.waiting == "evicting 1 pod(s); eviction of ns/web refused: Cannot evict pod"
    requests, end = run(drain(), drain=pdb)
    assert writes(requests)[0].annotations == {protocol.ANN_REASON: pdb.waiting}
    assert events(requests) == [("Warning", "DrainBlocked")] and end == StepEnd(drain_retry=True)

    # An API error on a pod whose name says "refused" is not a PDB: no Warning (the old text match warned).
    flaky = drainpods.result(
        drainpods.DrainSelection((PodRef("ns", "refused-emptyDir"),), (), (), ()),
        [EvictionProblem(PodRef("ns", "refused-emptyDir"), Blocker.EVICTION_FAILED, "timeout")],
    )
    requests, _ = run(drain(), drain=flaky)
    assert writes(requests) and not events(requests)

    # The same reason as on the node: nothing written, nothing recorded, try again.
    requests, end = run(drain(reason=pdb.waiting), drain=pdb)
    assert [r for r in requests if not isinstance(r, FindMirrorPods | AttemptDrain)] == []
    assert end == StepEnd(drain_retry=True)


@pytest.mark.parametrize(
    ("on_timeout", "state"), [(OnDrainTimeout.FAIL, "Failed"), (OnDrainTimeout.SKIP, "Skipped")]
)
def test_drain_timeout_gives_the_node_back(on_timeout: OnDrainTimeout, state: str) -> None:
    blocked = DrainResult(False, "PDB blocks eviction", frozenset({Blocker.EVICTION_REFUSED}))
    requests, end = run(drain(deadline_reached=True, policy={"on_timeout": on_timeout}), drain=blocked)
    (write,) = writes(requests)
    assert write.unschedulable is False and write.annotations[protocol.ANN_STATE] == state
    assert write.annotations[protocol.ANN_REASON] == "drain did not finish within 60s: PDB blocks eviction"
    assert events(requests) == [("Warning", "DrainTimeout")] and end.transition == state


def test_drain_timeout_force_delete_deletes_instead_of_evicting() -> None:
    requests, end = run(drain(deadline_reached=True, policy={"on_timeout": OnDrainTimeout.FORCE_DELETE}))
    assert AttemptDrain(force_delete=True) in requests and end.transition == "Applying"


def test_drain_timeout_force_delete_not_granted_fails_and_gives_the_node_back() -> None:
    stuck = DrainResult(False, "1 pod(s) blocked by a PodDisruptionBudget")
    timed_out = drain(deadline_reached=True, policy={"on_timeout": OnDrainTimeout.FORCE_DELETE})
    requests, end = run(timed_out, drain=stuck, allow_force_delete=False)
    assert AttemptDrain(force_delete=False) in requests and end.transition == "Failed"
    (write,) = writes(requests)
    assert FORCE_DELETE_DISABLED in str(write.annotations[protocol.ANN_REASON])
    assert write.unschedulable is False  # the node is given back, not kept cordoned
    assert events(requests) == [("Warning", "DrainTimeout")]
    # a missing grant does not clear by itself: no automatic retry is counted or promised
    retried = run(
        replace(timed_out, drain=replace(timed_out.drain, retries=2)), drain=stuck, allow_force_delete=False
    )[0]
    assert protocol.ANN_DRAIN_TIMEOUTS not in writes(retried)[0].annotations
    assert "automatic retry" not in str(writes(retried)[0].annotations[protocol.ANN_REASON])


def test_release_removes_every_protocol_key_but_current_when_kept_and_the_host_check() -> None:
    requests, _ = run(Release("n", "1", keep_current=True, uncordon=False, was_unschedulable=False))
    (write,) = writes(requests)
    # The host check is the agent's word about the host: the next NodeConfig needs it to take the node.
    assert set(write.annotations) == set(protocol.NODE_ANNOTATIONS) - {
        protocol.ANN_CURRENT,
        protocol.ANN_HOST_CHECK,
    }
    assert write.unschedulable is None
    assert events(requests) == [("Normal", "Released")]


def test_release_as_is_warns_with_what_is_left() -> None:
    left = "left as it Failed: rollback failed; our drop-ins may still be on it"
    requests, _ = run(Release("n", "1", keep_current=True, uncordon=True, was_unschedulable=False, left=left))
    (write,) = writes(requests)
    assert write.unschedulable is False  # given back
    assert events(requests) == [("Warning", "ReleasedAsIs")]
    assert any(isinstance(e, Emit) and left in e.message for e in requests)


def test_uncordon_for_a_gone_agent_gives_the_node_back_without_a_state() -> None:
    requests, end = run(Uncordon("n", "1", was_unschedulable=False, agent_gone="no host check"))
    (write,) = writes(requests)
    assert write.unschedulable is False
    for key in (
        protocol.ANN_STATE,
        protocol.ANN_STATE_SINCE,
        protocol.ANN_REASON,
        protocol.ANN_CORDONED_BY_US,
    ):
        assert key in write.annotations and write.annotations[key] is None, key
    assert events(requests) == [("Warning", "AgentGone")]
    assert end.transition is None


def test_mark_failed() -> None:
    requests, end = run(MarkFailed("n", "1", "agent silent"))
    assert writes(requests)[0].annotations[protocol.ANN_STATE] == "Failed" and end.transition == "Failed"


def test_a_static_pod_node_is_skipped_in_one_write_and_never_cordoned() -> None:
    """World model: the look before the cordon finds the static pods."""
    nodes = fleet(2)
    nodes["node-000"].mirror_pods = ("kube-system/etcd-node-000",)
    world = World(nodes, spec())
    (action,) = world.plan().actions
    assert isinstance(action, Cordon)
    assert world.apply(action, writes=1)
    skipped = nodes["node-000"]
    assert (
        skipped.annotations[protocol.ANN_STATE] == "Skipped" and skipped.rv == 2 and not skipped.unschedulable
    )
    world.run()
    assert skipped.annotations[protocol.ANN_STATE] == "Skipped" and not skipped.unschedulable
    assert (
        skipped.drains == 0 and protocol.ANN_CURRENT not in skipped.annotations
    )  # never cordoned nor applied
    assert nodes["node-001"].annotations[protocol.ANN_STATE] == "Done"
    assert ("node-000", "Skipped") in world.events


def test_a_static_pod_node_left_draining_is_given_back_and_never_applied() -> None:
    """World model: a node taken before its static pods showed up (cordoned, Draining, nothing asked)."""
    nodes = fleet(2)
    nodes["node-000"].mirror_pods = ("kube-system/etcd-node-000",)
    world = World(nodes, spec())
    (action,) = world.plan().actions
    assert isinstance(action, Cordon)
    world.apply(action, writes=0)  # the node as the cordon write left it, static pods found after
    nodes["node-000"].annotations.update(
        {
            protocol.ANN_OWNER: "cluster",
            protocol.ANN_WAS_UNSCHEDULABLE: "false",
            protocol.ANN_CORDONED_BY_US: "true",
            protocol.ANN_STATE: "Draining",
            protocol.ANN_STATE_SINCE: T0.isoformat(),
        }
    )
    nodes["node-000"].unschedulable = True
    world.run()
    skipped = nodes["node-000"]
    assert skipped.annotations[protocol.ANN_STATE] == "Skipped" and not skipped.unschedulable
    assert protocol.ANN_CORDONED_BY_US not in skipped.annotations
    assert protocol.ANN_CURRENT not in skipped.annotations  # the agent was never asked
    assert nodes["node-001"].annotations[protocol.ANN_STATE] == "Done"
    assert ("node-000", "Skipped") in world.events


def test_crashes_between_writes_of_any_step_still_converge() -> None:
    for seed in range(30):
        nodes = fleet(5)
        nodes["node-001"].drain_blocked_until = T0.replace(second=20)
        world = World(nodes, spec(rollout={"maxUnavailable": 2, "canary": {"nodes": 0}}))
        final = world.run(drop=random.Random(seed))
        assert final.summary.complete, seed
        assert all(
            n.annotations[protocol.ANN_STATE] == "Done" and not n.unschedulable for n in nodes.values()
        )
        assert all(n.drains == 1 for n in nodes.values()), seed


# --- autoscalers: ours from our cordon until we give the node back -------------------------------------

KARPENTER, SCALE_DOWN = protocol.AUTOSCALER_ANNOTATIONS


def test_the_cordon_patch_adds_the_autoscaler_keys_the_user_did_not_set() -> None:
    first = writes(run(cordon())[0])[0]
    assert first.unschedulable is True
    assert first.annotations[KARPENTER] == first.annotations[SCALE_DOWN] == "true"
    assert first.annotations[protocol.ANN_AUTOSCALER_HOLD] == f"{KARPENTER},{SCALE_DOWN}"

    kept = writes(run(cordon(autoscaler_user=frozenset({SCALE_DOWN})))[0])[0]
    assert kept.annotations[KARPENTER] == "true" and SCALE_DOWN not in kept.annotations
    assert kept.annotations[protocol.ANN_AUTOSCALER_HOLD] == KARPENTER

    both = writes(run(cordon(autoscaler_user=frozenset(protocol.AUTOSCALER_ANNOTATIONS)))[0])[0]
    assert not set(protocol.AUTOSCALER_ANNOTATIONS) & set(both.annotations)
    assert both.annotations[protocol.ANN_AUTOSCALER_HOLD] is None  # nothing of ours to remove later


HELD = (KARPENTER,)  # our cordon added only this one; the user set SCALE_DOWN


def give_back_write(requests: list[steps.Request]) -> Write:
    (write,) = [w for w in writes(requests) if protocol.ANN_CORDONED_BY_US in w.annotations]
    return write


@pytest.mark.parametrize(
    "action",
    [
        Uncordon("n", "1", was_unschedulable=False, autoscaler_hold=HELD),
        Uncordon("n", "1", was_unschedulable=True, autoscaler_hold=HELD),
        Release("n", "1", keep_current=True, uncordon=True, was_unschedulable=False, autoscaler_hold=HELD),
        drain(deadline_reached=True, autoscaler_hold=HELD),
    ],
    ids=["uncordon", "kept-cordoned", "release", "drain-timeout"],
)
def test_giving_the_node_back_removes_exactly_our_autoscaler_keys_in_the_same_patch(action: Action) -> None:
    stuck = DrainResult(False, "PDB blocks eviction", frozenset({Blocker.EVICTION_REFUSED}))
    write = give_back_write(run(action, drain=stuck)[0])
    assert write.unschedulable is not None or isinstance(action, Release)
    assert write.annotations[protocol.ANN_CORDONED_BY_US] is None
    assert write.annotations[KARPENTER] is None and write.annotations[protocol.ANN_AUTOSCALER_HOLD] is None
    assert SCALE_DOWN not in write.annotations  # the user's value stays


def test_a_static_pod_skip_gives_back_what_its_own_cordon_added() -> None:
    # Seen before the cordon: Skipped in one write, never cordoned, so no autoscaler key at all.
    requests, _ = run(cordon(autoscaler_user=frozenset({SCALE_DOWN})), mirror=("kube-system/etcd-n",))
    (skip,) = writes(requests)
    assert KARPENTER not in skip.annotations and SCALE_DOWN not in skip.annotations
    # A static pod that appears after our cordon: the give-back removes exactly what the cordon added.
    seen, _ = run(
        cordon(autoscaler_user=frozenset({SCALE_DOWN})),
        mirror=("kube-system/etcd-n",),
        survey_mirror=(),
        pods_to_evict=True,
    )
    take, give = writes(seen)
    assert take.annotations[KARPENTER] == "true" and give.annotations[KARPENTER] is None
    assert SCALE_DOWN not in take.annotations and SCALE_DOWN not in give.annotations


def test_events_never_say_uncordoned_about_a_node_kept_cordoned() -> None:
    requests, _ = run(Uncordon("n", "1", was_unschedulable=True))
    assert events(requests) == [("Normal", "KeptCordoned")]
    requests, _ = run(Uncordon("n", "1", was_unschedulable=False))
    assert events(requests) == [("Normal", "Uncordoned")]


def test_autoscaler_hold_through_a_rollout_with_crashes_between_writes() -> None:
    """World model: the hold follows our cordon whatever prefix of a step happened; user values survive
    (World.tick checks both after every tick), and a hold list naming other keys is never obeyed."""
    for seed in range(20):
        nodes = fleet(4)
        nodes["node-000"].annotations[KARPENTER] = "false"  # the user's, any value
        nodes["node-002"].unschedulable = True  # cordoned before: kept cordoned, hold still removed
        nodes["node-003"].drain_blocked_until = T0.replace(second=15)
        world = World(
            nodes, spec(rollout={"maxUnavailable": 2, "canary": {"nodes": 0}, "takeCordonedNodes": True})
        )
        held_mid_rollout, rng = False, random.Random(seed)
        for _ in range(600):
            world.tick(drop=rng)
            held_mid_rollout |= nodes["node-003"].annotations.get(SCALE_DOWN) == "true"
            if world.plan().summary.complete:
                break
        assert world.plan().summary.complete and held_mid_rollout, seed
        for node in nodes.values():
            assert protocol.ANN_AUTOSCALER_HOLD not in node.annotations
        assert nodes["node-000"].annotations[KARPENTER] == "false"
        assert (
            SCALE_DOWN not in nodes["node-000"].annotations and KARPENTER not in nodes["node-001"].annotations
        )
    assert NodeMarks.parse(
        {protocol.ANN_AUTOSCALER_HOLD: f"example.com/other,{SCALE_DOWN}"}
    ).autoscaler_hold == (SCALE_DOWN,)


def test_the_released_event_says_what_became_of_the_cordon() -> None:
    def message(action: Release) -> str:
        (emit,) = [r for r in run(action)[0] if isinstance(r, Emit)]
        return emit.message

    base = Release("n", "1", keep_current=False, uncordon=False, was_unschedulable=False)
    assert message(base) == "no longer managed by NodeConfig cluster"
    assert message(replace(base, uncordon=True)).endswith("; uncordoned")
    kept = message(replace(base, uncordon=True, was_unschedulable=True))
    assert kept.endswith("; still cordoned: it was before the rollout")


# --- spec.drain.onBlocked: drains that could never finish -------------------------------------------------

NEVER = "default/db-0: PodDisruptionBudget default/db (maxUnavailable: 0) needs 1 of its 1 pod(s) healthy"
NEVER_RESULT = DrainResult(False, "evicting 1 pod(s)", frozenset({Blocker.NEVER_ALLOWED}), never=NEVER)


@pytest.mark.parametrize(
    ("policy", "state"), [(OnDrainBlocked.SKIP, "Skipped"), (OnDrainBlocked.FAIL, "Failed")]
)
def test_a_drain_that_could_never_finish_is_found_before_the_cordon(
    policy: OnDrainBlocked, state: str
) -> None:
    requests, end = run(cordon(drain=replace(POLICY, on_blocked=policy)), pods_to_evict=True, never=NEVER)
    assert [type(r) for r in requests] == [SurveyPods, Write, Emit]  # no cordon, no eviction
    (write,) = writes(requests)
    assert write.unschedulable is None and protocol.ANN_CORDONED_BY_US not in write.annotations
    assert write.annotations[protocol.ANN_STATE] == state and write.annotations[protocol.ANN_DESIRED] == "h"
    assert write.annotations[protocol.ANN_REASON] == (
        f"not cordoned: the drain could never finish: {NEVER} (drain.onBlocked: {policy})"
    )
    assert events(requests) == [("Warning", "DrainBlocked")] and end == StepEnd(NodeState(state))


def test_on_blocked_wait_leaves_the_node_in_service_and_says_so_once() -> None:
    wait = replace(POLICY, on_blocked=OnDrainBlocked.WAIT)
    requests, end = run(cordon(drain=wait), pods_to_evict=True, never=NEVER)
    (write,) = writes(requests)
    never = {
        protocol.ANN_OWNER: "cluster",
        protocol.ANN_BLOCKED: NEVER,
        protocol.ANN_CAUSE: protocol.Cause.DRAIN_BLOCKED,
    }
    assert write.annotations == never and write.unschedulable is None
    assert events(requests) == [("Warning", "DrainBlocked")] and end == StepEnd(drain_retry=True)
    # looked at again with the same blocker: nothing written, no second Event, looked at again later
    again, end = run(cordon(drain=wait, blocked=NEVER), pods_to_evict=True, never=NEVER)
    assert again == [SurveyPods()] and end == StepEnd(drain_retry=True)
    # the blocker is gone: the node is taken, and the cordon's own write clears the mark
    taken, end = run(cordon(drain=wait, blocked=NEVER), pods_to_evict=True)
    assert (
        writes(taken)[0].unschedulable is True and writes(taken)[0].annotations[protocol.ANN_BLOCKED] is None
    )
    assert end.transition == "Applying"


def test_a_blocker_found_after_the_cordon_gives_the_node_back_at_once_not_at_the_timeout() -> None:
    # a pod bound between the look and the cordon
    requests, end = run(cordon(), pods_to_evict=True, drain=NEVER_RESULT)
    cordoned, back = writes(requests)
    assert cordoned.unschedulable is True
    assert back.unschedulable is False and back.annotations[protocol.ANN_CORDONED_BY_US] is None
    assert back.annotations[protocol.ANN_STATE] == "Skipped" and end == StepEnd(NodeState.SKIPPED)
    assert "given back: the drain could never finish" in str(back.annotations[protocol.ANN_REASON])
    # a later attempt, long before the deadline (a budget tightened mid-drain)
    requests, end = run(drain(deadline_reached=False), drain=NEVER_RESULT)
    (back,) = writes(requests)
    assert back.unschedulable is False and back.annotations[protocol.ANN_STATE] == "Skipped"
    assert events(requests) == [("Warning", "DrainBlocked")]
    # Wait: given back as if never taken, so that it is taken again once the blocker is gone
    requests, end = run(drain(policy={"on_blocked": OnDrainBlocked.WAIT}), drain=NEVER_RESULT)
    (back,) = writes(requests)
    assert back.unschedulable is False and back.annotations[protocol.ANN_STATE] is None
    assert back.annotations[protocol.ANN_BLOCKED] == NEVER and end == StepEnd(drain_retry=True)


def test_a_refused_eviction_that_may_clear_by_itself_still_waits_for_the_timeout() -> None:
    refused = DrainResult(False, "eviction refused", frozenset({Blocker.EVICTION_REFUSED}))
    requests, end = run(drain(deadline_reached=False, reason="x"), drain=refused)
    assert [w.annotations for w in writes(requests)] == [{protocol.ANN_REASON: "eviction refused"}]
    assert end == StepEnd(drain_retry=True)


def test_blockers_that_cannot_clear_by_themselves_are_named_as_never() -> None:
    pod = {"metadata": {"namespace": "default", "name": "lonely"}, "status": {"phase": "Running"}}
    selection = drainpods.select_pods([pod], drainpods.Options(delete_empty_dir_data=True, force=False))
    result = drainpods.result(selection)
    assert result.never == "default/lonely has no controller (it would not come back); set drain.force: true"
    refused = EvictionProblem(PodRef("default", "web-0"), Blocker.EVICTION_REFUSED, "Cannot evict pod")
    web = {
        **pod,
        "metadata": {
            "namespace": "default",
            "name": "web-0",
            "ownerReferences": [{"controller": True, "kind": "ReplicaSet"}],
        },
    }
    selection = drainpods.select_pods([web], drainpods.Options(delete_empty_dir_data=True, force=False))
    assert drainpods.result(selection, [refused]).never == ""  # a PDB that may allow it later
    assert drainpods.result(selection, [refused], [NEVER]).never == NEVER


def test_with_force_delete_granted_no_drain_is_blocked_for_good() -> None:
    forced = replace(POLICY, on_timeout=OnDrainTimeout.FORCE_DELETE)
    requests, end = run(cordon(drain=forced), pods_to_evict=True, never=NEVER, drain=NEVER_RESULT)
    assert writes(requests)[0].unschedulable is True and end == StepEnd(NodeState.DRAINING, drain_retry=True)
    # not granted in this installation: the blocker stands, the node is never cordoned
    requests, end = run(cordon(drain=forced), pods_to_evict=True, never=NEVER, allow_force_delete=False)
    assert end == StepEnd(NodeState.SKIPPED) and writes(requests)[0].unschedulable is None
    assert str(writes(requests)[0].annotations[protocol.ANN_REASON]).endswith(FORCE_DELETE_DISABLED)
    # at its deadline a drain is decided by onTimeout, as before: a blocker does not change that
    requests, end = run(
        drain(deadline_reached=True, policy={"on_timeout": OnDrainTimeout.FORCE_DELETE}),
        drain=NEVER_RESULT,
        allow_force_delete=False,
    )
    assert end == StepEnd(NodeState.FAILED) and events(requests) == [("Warning", "DrainTimeout")]


def test_a_node_held_by_a_blocking_pod_or_another_owner_is_not_taken_and_said_once() -> None:
    @dataclass
    class Holding(Recorded):
        holding: str = ""

        def survey_pods(self) -> PodSurvey:
            self.requests.append(SurveyPods())
            return PodSurvey((), nothing_to_evict=True, holding=self.holding)

    text = "NodeMaintenance nm-1 (another maintenance owner) holds the node"
    for was, expected in (("", [SurveyPods, Write, Emit]), (text, [SurveyPods])):
        answers = Holding((), (), False, DrainResult(True), holding=text)
        end = steps.run(steps.step(cordon(blocked=was), clock=lambda: T0, nodeconfig="c"), answers)
        assert [type(r) for r in answers.requests] == expected and end == StepEnd(drain_retry=True)
    answers = Holding((), (), False, DrainResult(True), holding=text)
    steps.run(steps.step(cordon(), clock=lambda: T0, nodeconfig="c"), answers)
    (write,) = writes(answers.requests)
    held = {
        protocol.ANN_OWNER: "cluster",
        protocol.ANN_BLOCKED: text,
        protocol.ANN_CAUSE: None,
    }  # for now: no kind that lasts
    assert write.unschedulable is None and write.annotations == held


def test_a_node_uncordoned_by_someone_else_mid_drain_is_never_handed_to_the_agent() -> None:
    requests, end = run(drain(cordoned=False), drain=DrainResult(True))
    (write,) = writes(requests)
    assert AttemptDrain() not in requests and protocol.ANN_AGENT_OPTIONS not in write.annotations
    assert write.unschedulable is None  # their uncordon stands
    assert (
        write.annotations[protocol.ANN_CORDONED_BY_US] is None
        and write.annotations[protocol.ANN_STATE] == "Failed"
    )
    assert events(requests) == [("Warning", "UncordonedByOthers")] and end == StepEnd(NodeState.FAILED)


def test_holding_names_running_blocking_pods_and_other_maintenance_owners() -> None:
    def pod(name: str, phase: str, **labels: str) -> dict[str, Any]:
        return {"metadata": {"namespace": "ops", "name": name, "labels": labels}, "status": {"phase": phase}}

    pods = [
        pod("backup-1", "Running", job="backup"),
        pod("backup-0", "Succeeded", job="backup"),
        pod("web", "Running"),
    ]
    selector = LabelSelector(match_labels={"job": "backup"})
    assert drainpods.holding(pods, selector) == "runs ops/backup-1, which matches drain.blockingPodSelector"
    assert drainpods.holding(pods, LabelSelector()) == ""  # empty selector: the gate is off
    assert drainpods.holding([], LabelSelector(), ["NodeMaintenance nm"]) == (
        "NodeMaintenance nm (another maintenance owner) holds the node"
    )


def test_a_node_its_agent_would_refuse_is_skipped_without_a_look_or_a_cordon() -> None:
    refusal = (
        "Unsupported: /etc/crio/crio.conf.d/99-site.conf sets enable_pod_events = false "
        "(the agent's host check at 2026-11-25T00:00:00+00:00)"
    )
    requests, end = run(cordon(host_refusal=refusal), pods_to_evict=True)
    assert [type(r) for r in requests] == [Write, Emit] and end == StepEnd(NodeState.SKIPPED)
    (write,) = writes(requests)
    assert (
        write.unschedulable is None and write.annotations[protocol.ANN_REASON] == f"not cordoned: {refusal}"
    )
    assert events(requests) == [("Warning", "Unsupported")]


def test_in_place_asks_the_agent_without_a_cordon_or_an_eviction() -> None:
    """spec.drain.mode: InPlace on a node where it is safe; a PDB that would block a drain does not matter."""
    requests, end = run(cordon(in_place=True), pods_to_evict=True, never="pod a/db: PDB a/db allows none")
    (write,) = writes(requests)
    assert write.unschedulable is None  # spec.unschedulable is not touched
    marks = write.annotations
    assert (
        marks[protocol.ANN_STATE] == "Applying"
        and marks[protocol.ANN_DESIRED] == "h"
        and marks[protocol.ANN_OWNER] == "cluster"
    )
    assert protocol.ANN_CORDONED_BY_US not in marks and protocol.ANN_WAS_UNSCHEDULABLE not in marks
    assert (marks[protocol.ANN_REASON] or "").startswith("in place, not cordoned or drained")
    assert AttemptDrain() not in requests
    assert events(requests) == [("Normal", "InPlace")]
    assert end == StepEnd(NodeState.APPLYING)


def test_in_place_asked_but_unsafe_on_the_node_drains_it_first_and_says_why() -> None:
    why = "only Supported nodes are updated in place; this one is Risky: containerd 1.7"
    requests, end = run(cordon(drained_because=why), pods_to_evict=True)
    first, _ = writes(requests)
    assert first.unschedulable is True and first.annotations[protocol.ANN_STATE] == "Draining"
    assert events(requests) == [("Normal", "NotInPlace"), ("Normal", "Drained")]
    assert why in next(r.message for r in requests if isinstance(r, Emit) and r.reason == "NotInPlace")
    assert end == StepEnd(NodeState.APPLYING)


def test_in_place_on_a_node_whose_static_pods_appeared_since_drains_it_when_they_are_included() -> None:
    requests, _ = run(
        cordon(in_place=True, include_control_plane=True), survey_mirror=("kube-system/etcd-n",)
    )
    (write,) = writes(requests)
    assert write.unschedulable is True and write.annotations[protocol.ANN_CORDONED_BY_US] == "true"
    assert ("Normal", "NotInPlace") in events(requests)


# --- drain.taintBeforeCordon ---------------------------------------------------------------------------

OURS = Taint("eventedpleg.io/draining")
GPU = Taint("gpu", "a100", "NoSchedule")
TAINTING = replace(POLICY, taint=OURS, taint_seconds=30)
TAINTED = NodeTaints((GPU, OURS), ours=OURS.key, since=T0)  # ours on, with someone else's


def test_the_node_chosen_is_tainted_not_cordoned_and_keeps_the_taints_of_others() -> None:
    requests, end = run(cordon(drain=TAINTING, taints=NodeTaints((GPU,))), pods_to_evict=True)
    (write,) = writes(requests)
    assert write.taints == (GPU, OURS) and write.unschedulable is None
    assert write.annotations[protocol.ANN_TAINT] == OURS.key
    assert write.annotations[protocol.ANN_TAINTED_SINCE] == T0.isoformat(timespec="seconds")
    assert events(requests) == [("Normal", "Tainted")]
    assert end == StepEnd()  # not in progress yet: the planner cordons it once the 30 s are over


def test_after_the_wait_the_cordon_keeps_our_taint_on() -> None:
    requests, end = run(cordon(drain=TAINTING, taints=TAINTED), pods_to_evict=True)
    take = writes(requests)[0]
    assert take.unschedulable is True and take.taints is None  # the taint stays while the node is ours
    assert protocol.ANN_TAINT not in take.annotations
    assert end.transition is NodeState.APPLYING


def test_a_taint_with_our_key_set_before_us_is_kept_and_never_marked_ours() -> None:
    theirs = Taint(OURS.key, "maintenance", "NoSchedule")
    requests, _ = run(cordon(drain=TAINTING, taints=NodeTaints((theirs,))), pods_to_evict=True)
    (write,) = writes(requests)
    assert write.taints is None  # the list is not touched
    assert write.annotations[protocol.ANN_TAINT] is None and protocol.ANN_TAINTED_SINCE in write.annotations
    # given back later: their taint stays (nothing of ours to take off)
    back = NodeTaints((theirs,), ours="", since=T0)
    (give,) = writes(run(Uncordon("n", "1", was_unschedulable=False, taints=back))[0])
    assert give.taints is None and give.annotations[protocol.ANN_TAINTED_SINCE] is None


@pytest.mark.parametrize(
    "action",
    [
        Uncordon("n", "1", was_unschedulable=False, taints=TAINTED),
        Release("n", "1", keep_current=True, uncordon=True, was_unschedulable=False, taints=TAINTED),
        drain(deadline_reached=True, taints=TAINTED),
        drain(cordoned=False, taints=TAINTED),  # uncordoned by someone else mid-drain
    ],
    ids=["uncordon", "release", "drain-timeout", "uncordoned-by-others"],
)
def test_every_give_back_takes_our_taint_off_and_only_ours(action: Action) -> None:
    stuck = DrainResult(False, "PDB blocks eviction", frozenset({Blocker.EVICTION_REFUSED}))
    (write,) = [w for w in writes(run(action, drain=stuck)[0]) if w.taints is not None]
    assert write.taints == (GPU,)
    assert (
        write.annotations[protocol.ANN_TAINT] is None
        and write.annotations[protocol.ANN_TAINTED_SINCE] is None
    )


@pytest.mark.parametrize("why", ["host refusal", "static pods", "never", "holding"])
def test_a_node_not_taken_after_its_wait_loses_our_taint(why: str) -> None:
    action = cordon(drain=TAINTING, taints=TAINTED, host_refusal="no" if why == "host refusal" else "")

    class Holding(Recorded):
        def survey_pods(self) -> PodSurvey:
            self.requests.append(SurveyPods())
            return PodSurvey((), nothing_to_evict=False, holding="blocking pod default/backup")

    if why == "holding":
        answers = Holding((), (), True, DrainResult(True))
        steps.run(steps.step(action, clock=lambda: T0, nodeconfig="cluster"), answers)
        requests = answers.requests
    else:
        mirror = ("kube-system/etcd-n",) if why == "static pods" else ()
        requests, _ = run(action, mirror=mirror, never=NEVER if why == "never" else "")
    (write,) = writes(requests)
    assert write.taints == (GPU,) and write.unschedulable is None  # never cordoned
    assert (
        write.annotations[protocol.ANN_TAINT] is None
        and write.annotations[protocol.ANN_TAINTED_SINCE] is None
    )


def test_in_place_puts_no_taint_on_and_takes_ours_off() -> None:
    """No eviction comes, so nothing to warn of: no taint; one of ours from before (the mode changed
    during its wait) goes in the same write as the apply request."""
    requests, _ = run(cordon(in_place=True, drain=TAINTING, taints=NodeTaints((GPU,))), pods_to_evict=True)
    (write,) = writes(requests)
    assert write.taints is None and write.annotations[protocol.ANN_STATE] == "Applying"
    requests, _ = run(cordon(in_place=True, drain=TAINTING, taints=TAINTED), pods_to_evict=True)
    (write,) = writes(requests)
    assert write.taints == (GPU,) and write.unschedulable is None
    assert (
        write.annotations[protocol.ANN_TAINT] is None and write.annotations[protocol.ANN_STATE] == "Applying"
    )


KEPT = 'ml/train-0 annotated karpenter.sh/do-not-disrupt: "true"'
KEPT_RESULT = DrainResult(False, KEPT, frozenset({Blocker.DO_NOT_DISRUPT}), never=KEPT, protected=KEPT)


@pytest.mark.parametrize("allow_force_delete", [True, False])
def test_a_pod_that_asks_not_to_be_disrupted_blocks_even_a_granted_force_delete(
    allow_force_delete: bool,
) -> None:
    forced = replace(POLICY, on_timeout=OnDrainTimeout.FORCE_DELETE)
    # found before the cordon: not cordoned, Skipped, the pod and its annotation named
    requests, end = run(
        cordon(drain=forced),
        pods_to_evict=True,
        never=KEPT,
        protected=KEPT,
        allow_force_delete=allow_force_delete,
    )
    assert [type(r) for r in requests] == [SurveyPods, Write, Emit] and end == StepEnd(NodeState.SKIPPED)
    (write,) = writes(requests)
    assert write.unschedulable is None and KEPT in str(write.annotations[protocol.ANN_REASON])
    # a forced delete at the deadline leaves such a pod: the node is given back, never held cordoned
    requests, end = run(
        drain(deadline_reached=True, policy={"on_timeout": OnDrainTimeout.FORCE_DELETE}),
        drain=KEPT_RESULT,
        allow_force_delete=True,
    )
    assert AttemptDrain(force_delete=True) in requests  # deleted what it could
    (back,) = writes(requests)
    assert back.unschedulable is False and back.annotations[protocol.ANN_CORDONED_BY_US] is None
    assert end == StepEnd(NodeState.SKIPPED) and events(requests) == [("Warning", "DrainBlocked")]


def test_a_pod_that_asks_not_to_be_disrupted_waits_in_service_with_on_blocked_wait() -> None:
    wait = replace(POLICY, on_blocked=OnDrainBlocked.WAIT)
    requests, end = run(cordon(drain=wait), pods_to_evict=True, never=KEPT, protected=KEPT)
    (write,) = writes(requests)
    kept = {
        protocol.ANN_OWNER: "cluster",
        protocol.ANN_BLOCKED: KEPT,
        protocol.ANN_CAUSE: protocol.Cause.DRAIN_BLOCKED,
    }
    assert write.annotations == kept and write.unschedulable is None
    assert end == StepEnd(drain_retry=True)
