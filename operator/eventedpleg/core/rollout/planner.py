"""The rollout planner: `plan(snapshot, target, now) -> Plan`, pure.

The executor applies the actions (one step per node), the cluster changes, and the planner runs again on
the new snapshot; nothing is remembered between runs except what is written on the nodes. That is what
makes a killed operator resume exactly (Patroni's quorum resolver and MCO's getAllCandidateMachines work
the same way; tests/unit/test_planner.py replays every interrupted prefix).

Rules, in the order they apply:
- Selection: spec.nodeSelector; nodes labelled eventedpleg.io/skip are left alone; when two NodeConfigs
  select a node, the older one (creationTimestamp, then name) owns it and the other reports a conflict.
- Eligibility: core.compat verdict; Risky only with allowRisky. A node we own that is no longer selected
  or eligible gets our drop-ins removed (target hash_off) and is then released.
- Budget: at most maxUnavailable selected nodes unavailable (NotReady, cordoned by anyone, or in our
  hands) -- nodes already unavailable count, as in MCO. A node that is already cordoned by someone else
  costs nothing to process, and keeps its cordon afterwards.
- Gates on *starting* a node: halted (failures >= maxFailedNodes, or any failure before the canaries have
  passed: a canary exists to stop the rest), paused, outside the window, canary soak. A node already
  started always finishes, so no gate ever leaves a node cordoned.
- Order: zone, then name (zone by zone limits the blast radius, as MCO does).

Which nodes a NodeConfig selects, and whether each is eligible, depends only on the node's facts and the
NodeConfig's selector, policy and peers. A caller that plans again and again may pass a `SelectionMemo`:
the pass then decides selection only for nodes whose facts changed. The memo holds answers of the same
pure rules, so the plan is the same with or without it (tests/unit/test_planner.py replays both).
A `PassMemo` goes further (incremental planning): it keeps each node's whole part of a pass while the
node's view is the same object, and a pass recomputes only the nodes that changed (see PassMemo).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from eventedpleg.constants import NodeState
from eventedpleg.core import compat
from eventedpleg.core.rollout import retry, selector, window
from eventedpleg.core.rollout.actions import (
    Action,
    Cordon,
    Drain,
    MarkFailed,
    Release,
    SetAgentOptions,
    Uncordon,
)
from eventedpleg.core.rollout.snapshot import AGENT_PHASE, IN_PROGRESS, NodeView, Peer, Target
from eventedpleg.models.nodeconfig import NodeCounts

# The agent gets the verification timeout plus this much for restarts and reporting before we give up.
AGENT_GRACE = timedelta(seconds=120)
MAX_ATTENTION = 50


@dataclass(frozen=True)
class NodeNote:
    """One node that needs attention (in progress, failed, skipped), for status.nodeStatuses."""

    name: str
    state: str
    reason: str
    since: datetime | None = None
    evidence: str = ""
    unschedulable: bool = False  # still cordoned: a Failed node that is holds capacity until someone acts


@dataclass(frozen=True)
class OwnerConflict:
    """A selected node that an older NodeConfig manages."""

    node: str
    owner: str


@dataclass(frozen=True)
class HeldNode:
    """A node made unavailable outside this rollout (cordoned by someone else, or NotReady): it counts
    against maxUnavailable, as in MCO, so it can hold the whole budget."""

    name: str
    why: str  # "cordoned" | "NotReady"


@dataclass(frozen=True)
class Summary:
    counts: NodeCounts  # what status.nodes says
    want_hash: str
    complete: bool  # every eligible node is at the wanted hash and nothing is in progress
    halted: bool
    canary_failed: bool  # halted because a node failed before the canaries passed
    paused: bool
    window_closed: bool
    waiting: str  # why nothing new starts right now ("" when starting or done)
    conflicts: tuple[OwnerConflict, ...]
    attention: tuple[NodeNote, ...]
    attention_truncated: int
    failures: tuple[NodeNote, ...]
    finalized: bool  # deleting, and no node is ours any more: the finalizer may go
    next_wake: datetime | None
    # Waiting for capacity: the nodes made unavailable outside this rollout that use the budget, and
    # whether only they do (nothing of ours in flight): then nothing moves until someone acts.
    held_by: tuple[HeldNode, ...] = ()
    budget_stuck: bool = False
    retrying: tuple[NodeNote, ...] = ()  # timed-out drains waiting for their automatic retry


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...]
    summary: Summary


def max_unavailable(value: int | str, total: int) -> int:
    """Resolve int-or-percent against the number of selected nodes; a percentage rounds down, min 1."""
    if isinstance(value, int):
        return value
    return max(1, math.floor(total * int(value.rstrip("%")) / 100))


@dataclass
class _Tally:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(NodeCounts.model_fields, 0))
    notes: list[NodeNote] = field(default_factory=list)
    failures: list[NodeNote] = field(default_factory=list)
    conflicts: list[OwnerConflict] = field(default_factory=list)
    wakes: list[datetime] = field(default_factory=list)

    def note(self, node: NodeView, state: str, reason: str) -> None:
        self.notes.append(NodeNote(node.name, state, reason, node.marks.since, node.marks.evidence))


@dataclass(frozen=True)
class _Selection:
    """How the target sees one node: selected by it, eligible (and owned by it), the owner, the verdict."""

    selected: bool
    eligible: bool
    owner: str
    verdict: compat.Verdict | None


def _select(node: NodeView, target: Target, policy: compat.Policy) -> _Selection:
    selected = selector.matches(target.spec.node_selector, node.labels)
    verdict = compat.verdict(node.facts, policy) if selected else None
    owner = _owner_of(node, target) if selected else target.name
    eligible = (
        verdict is not None and verdict.eligible(policy) and not node.skip_labelled and owner == target.name
    )
    return _Selection(selected, eligible, owner, verdict)


class SelectionMemo:
    """`_select` answers of earlier passes, per node, valid while the node's facts and the target's
    selection inputs (name, age, selector, policy, peers) stay equal. Not thread-safe: one per loop."""

    def __init__(self) -> None:
        self._inputs: tuple[str, datetime, object, compat.Policy, tuple[Peer, ...]] | None = None
        self._entries: dict[str, tuple[object, _Selection]] = {}

    def select(self, node: NodeView, target: Target, policy: compat.Policy) -> _Selection:
        entry = self._entries.get(node.name)
        if entry is not None and (entry[0] is node.facts or entry[0] == node.facts):
            return entry[1]
        selection = _select(node, target, policy)
        self._entries[node.name] = (node.facts, selection)
        return selection

    def begin(self, target: Target, policy: compat.Policy, names: int) -> None:
        """Before a pass: forget everything when what selection depends on changed (or nodes went)."""
        inputs = (target.name, target.created, target.spec.node_selector, policy, target.peers)
        if inputs != self._inputs or len(self._entries) > 2 * names:
            self._inputs, self._entries = inputs, {}


def _owner_of(node: NodeView, target: Target) -> str:
    """The NodeConfig that may manage this node: the oldest of those selecting it."""
    contenders = [(target.created, target.name)]
    contenders += [
        (peer.created, peer.name) for peer in target.peers if selector.matches(peer.selector, node.labels)
    ]
    return min(contenders)[1]


def _converged(node: NodeView, want: str, hash_off: str) -> bool:
    marks = node.marks
    if marks.state in IN_PROGRESS:
        return False
    if want == hash_off and marks.current in ("", hash_off):
        return marks.state is not NodeState.DRIFTED
    return marks.current == want and marks.state in (NodeState.DONE, None)


def _unavailable(node: NodeView, target: Target) -> bool:
    in_our_hands = node.marks.owner == target.name and node.marks.state in IN_PROGRESS
    return not node.ready or node.unschedulable or in_our_hands


def _release(node: NodeView, keep_current: bool) -> Release:
    return Release(
        node.name,
        node.resource_version,
        keep_current=keep_current,
        uncordon=node.marks.cordoned_by_us,
        was_unschedulable=node.marks.was_unschedulable,
        autoscaler_hold=node.marks.autoscaler_hold,
    )


def _uncordon(node: NodeView) -> Uncordon:
    return Uncordon(
        node.name, node.resource_version, node.marks.was_unschedulable, node.marks.autoscaler_hold
    )


def _drain(node: NodeView, target: Target, want: str, *, deadline_reached: bool) -> Drain:
    return Drain(
        node.name,
        node.resource_version,
        hash=want,
        agent_options=target.agent_options,
        include_control_plane=target.spec.include_control_plane,
        deadline_reached=deadline_reached,
        on_timeout=target.spec.drain.on_timeout,
        timeout_seconds=target.spec.drain.timeout_seconds,
        was_unschedulable=node.marks.was_unschedulable,
        reason=node.marks.reason,
        autoscaler_hold=node.marks.autoscaler_hold,
        drain_timeouts=node.marks.drain_timeouts,
        retries=target.spec.drain.retries,
        retry_backoff_seconds=target.spec.drain.retry_backoff_seconds,
    )


def _sorted(nodes: Iterable[NodeView]) -> list[NodeView]:
    return sorted(nodes, key=lambda n: n.order)


def plan(
    nodes: Iterable[NodeView],
    target: Target,
    now: datetime,
    memo: SelectionMemo | PassMemo | None = None,
    changed: Mapping[str, NodeView | None] | None = None,
) -> Plan:
    """`changed`, with a PassMemo: the nodes whose view is not the one the memo's previous pass saw (None:
    gone), so the pass looks at those alone instead of every node (see PassMemo.plan)."""
    spec = target.spec
    policy = compat.Policy(spec.include_control_plane, spec.allow_risky, spec.runtime.value)
    want = target.hash_off if target.reverting else target.hash_on
    if isinstance(memo, PassMemo):
        return memo.plan(nodes, target, policy, want, now, changed)
    ordered = _sorted(nodes)
    if memo is not None:
        memo.begin(target, policy, len(ordered))
    walk = _Walk(target, policy, want, now, memo)
    for node in ordered:
        walk.visit(node)
    return walk.finish()


class _Walk:
    """One pass over the nodes: at most one action per node, plus the tallies the status is built from."""

    def __init__(
        self, target: Target, policy: compat.Policy, want: str, now: datetime, memo: SelectionMemo | None
    ) -> None:
        self.target, self.policy, self.want, self._now, self.memo = target, policy, want, now, memo
        self.read_clock = False  # this walk's answer depends on `now` (PassMemo keeps it only until a wake)
        self.tally = _Tally()
        self.actions: list[Action] = []
        self.candidates: list[tuple[NodeView, str]] = []  # (node, the hash it should get)
        self.done_for_want: list[NodeView] = []
        self.in_flight = 0
        self.unavailable = 0
        self.failed = 0
        self.owned_any = False
        self.foreign: list[HeldNode] = []  # unavailable, and not because of us
        self.held_by: tuple[HeldNode, ...] = ()
        self.retry_pending = False  # a timed-out drain waits for (or starts) its automatic retry
        self.retrying: list[NodeNote] = []

    @property
    def now(self) -> datetime:
        self.read_clock = True
        return self._now

    # -- per node ------------------------------------------------------------------------------------

    def visit(self, node: NodeView) -> None:
        target, marks = self.target, node.marks
        ours = marks.owner == target.name
        self.owned_any = self.owned_any or ours
        if self.memo is not None:
            selection = self.memo.select(node, target, self.policy)
        else:
            selection = _select(node, target, self.policy)
        selected, eligible, owner, verdict = (
            selection.selected,
            selection.eligible,
            selection.owner,
            selection.verdict,
        )
        if (selected or ours) and _unavailable(node, target):
            self.unavailable += 1
            if not (ours and (marks.state in IN_PROGRESS or marks.cordoned_by_us)):
                self.foreign.append(HeldNode(node.name, "NotReady" if not node.ready else "cordoned"))
        if selected:
            self.tally.counts["total"] += 1
        if eligible:
            self.tally.counts["eligible"] += 1
            self._managed(node, ours)
            return
        if selected:
            reason = _skip_reason(node, owner, target, verdict, self.policy)
            self.tally.counts["skipped"] += 1
            self.tally.note(node, NodeState.SKIPPED, reason)
            if owner != target.name:
                self.tally.conflicts.append(OwnerConflict(node.name, owner))
        if ours:
            self._let_go(node)

    def _managed(self, node: NodeView, ours: bool) -> None:
        """A selected, eligible node: drive it to `want`."""
        marks, target, want = node.marks, self.target, self.want
        if ours and marks.state in IN_PROGRESS:
            self.in_flight += 1
            self.tally.counts["updating"] += 1
            self.tally.note(node, marks.state.value, marks.reason or _progress_text(marks.state))
            if target.deleting and not target.reverting and marks.state not in AGENT_PHASE:
                self._act(_release(node, keep_current=True))  # onDelete: Keep stops before the agent
            else:
                self._act(self._step(node, want))
            return
        give_back = ours and marks.cordoned_by_us
        if ours and retry.requested(node, target.retry):  # `eventedpleg retry`: not a failure any more
            self.in_flight += give_back
            self.tally.note(node, marks.state or NodeState.FAILED, f"retry requested: {marks.reason}")
            if give_back:
                self._act(_uncordon(node))  # our cordon off first; then it is taken again like any other
            else:
                self.candidates.append((node, want))
            return
        if ours and self._drain_retry(node):
            return
        if give_back and marks.state is not NodeState.FAILED:
            self.in_flight += 1  # not complete (so not Available) while our cordon is still on
        if ours and marks.state is NodeState.FAILED and (marks.cordoned_by_us or marks.desired == want):
            self._failure(node)  # a node whose rollback failed stays cordoned for a human
            return
        if ours and marks.state is NodeState.ROLLED_BACK and marks.desired == want:
            self._failure(node)
            self._act(_uncordon(node) if give_back else None)
            return
        if ours and marks.state is NodeState.SKIPPED and marks.desired == want:
            self.tally.counts["skipped"] += 1
            self.tally.note(node, NodeState.SKIPPED, marks.reason)
            self._act(_uncordon(node) if give_back else None)
            return
        if _converged(node, want, target.hash_off):
            self.tally.counts["updated"] += 1
            if marks.current == want and marks.state is NodeState.DONE:
                self.done_for_want.append(node)
            if target.deleting and ours:  # the release undoes our cordon too: one write, not two
                self._act(_release(node, keep_current=not target.reverting))
            elif give_back:
                self._act(_uncordon(node))
            elif ours and target.agent_options and marks.agent_options != target.agent_options:
                self._act(SetAgentOptions(node.name, node.resource_version, target.agent_options))
            return
        if give_back:
            self._act(_uncordon(node))  # finished an older hash; hand it back before taking it again
        elif target.deleting and not target.reverting:
            self._act(_release(node, keep_current=True) if ours else None)
        else:
            self.candidates.append((node, want))

    def _drain_retry(self, node: NodeView) -> bool:
        """A node given back Failed after a drain timeout, with automatic retries left (spec.drain.retries):
        not a failure; taken again once its back-off has passed. True when this decides the node."""
        marks, spec = node.marks, self.target.spec
        attempt = marks.drain_timeouts
        if not (
            marks.state is NodeState.FAILED
            and not marks.cordoned_by_us
            and marks.desired == self.want
            and 0 < attempt <= spec.drain.retries
        ):
            return False
        due = (marks.since or self.now) + retry.backoff(spec.drain.retry_backoff_seconds, attempt)
        self.retry_pending = True
        if self.now < due:
            self.tally.wakes.append(due)
            when = due.isoformat(timespec="seconds")
            self.tally.note(node, NodeState.FAILED, f"{marks.reason}; taken again at {when}")
            self.retrying.append(self.tally.notes[-1])
            return True
        self.candidates.append((node, self.want))
        return True

    def _let_go(self, node: NodeView) -> None:
        """A node we hold but should no longer manage (deselected, ineligible, skip-labelled, conflict)."""
        marks, target = node.marks, self.target
        if marks.state in IN_PROGRESS or (marks.cordoned_by_us and marks.state is not NodeState.FAILED):
            self.in_flight += 1  # not complete while we still hold it
        if marks.state in AGENT_PHASE:  # never pull a node out from under the agent
            self._act(self._step(node, marks.desired))
        elif node.skip_labelled:
            self._act(_release(node, keep_current=True))
        elif _converged(node, target.hash_off, target.hash_off):
            self._act(_release(node, keep_current=False))
        elif marks.state in IN_PROGRESS:
            self._act(self._step(node, target.hash_off))
        elif marks.cordoned_by_us:
            self._act(_uncordon(node))
        else:
            self.candidates.append((node, target.hash_off))  # our drop-ins come off the same safe way

    def _failure(self, node: NodeView) -> None:
        marks = node.marks
        self.failed += 1
        self.tally.counts["failed"] += 1
        state = marks.state or NodeState.FAILED
        note = NodeNote(node.name, state, marks.reason, marks.since, marks.evidence, node.unschedulable)
        self.tally.failures.append(note)
        self.tally.notes.append(note)

    def _act(self, action: Action | None) -> None:
        if action is not None:
            self.actions.append(action)

    def _step(self, node: NodeView, want: str) -> Action | None:
        """The next step for a node we already hold (Draining .. Verifying)."""
        marks, spec, now = node.marks, self.target.spec, self.now
        since = marks.since or now
        if marks.state is NodeState.DRAINING:
            timeout = spec.drain.timeout_seconds
            deadline = since + timedelta(seconds=timeout)
            if timeout:
                self.tally.wakes.append(deadline)
            return _drain(node, self.target, want, deadline_reached=bool(timeout) and now >= deadline)
        deadline = since + timedelta(seconds=spec.verification.timeout_seconds) + AGENT_GRACE
        self.tally.wakes.append(deadline)
        if now < deadline:
            return None
        waited = int((deadline - since).total_seconds())
        return MarkFailed(
            node.name,
            node.resource_version,
            f"the agent on {node.name} did not report within {waited}s of state {marks.state}; "
            "is the eventedpleg agent running there?",
        )

    # -- whole cluster -------------------------------------------------------------------------------

    def finish(self) -> Plan:
        target, spec, tally = self.target, self.target.spec, self.tally
        canary_failed = self.failed > 0 and not _canaries_passed(self.done_for_want, self.tally, target)
        halted = self.failed >= spec.rollout.max_failed_nodes or canary_failed
        paused = spec.rollout.paused and not target.deleting
        window_closed = not window.is_open(spec.rollout.window, self.now)
        waiting = ""
        if self.has_candidates():
            waiting = self._start(
                halted=halted, canary_failed=canary_failed, paused=paused, window_closed=window_closed
            )
        attention = tally.notes[:MAX_ATTENTION]
        complete = not self.has_candidates() and self.in_flight == 0 and not self.retry_pending
        return Plan(
            actions=tuple(self.actions),
            summary=Summary(
                counts=NodeCounts(**tally.counts),
                want_hash=self.want,
                complete=complete,
                halted=halted,
                canary_failed=canary_failed,
                paused=paused,
                window_closed=window_closed,
                waiting=waiting,
                conflicts=tuple(tally.conflicts),
                attention=tuple(attention),
                attention_truncated=len(tally.notes) - len(attention),
                failures=tuple(tally.failures),
                finalized=target.deleting and not self.owned_any and complete,
                next_wake=min(tally.wakes, default=None),
                held_by=self.held_by,
                budget_stuck=bool(self.held_by) and self.in_flight == 0,
                retrying=tuple(self.retrying[:MAX_ATTENTION]),
            ),
        )

    def has_candidates(self) -> bool:
        return bool(self.candidates)

    def starting_order(self, room: int | None, budget: int) -> list[tuple[NodeView, str]]:
        """The candidates `_start` walks, in rollout order (all of them here; PassMemo's walk skips the
        ones that cannot make a difference)."""
        return self.candidates

    def _start(self, *, halted: bool, canary_failed: bool, paused: bool, window_closed: bool) -> str:
        """Cordon as many candidates as the gates and the budget allow; return why the rest wait."""
        spec = self.target.spec
        if canary_failed:
            return (
                f"halted: a canary node failed ({self.failed} failed before the canaries passed; "
                "a failed canary halts the rollout whatever rollout.maxFailedNodes says)"
            )
        if halted:
            limit = spec.rollout.max_failed_nodes
            return f"halted after {self.failed} failed node(s) (rollout.maxFailedNodes={limit})"
        if paused:
            return "paused (spec.rollout.paused)"
        if window_closed:
            return f"outside the maintenance window ({window.describe(spec.rollout.window)})"
        held, room = _canary_gate(self.done_for_want, self.tally, self.target, self.now, self.in_flight)
        if held:
            return held
        total = self.tally.counts["total"]
        budget = max_unavailable(spec.rollout.max_unavailable, total) - self.unavailable
        started = 0
        for node, want in self.starting_order(room, budget):
            if not node.ready:
                self.tally.note(node, NodeState.PENDING, "waiting: node is NotReady")
                continue
            if room is not None and started >= room:
                break
            free = node.unschedulable  # already unavailable: processing it costs no capacity
            if not free and budget < 1:
                continue
            self.actions.append(
                Cordon(
                    node.name,
                    node.resource_version,
                    self.target.name,
                    want,
                    spec.include_control_plane,
                    was_unschedulable=node.unschedulable,
                    agent_options=self.target.agent_options,
                    autoscaler_user=node.autoscaler_user,
                )
            )
            started += 1
            budget -= 0 if free else 1
        if started:
            return ""
        if room == 0:
            return "canary: waiting for the canary node(s) in progress to finish"
        self.held_by = tuple(self.foreign)
        return _budget_text(spec.rollout.max_unavailable, total, self.unavailable, self.held_by)


def _canaries_passed(done: list[NodeView], tally: _Tally, target: Target) -> bool:
    """True once enough nodes are Done at the wanted config to cover the canary count (or there is no
    canary phase). Until then every node that starts is a canary, so any failure is a canary's."""
    nodes = target.spec.rollout.canary.nodes
    if nodes == 0 or target.deleting:
        return True
    return len(done) >= min(nodes, tally.counts["eligible"])


