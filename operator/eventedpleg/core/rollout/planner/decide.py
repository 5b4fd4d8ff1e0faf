"""One node's part of a pass: `decide(node, inputs, selection) -> NodeDecision`, pure. At most one action
for the node, its Tally, its notes, whether it may start (a candidate) and the deadlines it waits for.
The parts of all nodes add up to the pass (plan.py); the whole-cluster gates come after (gates.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

from eventedpleg.constants import Cause, NodeState
from eventedpleg.core import compat, hostcheck
from eventedpleg.core.evidence import Evidence
from eventedpleg.core.rollout import actions, agentpod, retry
from eventedpleg.core.rollout.actions import (
    Action,
    AskApproval,
    Drain,
    MarkFailed,
    Release,
    SetAgentOptions,
    Uncordon,
    approval_text,
)
from eventedpleg.core.rollout.drain.policy import DrainPolicy
from eventedpleg.core.rollout.drain.take import NodeToTake
from eventedpleg.core.rollout.planner import skips
from eventedpleg.core.rollout.planner.selection import Selection, skip_reason
from eventedpleg.core.rollout.planner.summary import HeldNode, NodeNote, OwnerConflict
from eventedpleg.core.rollout.planner.tally import Count, Tally, tally_of
from eventedpleg.core.rollout.snapshot import NodeMarks, NodeView, Target
from eventedpleg.models.nodeconfig import Approval
from eventedpleg.protocol import AGENT_PHASE, IN_PROGRESS, format_time

# Status notes of a node not taken because its agent shows no sign of life start with this.
NO_AGENT = "not cordoned, no live agent: "

# Status notes of a node left in service by the Cordon step's last look (eventedpleg.io/blocked).
BLOCKED = "waiting, not cordoned: "

# The agent gets the verification timeout plus this much for restarts and reporting before we give up.
AGENT_GRACE = timedelta(seconds=120)


@dataclass(frozen=True)
class Inputs:
    """What every node of a pass is decided against."""

    target: Target
    policy: compat.Policy
    want: str  # the hash selected, eligible nodes should get
    now: datetime


class NodeDecision(NamedTuple):
    """What one node adds to a pass. It depends only on the node, the inputs' target and, for a node whose
    deadline is pending, on `now`: `forever` when it holds for any `now`, else while now < `until`
    (None: for this pass only). A NamedTuple: immutable, and made once per node and pass, five times
    cheaper than a frozen dataclass."""

    node: NodeView
    forever: bool
    until: datetime | None
    tally: Tally
    notes: tuple[NodeNote, ...]  # failures and retrying are among them too
    failures: tuple[NodeNote, ...]
    retrying: tuple[NodeNote, ...]
    conflicts: tuple[OwnerConflict, ...]
    foreign: tuple[HeldNode, ...]  # unavailable, and not because of us
    action: Action | None
    candidate: str | None  # may start, towards this hash
    done: bool  # Done at the wanted hash (a canary that passed)
    wakes: tuple[datetime, ...]

    def valid(self, now: datetime) -> bool:
        return self.forever or (self.until is not None and now < self.until)

    @property
    def noteworthy(self) -> bool:
        """Has something for the pass beyond its Tally (the memo sorts only these)."""
        return bool(self.notes or self.conflicts or self.action or self.foreign or self.wakes)


def decide(node: NodeView, inputs: Inputs, selection: Selection) -> NodeDecision:
    return _Decider(node, inputs).decide(selection)


class _Decider:
    """Builds one NodeDecision; records whether it read the clock (then it holds only until a wake)."""

    __slots__ = (
        "action", "candidate", "conflicts", "counted", "done", "failures", "foreign", "fresh_until", "inputs",
        "node", "notes", "read_clock", "retrying", "target", "wakes", "want",
    )  # fmt: skip

    def __init__(self, node: NodeView, inputs: Inputs) -> None:
        self.node, self.inputs, self.target, self.want = node, inputs, inputs.target, inputs.want
        self.read_clock = False
        self.fresh_until: datetime | None = None  # the decision took the agent as live until then
        self.counted: list[Count] = []  # the Tally's counters this node adds one to, in the order counted
        # Most nodes have nothing to say: tuples, grown only by the few that do.
        self.notes: tuple[NodeNote, ...] = ()
        self.failures: tuple[NodeNote, ...] = ()
        self.retrying: tuple[NodeNote, ...] = ()
        self.conflicts: tuple[OwnerConflict, ...] = ()
        self.foreign: tuple[HeldNode, ...] = ()
        self.wakes: tuple[datetime, ...] = ()
        self.action: Action | None = None
        self.candidate: str | None = None
        self.done = False

    @property
    def now(self) -> datetime:
        self.read_clock = True
        return self.inputs.now

    def count(self, name: Count, when: bool = True) -> None:
        if when:
            self.counted.append(name)

    def note(self, state: str, reason: str, *, stuck: bool = False, cause: Cause | None = None) -> None:
        """Name the node in status; its cause is the one given, else the one on the node (ANN_CAUSE)."""
        marks = self.node.marks
        kind = cause or marks.cause
        self.notes += (
            NodeNote(self.node.name, state, reason, marks.since, marks.evidence, stuck=stuck, cause=kind),
        )

    def act(self, action: Action | None) -> None:
        self.action = action

    def decide(self, selection: Selection) -> NodeDecision:
        self._visit(selection)
        wakes = self.wakes
        # A decision that read the clock compared it only with the wakes it recorded (deadlines from the
        # node's `since`): it holds until the earliest of them. One that found the agent live holds until
        # its host check goes stale (without a wake: the next pass after that is soon enough).
        until = min(wakes) if self.read_clock and wakes and self.node.marks.since is not None else None
        fresh = self.fresh_until
        if fresh is not None and (until is not None or not self.read_clock):
            until = fresh if until is None else min(until, fresh)
        return NodeDecision(
            node=self.node,
            forever=not self.read_clock and fresh is None,
            until=until,
            tally=tally_of(tuple(self.counted)),
            notes=self.notes,
            failures=self.failures,
            retrying=self.retrying,
            conflicts=self.conflicts,
            foreign=self.foreign,
            action=self.action,
            candidate=self.candidate,
            done=self.done,
            wakes=wakes,
        )

    def _visit(self, selection: Selection) -> None:
        node, target, marks = self.node, self.target, self.node.marks
        ours = marks.owner == target.name
        self.count(Count.OWNED, ours)
        if (selection.selected or ours) and _unavailable(node, target):
            self.count(Count.UNAVAILABLE)
            if not (
                ours and (marks.state in IN_PROGRESS or marks.cordoned_by_us or marks.waiting_for_cordon)
            ):
                self.foreign += (HeldNode(node.name, "NotReady" if not node.ready else "cordoned"),)
        if selection.selected:
            self.count(Count.TOTAL)
        if selection.eligible:
            self.count(Count.ELIGIBLE)
            self._managed(ours)
            return
        if selection.selected:
            self.count(Count.SKIPPED)
            self.count(skips.COUNTERS[skips.SkippedFor.NOT_ELIGIBLE])
            self.note(NodeState.SKIPPED, skip_reason(node, selection, target, self.inputs.policy))
            if selection.owner != target.name:
                self.conflicts += (OwnerConflict(node.name, selection.owner),)
        if ours:
            self._let_go()

    def _agent_absence(self) -> str:
        """Why the node's agent shows no sign of life now: no fresh host check (core.hostcheck.absence), or
        its pod not Ready for longer than GONE_GRACE (agentpod.pod_absence); "" when it does. Neither reads
        the clock for the memo: each answer holds until its view changes, or until `fresh_until`."""
        node, now = self.node, self.inputs.now
        absent = hostcheck.absence(node.marks.host_check, now) or agentpod.pod_absence(node.agent_pod, now)
        if not absent:
            check = hostcheck.parse(node.marks.host_check)
            assert check is not None  # fresh
            self.fresh_until = check.fresh_until
            if (gone_at := self._pod_gone_at()) is not None:  # not Ready, within its grace: live till then
                self.fresh_until = min(self.fresh_until, gone_at)
                self.wakes += (gone_at,)
        return absent

    def _pod_gone_at(self) -> datetime | None:
        pod = self.node.agent_pod
        return None if pod is None else pod.gone_at

    def _offer(self, want: str) -> None:
        """The node may be taken towards `want`: a candidate while its agent is live. Without one it is not
        taken (named in status); a deletion gives it back as it is, as nothing can revert it."""
        absent = self._agent_absence()
        node, target = self.node, self.target
        if not absent and node.agent_pod is not None and not node.agent_pod.ready and not target.deleting:
            # Within its grace a not-Ready agent still counts as live for a node already taken; a node is
            # never taken while its agent pod is not Ready at all (its Ready event plans the node again).
            self.count(Count.NO_AGENT)
            self.note(NodeState.PENDING, NO_AGENT + node.agent_pod.not_ready, cause=Cause.NO_AGENT)
            return
        if not absent:
            self._candidate(want)
            return
        if target.deleting:
            if node.marks.owner == target.name:
                self.count(Count.IN_FLIGHT)
                left = f"not reverted: {absent}; {_LEFT}"
                self.note(node.marks.state or NodeState.PENDING, left)
                self.act(_release(node, keep_current=True, left=left))
            return
        self.count(Count.NO_AGENT)
        self.note(NodeState.PENDING, NO_AGENT + absent, cause=Cause.NO_AGENT)

    def _managed(self, ours: bool) -> None:
        """A selected, eligible node: drive it to `want`."""
        node, marks, target, want = self.node, self.node.marks, self.target, self.want
        if ours and target.deleting and marks.state in _FAILED:
            self._let_go_failed()
            return
        if ours and marks.state in IN_PROGRESS:
            self.count(Count.IN_FLIGHT)
            self.count(Count.UPDATING)
            self.note(marks.state.value, marks.reason or _progress_text(marks.state))
            if target.deleting and not target.reverting and marks.state not in AGENT_PHASE:
                self.act(_release(node, keep_current=True))  # onDelete: Keep stops before the agent
            else:
                self.act(self._step(want))
            return
        if ours and marks.waiting_for_cordon:
            self._tainted()
            return
        give_back = ours and marks.cordoned_by_us
        if ours and retry.requested(node, target.retry):  # `eventedpleg retry`: not a failure any more
            self.count(Count.IN_FLIGHT, give_back)
            self.note(marks.state or NodeState.FAILED, f"retry requested: {marks.reason}")
            if give_back:
                self.act(_uncordon(node))  # our cordon off first; then it is taken again like any other
            else:
                self._offer(want)
            return
        if ours and self._drain_retry():
            return
        if give_back and marks.state is not NodeState.FAILED:
            self.count(Count.IN_FLIGHT)  # not complete (so not Available) while our cordon is still on
        if ours and self._ended(give_back):
            return
        if _converged(node, want, target.hash_off):
            self.count(Count.UPDATED)
            self.done = marks.current == want and marks.state is NodeState.DONE
            if target.deleting and ours:  # the release undoes our cordon too: one write, not two
                self.act(_release(node, keep_current=not target.reverting))
            elif give_back:
                self.act(_uncordon(node))
            elif ours and target.agent_options and marks.agent_options != target.agent_options:
                self.act(SetAgentOptions(node.name, node.resource_version, target.agent_options))
            return
        if give_back:
            self.act(_uncordon(node))  # finished an older hash; hand it back before taking it again
        elif target.deleting and not target.reverting:
            self.act(_release(node, keep_current=True) if ours else None)
        else:
            self._offer(want)

    def _ended(self, give_back: bool) -> bool:
        """A node of ours the agent or a step left Failed, RolledBack or Skipped: what that leaves to do.
        True when this decides the node."""
        node, marks, want = self.node, self.node.marks, self.want
        if marks.state is NodeState.FAILED and give_back and marks.desired != want == self.target.hash_off:
            self.act(_uncordon(node))  # eventedPleg turned off after it failed: given back first
            return True
        if marks.state is NodeState.FAILED and (marks.cordoned_by_us or marks.desired == want):
            self._failure()  # a node whose rollback failed stays cordoned for a human
            return True
        if marks.state is NodeState.ROLLED_BACK and marks.desired == want:
            self._failure()
            self.act(_uncordon(node) if give_back else None)
            return True
        if marks.state is NodeState.SKIPPED and marks.desired == want:
            self.count(Count.SKIPPED)
            if (cause := skips.skip_cause(marks)) is not None:
                self.count(skips.COUNTERS[cause])
            self.note(NodeState.SKIPPED, marks.reason)
            if self.target.deleting:  # unchanged: nothing to revert (onDelete: Keep lands here)
                self.act(_release(node, keep_current=True))
            else:
                self.act(_uncordon(node) if give_back else None)
            return True
        return False

    def _candidate(self, want: str) -> None:
        """The node may start towards `want`, once a person approved it for `want` (approval: Manual; a
        node being reverted on deletion needs none). Until then it stays in service, untouched but for the
        mark that its Event was sent."""
        node, marks, target = self.node, self.node.marks, self.target
        if (
            target.spec.rollout.approval is Approval.MANUAL
            and not target.deleting
            and target.approved.get(node.name) != want
        ):
            self.count(Count.AWAITING_APPROVAL)
            self.note(NodeState.AWAITING_APPROVAL, approval_text(node.name, want))
            if marks.awaiting_approval != want:
                self.act(AskApproval(node.name, node.resource_version, want))
            return
        self.candidate = want
        self.count(Count.OFFERED)
        if marks.blocked:  # left in service when last looked at; the Cordon step looks again
            stuck = (
                marks.cause is Cause.DRAIN_BLOCKED
            )  # a drain that could never finish: waiting alone won't do
            self.count(Count.STUCK, stuck)
            self.note(NodeState.PENDING, f"{BLOCKED}{marks.blocked}", stuck=stuck)

    def _drain_retry(self) -> bool:
        """A node given back Failed after a drain timeout, with automatic retries left (spec.drain.retries):
        not a failure; taken again once its back-off has passed. True when this decides the node."""
        marks, drain = self.node.marks, self.target.drain
        attempt = marks.drain_timeouts
        if not (
            marks.state is NodeState.FAILED
            and not marks.cordoned_by_us
            and marks.desired == self.want
            and drain.retried(attempt)
        ):
            return False
        due = (marks.since or self.now) + drain.backoff(attempt)
        self.count(Count.RETRY_PENDING)
        if self.now < due:
            self.wakes += (due,)
            self.note(NodeState.FAILED, f"{marks.reason}; taken again at {format_time(due)}")
            self.retrying += (self.notes[-1],)
            return True
        self._offer(self.want)
        return True

    def _tainted(self) -> None:
        """A selected, eligible node we chose and tainted: in progress."""
        self.count(Count.IN_FLIGHT)
        self.count(Count.UPDATING)
        if self.target.deleting and not self.target.reverting:
            self.act(_release(self.node, keep_current=True))  # onDelete: Keep stops before the cordon too
        else:
            self._before_cordon(self.want)

    def _before_cordon(self, want: str) -> None:
        """A node chosen and tainted (drain.taintBeforeCordon): it was started, so it is cordoned once its
        wait is over whatever the gates say now, as a node in progress finishes. A node that is not to be
        taken after all loses our taint with the write that gives it back (Release, Uncordon), never in a
        write of its own: a node untainted and then taken again would be tainted again, round and round."""
        node, marks, target = self.node, self.node.marks, self.target
        assert marks.tainted_since is not None  # waiting_for_cordon
        due = target.drain.cordon_at(marks.tainted_since)
        if self.now < due:
            self.wakes += (due,)
            at = format_time(due)
            self.note(NodeState.PENDING, f"tainted (drain.taintBeforeCordon); cordoned at {at}")
        elif not node.ready:
            self.note(NodeState.PENDING, "tainted; waiting: node is NotReady")
        elif absent := self._agent_absence():  # our taint off again: it waits in service for its agent
            self.note(NodeState.PENDING, NO_AGENT + absent, cause=Cause.NO_AGENT)
            marks_ = node.marks
            self.act(
                Uncordon(
                    node.name,
                    node.resource_version,
                    node.unschedulable,  # not cordoned by us: whatever it is stays
                    marks_.autoscaler_hold,
                    node.our_taints,
                    agent_gone=absent,
                )
            )
        else:
            self.note(NodeState.PENDING, "tainted; cordoning")
            self.act(cordon(node, target, want, self.inputs.policy))

    def _let_go(self) -> None:
        """A node we hold but should no longer manage (deselected, ineligible, skip-labelled, conflict)."""
        node, marks, target = self.node, self.node.marks, self.target
        held = marks.cordoned_by_us and marks.state is not NodeState.FAILED
        if marks.state in IN_PROGRESS or held or marks.waiting_for_cordon:
            self.count(Count.IN_FLIGHT)  # not complete while we still hold it
        if marks.state in AGENT_PHASE:  # never pull a node out from under the agent
            self.act(self._step(marks.desired))
        elif target.deleting and marks.state in _FAILED:
            self._let_go_failed()
        elif node.skip_labelled:
            self.act(_release(node, keep_current=True))
        elif _converged(node, target.hash_off, target.hash_off):
            self.act(_release(node, keep_current=False))
        elif marks.state in IN_PROGRESS:
            self.act(self._step(target.hash_off))
        elif marks.cordoned_by_us:
            self.act(_uncordon(node))
        elif marks.waiting_for_cordon:  # started: taken for our drop-ins to come off after its wait
            self._before_cordon(target.hash_off)
        else:
            self._offer(target.hash_off)  # our drop-ins come off the same safe way

    def _let_go_failed(self) -> None:
        """A deletion lets go of a node that failed (Failed, RolledBack): given back as it is, at once, with
        a Warning saying what may be left and how to end it; the agent is not asked again (a node whose
        rollback failed must not be changed by a deletion), so the deletion does not wait on it."""
        node, marks = self.node, self.node.marks
        self.count(Count.IN_FLIGHT)
        left = f"left as it {marks.state}: {marks.reason or 'no reason given'}; {_LEFT}"
        self.note(marks.state or NodeState.FAILED, f"given back: {left}")
        self.act(_release(node, keep_current=True, left=left))

    def _failure(self) -> None:
        node, marks = self.node, self.node.marks
        self.count(Count.FAILED)
        self.count(
            Count.UNHEALTHY, marks.cause is Cause.WORKLOAD_NOT_READY
        )  # halts whatever maxFailedNodes says
        state = marks.state or NodeState.FAILED
        cause = failure_cause(marks)
        note = NodeNote(
            node.name, state, marks.reason, marks.since, marks.evidence, node.unschedulable, cause=cause
        )
        self.failures += (note,)
        self.notes += (note,)

    def _drain_paused(self, until: datetime, why: str) -> None:
        """The drain waits for the node's agent until `until`, when the node is given back unless the agent
        is back: this note replaces the node's others (it says more), and the decision wakes then."""
        if until not in self.wakes:  # a not-Ready pod's is in already (_agent_absence)
            self.wakes += (until,)
        self.notes = tuple(n for n in self.notes if n.name != self.node.name)
        self.note(NodeState.DRAINING, f"drain paused, waiting for its agent: {why}")

    def _step(self, want: str) -> Action | None:
        """The next step for a node we already hold (Draining .. Verifying)."""
        node, marks, spec, now = self.node, self.node.marks, self.target.spec, self.now
        since = marks.since or now
        if marks.state is NodeState.DRAINING and (absent := self._agent_absence()):
            # Taken, but its agent is gone: nothing was asked of it yet, so the node is known unchanged. An
            # agent that just stopped (a rolling update of its DaemonSet) gets GONE_GRACE to come back; the
            # drain waits meanwhile, as the next step would ask the agent.
            back_by = hostcheck.back_by(marks.host_check)
            if back_by is not None and now < back_by:
                self._drain_paused(back_by, absent)
                return None
            return _uncordon(node, agent_gone=absent)
        if marks.state is NodeState.DRAINING and (gone_at := self._pod_gone_at()) is not None:
            # Its agent pod is not Ready, not for GONE_GRACE yet: the drain waits likewise, so that a stuck
            # agent is never asked to apply; it goes on once the pod is Ready again.
            assert node.agent_pod is not None  # gone_at
            at = format_time(gone_at)
            self._drain_paused(
                gone_at, f"{node.agent_pod.not_ready} (given back at {at} unless it is Ready again)"
            )
            return None
        if marks.state is NodeState.DRAINING:
            drain_deadline = self.target.drain.deadline(since)
            if drain_deadline is not None:
                self.wakes += (drain_deadline,)
            reached = drain_deadline is not None and now >= drain_deadline
            return _drain(node, self.target, want, deadline_reached=reached)
        deadline = since + timedelta(seconds=spec.verification.timeout_seconds) + AGENT_GRACE
        self.wakes += (deadline,)
        if now < deadline:
            return None
        waited = int((deadline - since).total_seconds())
        seen = hostcheck.absence(marks.host_check, now) or "its agent's host check is fresh (the agent runs)"
        return MarkFailed(
            node.name,
            node.resource_version,
            f"no report from the agent within {waited}s of {marks.state} (since "
            f"{format_time(since)}); {seen}. Unknown whether its files changed, so it stays "
            f"cordoned: `kubectl get pods -A -l app.kubernetes.io/component=agent --field-selector "
            f"spec.nodeName={node.name}` finds its agent; once the agent runs it finishes or rolls back the "
            f"apply by itself; `eventedpleg retry {node.name}` takes the node again",
        )


