"""`eventedpleg preflight` and the operator's Cordon step judge a node alike: for
generated nodes (pods asking not to be disrupted, PodDisruptionBudgets, static pods, blocking pods,
NodeMaintenance claims, host refusals, drain options), preflight's take verdict is what the step does
when the planner's own Cordon action for that node runs against the same pods."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from eventedpleg import protocol
from eventedpleg.cli import report
from eventedpleg.core import compat, hostcheck
from eventedpleg.core.rollout import steps
from eventedpleg.core.rollout.drain import pods as drainpods
from eventedpleg.core.rollout.drain.budgets import Elsewhere
from eventedpleg.core.rollout.drain.placement import destination_of
from eventedpleg.core.rollout.drain.pods import DrainResult
from eventedpleg.core.rollout.drain.survey import PodSurvey, survey
from eventedpleg.core.rollout.drain.takeverdict import RETRY_WAITS, SkipCause, TakeKind, TakeVerdict
from eventedpleg.core.rollout.planner.taking import cordon_action
from eventedpleg.core.rollout.snapshot import Target, node_view
from eventedpleg.core.rollout.steps import AttemptDrain, Emit, Request, Write
from eventedpleg.models.nodeconfig import NodeConfigSpec

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
NODE = "n1"
TAINT_KEY = "eventedpleg.io/draining"

ANNOTATIONS = st.sampled_from(
    [
        {},
        {"karpenter.sh/do-not-disrupt": "true"},
        {"karpenter.sh/do-not-disrupt": "false"},
        {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"},
        {"kubernetes.io/config.mirror": "x"},
        {"eventedpleg.io/drain": "skip"},
    ]
)


@st.composite
def pods(draw: st.DrawFn) -> list[dict[str, Any]]:
    out = []
    for i in range(draw(st.integers(0, 4))):
        meta: dict[str, Any] = {
            "namespace": "shop",
            "name": f"p{i}",
            "labels": {"app": draw(st.sampled_from(["db", "web", "batch"]))},
            "annotations": draw(ANNOTATIONS),
        }
        if draw(st.booleans()):
            kind = draw(st.sampled_from(["ReplicaSet", "DaemonSet"]))
            meta["ownerReferences"] = [{"controller": True, "kind": kind, "name": "owner"}]
        volumes = [{"name": "scratch", "emptyDir": {}}] if draw(st.booleans()) else []
        ready = draw(st.booleans())
        phase = draw(st.sampled_from(["Running", "Running", "Succeeded"]))
        status = {"phase": phase, "conditions": [{"type": "Ready", "status": str(ready)}]}
        out.append({"metadata": meta, "spec": {"nodeName": NODE, "volumes": volumes}, "status": status})
    return out


@st.composite
def pdbs(draw: st.DrawFn) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for app in draw(st.lists(st.sampled_from(["db", "web"]), max_size=3)):
        expected = draw(st.integers(1, 3))
        desired = draw(st.integers(0, expected))
        out.append(
            {
                "metadata": {"namespace": "shop", "name": f"pdb-{app}-{len(out)}", "generation": 1},
                "spec": {"maxUnavailable": expected - desired, "selector": {"matchLabels": {"app": app}}},
                "status": {
                    "observedGeneration": 1,
                    "expectedPods": expected,
                    "desiredHealthy": desired,
                    "disruptionsAllowed": draw(st.integers(0, expected)),  # now: a pod may be restarting
                },
            }
        )
    return out


@st.composite
def other_nodes(draw: st.DrawFn) -> list[dict[str, Any]]:
    """The rest of the cluster, where the pods to evict could go (none: a single-worker cluster)."""
    out = []
    for i in range(draw(st.integers(0, 2))):
        taints = [{"key": "dedicated", "effect": "NoSchedule"}] if draw(st.booleans()) else []
        body = {
            "metadata": {"name": f"other-{i}", "labels": {}},
            "spec": {"unschedulable": draw(st.booleans()), "taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": str(draw(st.booleans()))}]},
        }
        out.append(body)
    return out


@st.composite
def pending_pods(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Pods of the namespace the scheduler found no node for."""
    said = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    return [
        {
            "metadata": {"namespace": "shop", "name": f"pending-{i}", "labels": {"app": app}},
            "spec": {},
            "status": {"phase": "Pending", "conditions": [said]},
        }
        for i, app in enumerate(draw(st.lists(st.sampled_from(["db", "web"]), max_size=2)))
    ]


@st.composite
def specs(draw: st.DrawFn) -> NodeConfigSpec:
    drain: dict[str, Any] = {
        "onBlocked": draw(st.sampled_from(["Skip", "Wait", "Fail"])),
        "onTimeout": draw(st.sampled_from(["Fail", "Skip", "ForceDelete"])),
        "force": draw(st.booleans()),
        "deleteEmptyDirData": draw(st.booleans()),
        "mode": draw(st.sampled_from(["CordonAndDrain", "InPlace"])),
        "inPlace": {"onIneligible": draw(st.sampled_from(["Drain", "Skip"]))},
    }
    if draw(st.booleans()):
        drain["blockingPodSelector"] = {"matchLabels": {"app": "batch"}}
    if draw(st.booleans()):
        drain["taintBeforeCordon"] = {"key": TAINT_KEY, "seconds": 30}
    return NodeConfigSpec.model_validate(
        {
            "eventedPleg": draw(st.booleans()),
            "includeControlPlane": draw(st.booleans()),
            "allowRisky": True,
            "rollout": {"canary": {"nodes": 0}},
            "drain": drain,
        }
    )