def _canary_gate(
    done: list[NodeView], tally: _Tally, target: Target, now: datetime, in_flight: int
) -> tuple[str, int | None]:
    """(why starts are held, how many more nodes may start) for the canary phase; (\"\", None) after it."""
    canary = target.spec.rollout.canary
    if canary.nodes == 0 or target.deleting:
        return "", None
    eligible = tally.counts["eligible"]
    needed = min(canary.nodes, eligible)
    if len(done) < needed:
        return "", max(0, needed - len(done) - in_flight)
    soak = timedelta(seconds=canary.soak_seconds)
    soaked = [n for n in done if n.marks.since is not None and now - n.marks.since >= soak]
    if len(soaked) >= needed:
        return "", None
    ends = sorted((n.marks.since or now) + soak for n in done)
    until = ends[needed - 1]
    tally.wakes.append(until)
    return f"canary soaking until {until.isoformat(timespec='seconds')}", 0


def held_text(held: tuple[HeldNode, ...], limit: int = 5) -> str:
    """ "a (cordoned), b (NotReady) and 3 more"."""
    shown = ", ".join(f"{n.name} ({n.why})" for n in held[:limit])
    return shown + (f" and {len(held) - limit} more" if len(held) > limit else "")


def _budget_text(value: int | str, total: int, unavailable: int, held: tuple[HeldNode, ...]) -> str:
    allowed = max_unavailable(value, total)
    text = (
        f"waiting for capacity: {unavailable} of {total} node(s) unavailable, "
        f"maxUnavailable={value} ({allowed})"
    )
    if held:
        text += f"; made unavailable outside this rollout: {held_text(held)}"
    return text