_CAUSES = frozenset(Cause.__members__.values())


def failure_cause(marks: NodeMarks) -> Cause | None:
    """A failed node's typed cause: the one its agent's report carries as its evidence's result (the guard's
    rollback after Done, core.guardincidents), else the operator's (eventedpleg.io/cause). Never read from
    the reason's text."""
    found = Evidence.parse(marks.evidence) if marks.evidence else None
    result = found.result if found is not None else None
    return Cause(result) if result in _CAUSES else marks.cause


def _converged(node: NodeView, want: str, hash_off: str) -> bool:
    marks = node.marks
    if marks.state in IN_PROGRESS:
        return False
    if want == hash_off and marks.current in ("", hash_off):
        return marks.state is not NodeState.DRIFTED
    return marks.current == want and marks.state in (NodeState.DONE, None)


def _unavailable(node: NodeView, target: Target) -> bool:
    marks = node.marks
    in_our_hands = marks.owner == target.name and (marks.state in IN_PROGRESS or marks.waiting_for_cordon)
    return not node.ready or node.unschedulable or in_our_hands


# A deletion gives back nodes in these states as they are: nothing it could do would be known to work.
_FAILED = frozenset({NodeState.FAILED, NodeState.ROLLED_BACK})
# What ends the story of a node a deletion gave back as it is.
_LEFT = (
    "our drop-ins may still be on it: `eventedpleg status` shows it, and a NodeConfig with "
    "eventedPleg: false selecting it removes them"
)


