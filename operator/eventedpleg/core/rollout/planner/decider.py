"""What one node's decision is made of: the Inputs of a pass, the NodeDecision it yields, and the Decider
that gathers it (counters, notes, the action, the wakes and the clock reads). The rules that fill it are
in the modules named for the node's situation: taking.py (not ours yet, or ours again), inflight.py (ours,
between cordon and verdict), lettinggo.py (ours, no longer wanted); decide.py chooses among them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from eventedpleg.core import compat, hostcheck
from eventedpleg.core.evidence import Evidence
from eventedpleg.core.rollout import agentpod
from eventedpleg.core.rollout.actions import Action
from eventedpleg.core.rollout.planner.summary import HeldNode, NodeNote, OwnerConflict
from eventedpleg.core.rollout.planner.tally import Count, Tally, tally_of
from eventedpleg.core.rollout.snapshot import NodeMarks, NodeView, Target
from eventedpleg.protocol import Cause, NodeState


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


class Decider:
    """Gathers one NodeDecision. The clock is read through `now`, which records the read: the decision
    then holds only until its earliest wake. `agent_absence` is the one read that records its own bound
    instead (`fresh_until`)."""

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

    def result(self) -> NodeDecision:
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

    def agent_absence(self) -> str:
        """Why the node's agent shows no sign of life now: no fresh host check (core.hostcheck.absence), or
        its pod not Ready for longer than GONE_GRACE (agentpod.pod_absence); "" when it does. Neither reads
        the clock for the memo: each answer holds until its view changes, or until `fresh_until`."""
        node, now = self.node, self.inputs.now
        absent = hostcheck.absence(node.marks.host_check, now) or agentpod.pod_absence(node.agent_pod, now)
        if not absent:
            check = hostcheck.parse(node.marks.host_check)
            assert check is not None  # fresh
            self.fresh_until = check.fresh_until
            if (gone_at := self.pod_gone_at()) is not None:  # not Ready, within its grace: live till then
                self.fresh_until = min(self.fresh_until, gone_at)
                self.wakes += (gone_at,)
        return absent

    def pod_gone_at(self) -> datetime | None:
        pod = self.node.agent_pod
        return None if pod is None else pod.gone_at

    def failure(self) -> None:
        """The node counts as failed (its cause WorkloadNotReady: unhealthy, which halts whatever
        maxFailedNodes says) and is named among the failures."""
        node, marks = self.node, self.node.marks
        self.count(Count.FAILED)
        self.count(Count.UNHEALTHY, marks.cause is Cause.WORKLOAD_NOT_READY)
        note = NodeNote(
            node.name,
            marks.state or NodeState.FAILED,
            marks.reason,
            marks.since,
            marks.evidence,
            node.unschedulable,
            cause=failure_cause(marks),
        )
        self.failures += (note,)
        self.notes += (note,)


# What ends the story of a node a deletion gave back as it is.
LEFT = (
    "our drop-ins may still be on it: `eventedpleg status` shows it, and a NodeConfig with "
    "eventedPleg: false selecting it removes them"
)
_CAUSES = frozenset(Cause.__members__.values())


def failure_cause(marks: NodeMarks) -> Cause | None:
    """A failed node's typed cause: the one its agent's report carries as its evidence's result (the guard's
    rollback after Done, core.guardincidents), else the operator's (eventedpleg.io/cause). Never read from
    the reason's text."""
    found = Evidence.parse(marks.evidence) if marks.evidence else None
    result = found.result if found is not None else None
    return Cause(result) if result in _CAUSES else marks.cause