def _progress_text(state: NodeState) -> str:
    return {
        NodeState.DRAINING: "evicting pods",
        NodeState.APPLYING: "agent is writing drop-ins and restarting the runtime and kubelet",
        NodeState.VERIFYING: "agent is verifying that Evented PLEG is in use",
    }.get(state, "")


def _skip_reason(
    node: NodeView, owner: str, target: Target, verdict: compat.Verdict | None, policy: compat.Policy
) -> str:
    if node.skip_labelled:
        return "labelled eventedpleg.io/skip"
    if owner != target.name:
        return f"conflict: also selected by NodeConfig {owner!r}, which is older and manages this node"
    if verdict is not None and not verdict.eligible(policy):
        hint = " (set allowRisky: true to include)" if verdict.level is compat.Level.RISKY else ""
        return f"{verdict.level}: {verdict.summary}{hint}"
    return "not eligible"


# -- incremental planning -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Outcome:
    """What one node adds to a pass (`_Walk.visit` on that node alone). Each node's part depends only on
    the node, the target and, for a node whose deadline is pending, on `now`; the parts add up."""

    node: NodeView
    forever: bool  # valid for any `now`
    until: datetime | None  # else valid while now < until (None: recompute every pass)
    counts: tuple[tuple[str, int], ...]
    unavailable: int
    in_flight: int
    failed: int
    owned: bool
    retry_pending: bool
    foreign: tuple[HeldNode, ...]
    notes: tuple[NodeNote, ...]
    failures: tuple[NodeNote, ...]
    conflicts: tuple[OwnerConflict, ...]
    retrying: tuple[NodeNote, ...]
    actions: tuple[Action, ...]
    candidates: tuple[tuple[NodeView, str], ...]
    done: bool
    wakes: tuple[datetime, ...]

    def valid(self, now: datetime) -> bool:
        return self.forever or (self.until is not None and now < self.until)

    @property
    def noteworthy(self) -> bool:
        return bool(
            self.notes
            or self.failures
            or self.conflicts
            or self.retrying
            or self.actions
            or self.foreign
            or self.wakes
        )