def _release(node: NodeView, keep_current: bool, left: str = "") -> Release:
    return Release(
        node.name,
        node.resource_version,
        keep_current=keep_current,
        uncordon=node.marks.cordoned_by_us,
        was_unschedulable=node.marks.was_unschedulable,
        autoscaler_hold=node.marks.autoscaler_hold,
        taints=node.our_taints,
        left=left,
    )


def _uncordon(node: NodeView, agent_gone: str = "") -> Uncordon:
    marks = node.marks
    return Uncordon(
        node.name,
        node.resource_version,
        marks.was_unschedulable,
        marks.autoscaler_hold,
        node.our_taints,
        agent_gone=agent_gone,
    )


def cordon(node: NodeView, target: Target, want: str, policy: compat.Policy) -> actions.Cordon:
    """Take the node (the gates start it; a node tainted before its cordon comes back here)."""
    turning_on = want == target.hash_on and target.spec.evented_pleg  # taking our files off: never refused
    mode = target.spec.kubelet_config.value if turning_on else ""
    take = take_candidate(node, target.drain, policy, refusal_mode=mode)
    return actions.Cordon(
        node.name,
        node.resource_version,
        target.name,
        want,
        target.spec.include_control_plane,
        was_unschedulable=node.unschedulable,
        agent_options=target.agent_options,
        drain=target.drain,
        autoscaler_user=node.autoscaler_user,
        blocked=node.marks.blocked,
        host_refusal=take.host_refusal,
        taints=node.our_taints,
        in_place=take.in_place,
        drained_because=take.drained_because,
        retrying=take.retrying,
    )