@st.composite
def node_bodies(draw: st.DrawFn) -> dict[str, Any]:
    annotations: dict[str, str] = {}
    if draw(st.booleans()):
        refusals = {"DropInOnly": draw(st.sampled_from(["", "no kubelet --config-dir"]))}
        annotations[protocol.ANN_HOST_CHECK] = hostcheck.HostCheck(NOW, refusals).to_json()
    taints = []
    if draw(st.booleans()):  # our taint went on a while ago (drain.taintBeforeCordon)
        annotations |= {
            protocol.ANN_TAINT: TAINT_KEY,
            protocol.ANN_TAINTED_SINCE: NOW.isoformat(timespec="seconds"),
        }
        taints = [{"key": TAINT_KEY, "effect": "PreferNoSchedule"}]
    if draw(st.booleans()):  # its drain timed out; the automatic retry is due (drain.retries)
        annotations |= {
            protocol.ANN_OWNER: "cluster",
            protocol.ANN_STATE: "Failed",
            protocol.ANN_STATE_SINCE: NOW.isoformat(timespec="seconds"),
            protocol.ANN_DRAIN_TIMEOUTS: "1",
        }
    labels = {"node-role.kubernetes.io/control-plane": ""} if draw(st.booleans()) else {}
    runtime = draw(st.sampled_from(["containerd://2.2.9", "containerd://1.7.35"]))  # Supported, Risky
    return {
        "metadata": {"name": NODE, "resourceVersion": "7", "annotations": annotations, "labels": labels},
        "spec": {"taints": taints},
        "status": {"nodeInfo": {"kubeletVersion": "v1.36.4", "containerRuntimeVersion": runtime}},
    }


@dataclass
class _Recorder:
    """Answers a step from the pods as listed, as the executor does (one survey function for both)."""

    pods: list[dict[str, Any]]
    pdbs: list[dict[str, Any]]
    maintenance: list[str]
    spec: NodeConfigSpec
    others: list[dict[str, Any]] = field(default_factory=list)  # the other nodes, as listed
    pending: list[dict[str, Any]] = field(default_factory=list)  # Pending pods of the namespace
    requests: list[Request] = field(default_factory=list)

    def write(self, request: Write) -> None:
        self.requests.append(request)

    def survey_pods(self) -> PodSurvey:
        drain = Target("cluster", self.spec, NOW, 1, "on", "off").drain
        elsewhere = Elsewhere(
            lambda: [destination_of(node_view(body)) for body in self.others], lambda _: self.pending
        )
        return survey(
            self.pods,
            drain,
            now=NOW,
            pdbs=lambda _: self.pdbs,
            maintenance=self.maintenance,
            elsewhere=elsewhere,
        )

    def find_mirror_pods(self) -> tuple[str, ...]:
        return self.survey_pods().mirror_pods

    def attempt_drain(self, request: AttemptDrain) -> DrainResult:
        drain = Target("cluster", self.spec, NOW, 1, "on", "off").drain
        return drainpods.result(drainpods.select_pods(self.pods, drain.options(NOW)))

    def emit(self, request: Emit) -> None:
        self.requests.append(request)