def _outcome(walk: _Walk, node: NodeView) -> _Outcome:
    walk.visit(node)
    tally = walk.tally
    wakes = tally.wakes
    # A walk that read the clock compared it only with the wakes it recorded (deadlines from the node's
    # `since`): its answer holds until the earliest of them.
    until = min(wakes) if walk.read_clock and wakes and node.marks.since is not None else None
    return _Outcome(
        node=node,
        forever=not walk.read_clock,
        until=until,
        counts=tuple((key, value) for key, value in tally.counts.items() if value),
        unavailable=walk.unavailable,
        in_flight=walk.in_flight,
        failed=walk.failed,
        owned=walk.owned_any,
        retry_pending=walk.retry_pending,
        foreign=tuple(walk.foreign),
        notes=tuple(tally.notes),
        failures=tuple(tally.failures),
        conflicts=tuple(tally.conflicts),
        retrying=tuple(walk.retrying),
        actions=tuple(walk.actions),
        candidates=tuple(walk.candidates),
        done=bool(walk.done_for_want),
        wakes=tuple(wakes),
    )


@dataclass(frozen=True)
class _PartWalk:
    """Walks one node alone for PassMemo (a fresh `_Walk` each, sharing the pass's inputs)."""

    target: Target
    policy: compat.Policy
    want: str
    now: datetime
    selection: SelectionMemo

    def part(self, node: NodeView) -> _Outcome:
        return _outcome(_Walk(self.target, self.policy, self.want, self.now, self.selection), node)