def take_candidate(
    node: NodeView,
    drain: DrainPolicy,
    policy: compat.Policy,
    *,
    refusal_mode: str,
    allow_force_delete: bool = False,
) -> NodeToTake:
    """What the Cordon step's take classification (drain.take) reads of `node`: the planner's Cordon
    carries it, preflight classifies with it, so both judge a node alike. `refusal_mode`: the
    kubeletConfig mode the agent's host check is read for ("" when nothing is turned on)."""
    in_place, drained_because = _in_place(node, drain, policy)
    return NodeToTake(
        drain,
        policy.include_control_plane,
        host_refusal=_host_refusal(node, refusal_mode),
        in_place=in_place,
        drained_because=drained_because,
        tainted=node.our_taints.since is not None,
        allow_force_delete=allow_force_delete,
        retrying=node.marks.state is NodeState.FAILED and drain.retried(node.marks.drain_timeouts),
    )


def _in_place(node: NodeView, drain: DrainPolicy, policy: compat.Policy) -> tuple[bool, str]:
    """The Cordon's in_place and drained_because (spec.drain.mode: InPlace; compat.in_place_refusal)."""
    if not drain.in_place:
        return False, ""
    refusal = compat.in_place_refusal(node.facts, compat.verdict(node.facts, policy))
    return not refusal, refusal