def _acted(requests: list[Request]) -> tuple[TakeKind, str]:
    """What the step did, read from its requests alone: the kind of verdict it acted on, and the
    message of its first Event."""
    events = [r for r in requests if isinstance(r, Emit)]
    message = events[0].message if events else ""
    if any(isinstance(r, Write) and r.unschedulable for r in requests):
        return TakeKind.TAKE, message
    reasons = {e.reason for e in events}
    for reason, kind in (
        ("Unsupported", TakeKind.SKIP),
        ("Skipped", TakeKind.SKIP),
        ("NotInPlace", TakeKind.SKIP),
        ("NodeHeld", TakeKind.HOLD),
        ("DrainBlocked", TakeKind.BLOCK),
        ("InPlace", TakeKind.IN_PLACE),
        ("Tainted", TakeKind.TAINT),
    ):
        if reason in reasons:
            return kind, message
    raise AssertionError(f"a Cordon step that did nothing anyone can see: {requests}")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=specs(),
    body=node_bodies(),
    listed=pods(),
    budgets=pdbs(),
    maintenance=st.sampled_from([[], ["NodeMaintenance fix-disk"]]),
    allow_force_delete=st.booleans(),
    others=other_nodes(),
    pending=pending_pods(),
)
def test_preflight_shows_the_verdict_the_cordon_step_acts_on(
    spec: NodeConfigSpec,
    body: dict[str, Any],
    listed: list[dict[str, Any]],
    budgets: list[dict[str, Any]],
    maintenance: list[str],
    allow_force_delete: bool,
    others: list[dict[str, Any]],
    pending: list[dict[str, Any]],
) -> None:
    """Over drawn pods, budgets (with what they allow now), the rest of the cluster and its Pending pods,
    and nodes whose automatic drain retry is due: the budget rules before the cordon and the retry's
    re-check are the same in both."""
    view = node_view(body)
    policy = compat.Policy(spec.include_control_plane, spec.allow_risky, spec.runtime.value)
    target = Target("cluster", spec, NOW, 1, "on", "off")
    (row,) = report.preflight_rows(
        [view],
        policy,
        listed + pending,
        budgets,
        target.drain,
        spec.kubelet_config.value,
        now=NOW,
        turning_on=spec.evented_pleg,
        maintenance={NODE: maintenance},
        allow_force_delete=allow_force_delete,
        cluster=[view, *(node_view(other) for other in others)],
    )
    want = target.hash_on if spec.evented_pleg else target.hash_off
    action = cordon_action(view, target, want, policy)
    answers = _Recorder(listed, budgets, maintenance, spec, others, pending)
    steps.run(
        steps.step(action, clock=lambda: NOW, nodeconfig="cluster", allow_force_delete=allow_force_delete),
        answers,
    )
    kind, message = _acted(answers.requests)
    assert row.take.kind is kind, (row.take, answers.requests)
    event(f"verdict {kind}")  # --hypothesis-show-statistics: the new budget rules are drawn
    if "no replacement can become healthy" in row.take.why:
        event("a budget short of what the drain needs, replacements stuck")
    if RETRY_WAITS in row.take.why:
        event("an automatic retry held by a budget that allows 0 now")
    if kind in (TakeKind.HOLD, TakeKind.BLOCK) or row.take.cause is SkipCause.HOST:
        assert row.take.why in message  # the same cause, named alike
    taken = row.taken(policy, target.drain)
    if row.verdict.eligible(policy):  # preflight's count of taken nodes follows the verdict too
        blocked = kind is TakeKind.BLOCK and spec.drain.on_blocked.value != "Wait"
        assert taken is not (kind is TakeKind.SKIP or blocked)


def _body(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "resourceVersion": "1", "annotations": annotations or {}, "labels": {}},
        "spec": {},
        "status": {
            "nodeInfo": {"kubeletVersion": "v1.36.4", "containerRuntimeVersion": "containerd://2.2.9"}
        },
    }


def test_the_verdict_names_what_preflight_used_to_miss() -> None:
    """A blocking pod, a NodeMaintenance and InPlace were not looked at by preflight before it read the
    step's classification; a refusal is only read when turning on, as the operator does."""
    spec = NodeConfigSpec.model_validate(
        {"eventedPleg": True, "drain": {"blockingPodSelector": {"matchLabels": {"app": "batch"}}}}
    )
    target = Target("cluster", spec, NOW, 1, "on", "off")
    batch = {
        "metadata": {"namespace": "shop", "name": "nightly", "labels": {"app": "batch"}},
        "spec": {"nodeName": "a"},
        "status": {"phase": "Running"},
    }
    bodies = [node_view(_body(name)) for name in ("a", "b")]
    policy = compat.Policy()
    rows = report.preflight_rows(
        bodies, policy, [batch], [], target.drain, now=NOW, maintenance={"b": ["NodeMaintenance disk"]}
    )
    assert [row.take for row in rows] == [
        TakeVerdict(TakeKind.HOLD, "runs shop/nightly, which matches drain.blockingPodSelector"),
        TakeVerdict(TakeKind.HOLD, "NodeMaintenance disk (another maintenance owner) holds the node"),
    ]
    assert all(row.taken(policy, target.drain) for row in rows)  # in service for now, taken later
    table = report.preflight_table(rows, policy, target.drain, wide=True)
    assert "2 of them held where they are, not cordoned while that lasts: a, b" in table
    assert all("  held  " in line for line in table.splitlines()[1:3])  # the DRAIN column
    in_place = NodeConfigSpec.model_validate({"eventedPleg": True, "drain": {"mode": "InPlace"}})
    (row,) = report.preflight_rows(
        bodies[1:], policy, [], [], Target("c", in_place, NOW, 1, "on", "off").drain, now=NOW
    )
    assert row.take == TakeVerdict(TakeKind.IN_PLACE)
    refuses = hostcheck.HostCheck(NOW, {"DropInOnly": "no kubelet --config-dir"}).to_json()
    checked = node_view(_body("b", {protocol.ANN_HOST_CHECK: refuses}))
    (off,) = report.preflight_rows([checked], policy, [], [], target.drain, now=NOW, turning_on=False)
    (on,) = report.preflight_rows([checked], policy, [], [], target.drain, now=NOW)
    assert (off.take.kind, off.refusal) == (TakeKind.TAKE, "")  # taking our files off is never refused
    assert (on.take.kind, on.take.cause, on.refusal) == (
        TakeKind.SKIP,
        SkipCause.HOST,
        "no kubelet --config-dir",
    )