def _order(outcome: _Outcome) -> tuple[str, str]:
    return outcome.node.order


def _candidate_order(candidate: tuple[NodeView, str]) -> tuple[str, str]:
    return candidate[0].order


class PassMemo:
    """Incremental planning for a caller that plans again and again (one rollout loop; not
    thread-safe). Keeps each node's `_Outcome` while the node's view is the same object and the
    target is equal, and the running totals of all of them: a pass recomputes only the nodes whose
    view changed (or whose pending deadline passed), then sorts only the nodes with something to say
    (in progress, failed, skipped) and the few candidates that can start. The plan is the same as
    `plan` without a memo (tests/unit/test_planner.py checks every pass of random rollouts)."""

    def __init__(self) -> None:
        self.selection = SelectionMemo()
        self._inputs: tuple[Target, compat.Policy, str] | None = None
        self._reset()

    def _reset(self) -> None:
        self._outcomes: dict[str, _Outcome] = {}
        self._counts: dict[str, int] = dict.fromkeys(NodeCounts.model_fields, 0)
        self._unavailable = self._in_flight = self._failed = self._owned = self._retry_pending = 0
        self._noteworthy: dict[str, _Outcome] = {}
        self._ordered: list[_Outcome] | None = None  # _noteworthy in rollout order, until it changes
        self._waiting: dict[str, tuple[NodeView, str]] = {}  # candidates that cost budget to start
        self._special: dict[str, tuple[NodeView, str]] = {}  # NotReady or already cordoned candidates
        self._done: dict[str, NodeView] = {}
        # When kept parts expire: (until, name) for parts valid until a deadline (an entry is stale once
        # the part was replaced), and the names of parts valid for one pass only.
        self._deadlines: list[tuple[datetime, str]] = []
        self._every_pass: set[str] = set()

    def plan(
        self,
        nodes: Iterable[NodeView],
        target: Target,
        policy: compat.Policy,
        want: str,
        now: datetime,
        changed: Mapping[str, NodeView | None] | None = None,
    ) -> Plan:
        """With `changed` (every node whose view differs from the previous pass's, None when it is gone),
        a pass costs in proportion to those nodes and the parts that expired, not to the cluster: the
        other nodes are not looked at. Without it, or after the inputs changed, every node is."""
        inputs = (target, policy, want)
        if inputs != self._inputs:
            self._inputs = inputs
            self._reset()
            changed = None
        views = nodes if isinstance(nodes, list) else list(nodes)
        self.selection.begin(target, policy, len(views))
        walk = _PartWalk(target, policy, want, now, self.selection)
        if changed is None:
            self._scan(views, now, walk)
        else:
            self._catch_up(changed, now, walk)
        return self._walk(target, policy, want, now).finish()

    def _scan(self, views: list[NodeView], now: datetime, walk: _PartWalk) -> None:
        outcomes = self._outcomes
        for node in views:
            old = outcomes.get(node.name)
            if old is not None and old.node is node and old.valid(now):
                continue
            self._replace(node.name, node, walk)
        if len(outcomes) != len(views):  # nodes went away
            names = {node.name for node in views}
            for name in [name for name in outcomes if name not in names]:
                self._replace(name, None, walk)

    def _catch_up(self, changed: Mapping[str, NodeView | None], now: datetime, walk: _PartWalk) -> None:
        outcomes = self._outcomes
        for name, node in changed.items():
            old = outcomes.get(name)
            if node is None:
                if old is not None:
                    self._replace(name, None, walk)
            elif old is None or old.node is not node or not old.valid(now):
                self._replace(name, node, walk)
        for name in [name for name in self._every_pass if name not in changed]:
            self._replace(name, outcomes[name].node, walk)
        while self._deadlines and self._deadlines[0][0] <= now:
            _, name = heapq.heappop(self._deadlines)
            old = outcomes.get(name)
            if old is not None and not old.valid(now):  # else replaced since: a stale entry
                self._replace(name, old.node, walk)

    def _replace(self, name: str, node: NodeView | None, walk: _PartWalk) -> None:
        """Put `node`'s part in place of the one kept for `name` (None: the node is gone)."""
        old = self._outcomes.pop(name, None)
        if old is not None:
            self._account(old, -1)
            self._every_pass.discard(name)
        if node is None:
            return
        new = walk.part(node)
        self._outcomes[name] = new
        self._account(new, 1)
        if not new.forever:
            if new.until is None or new.until <= walk.now:  # holds for this pass only
                self._every_pass.add(name)
            else:
                heapq.heappush(self._deadlines, (new.until, name))

    def _account(self, outcome: _Outcome, sign: int) -> None:
        for key, value in outcome.counts:
            self._counts[key] += sign * value
        self._unavailable += sign * outcome.unavailable
        self._in_flight += sign * outcome.in_flight
        self._failed += sign * outcome.failed
        self._owned += sign * outcome.owned
        self._retry_pending += sign * outcome.retry_pending
        name = outcome.node.name
        if sign < 0:
            if self._noteworthy.pop(name, None) is not None:
                self._ordered = None
            self._waiting.pop(name, None)
            self._special.pop(name, None)
            self._done.pop(name, None)
            return
        if outcome.noteworthy:
            self._noteworthy[name] = outcome
            self._ordered = None
        for candidate in outcome.candidates:
            node = candidate[0]
            (self._special if not node.ready or node.unschedulable else self._waiting)[name] = candidate
        if outcome.done:
            self._done[name] = outcome.node

    def _walk(self, target: Target, policy: compat.Policy, want: str, now: datetime) -> _Walk:
        walk = _MemoWalk(target, policy, want, now, None, self._waiting, self._special)
        walk.tally.counts = dict(self._counts)
        if self._ordered is None:
            self._ordered = sorted(self._noteworthy.values(), key=_order)
        for outcome in self._ordered:
            walk.tally.notes.extend(outcome.notes)
            walk.tally.failures.extend(outcome.failures)
            walk.tally.conflicts.extend(outcome.conflicts)
            walk.retrying.extend(outcome.retrying)
            walk.actions.extend(outcome.actions)
            walk.foreign.extend(outcome.foreign)
            walk.tally.wakes.extend(outcome.wakes)
        walk.unavailable, walk.in_flight, walk.failed = self._unavailable, self._in_flight, self._failed
        walk.owned_any, walk.retry_pending = self._owned > 0, self._retry_pending > 0
        walk.done_for_want = list(self._done.values())
        return walk


class _MemoWalk(_Walk):
    """The whole-cluster half of a pass over PassMemo's totals."""

    def __init__(
        self,
        target: Target,
        policy: compat.Policy,
        want: str,
        now: datetime,
        memo: SelectionMemo | None,
        waiting: dict[str, tuple[NodeView, str]],
        special: dict[str, tuple[NodeView, str]],
    ) -> None:
        super().__init__(target, policy, want, now, memo)
        self.waiting, self.special = waiting, special

    def has_candidates(self) -> bool:
        return bool(self.waiting or self.special)

    def starting_order(self, room: int | None, budget: int) -> list[tuple[NodeView, str]]:
        """Without a canary limit, a candidate that costs budget after the budget is used up changes
        nothing (no action, no note): only the first `budget` of them are walked, with every NotReady or
        already cordoned one. With a limit, the walk may stop at any candidate: all of them, in order."""
        if room is not None:
            return sorted([*self.waiting.values(), *self.special.values()], key=_candidate_order)
        first = heapq.nsmallest(max(0, budget), self.waiting.values(), key=_candidate_order)
        return sorted([*first, *self.special.values()], key=_candidate_order)