def _host_refusal(node: NodeView, mode: str) -> str:
    """What the node's agent said it would refuse in kubeletConfig `mode`, before anything is taken; ""
    when it would go ahead or has not said, or nothing is turned on (`mode` "")."""
    if not mode or not node.marks.host_check:
        return ""
    check = hostcheck.parse(node.marks.host_check)
    if check is None:
        return ""
    refusal = check.refusal(mode)
    if not refusal:
        return ""
    return f"{refusal} (the agent's host check at {format_time(check.at)})"


def _drain(node: NodeView, target: Target, want: str, *, deadline_reached: bool) -> Drain:
    return Drain(
        node.name,
        node.resource_version,
        hash=want,
        agent_options=target.agent_options,
        include_control_plane=target.spec.include_control_plane,
        deadline_reached=deadline_reached,
        drain=target.drain,
        was_unschedulable=node.marks.was_unschedulable,
        reason=node.marks.reason,
        autoscaler_hold=node.marks.autoscaler_hold,
        drain_timeouts=node.marks.drain_timeouts,
        cordoned=node.unschedulable,
        taints=node.our_taints,
    )


def _progress_text(state: NodeState) -> str:
    return {
        NodeState.DRAINING: "evicting pods",
        NodeState.APPLYING: "agent is writing drop-ins and restarting the runtime and kubelet",
        NodeState.VERIFYING: "agent is verifying that Evented PLEG is in use",
    }.get(state, "")
