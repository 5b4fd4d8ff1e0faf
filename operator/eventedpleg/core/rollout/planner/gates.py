"""The whole-cluster half of a pass, over the nodes' decisions: halt, pause, window, canary and budget
gates on starting nodes, then the Summary. A node already started always finishes (its decision holds
its step), so no gate ever leaves a node cordoned."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Protocol

from eventedpleg.constants import NodeState
from eventedpleg.core.rollout import window
from eventedpleg.core.rollout.actions import Action
from eventedpleg.core.rollout.planner import healthgate
from eventedpleg.core.rollout.planner.decide import BLOCKED, Inputs, NodeDecision, cordon
from eventedpleg.core.rollout.planner.summary import (
    HeldNode,
    NodeNote,
    OwnerConflict,
    Plan,
    Summary,
    held_text,
    int_or_percent,
)
from eventedpleg.core.rollout.planner.tally import Tally
from eventedpleg.core.rollout.snapshot import NodeView, Target
from eventedpleg.models.nodeconfig import OnNoAgent, Rollout
from eventedpleg.protocol import Cause

MAX_ATTENTION = 50
ALERT_RECHECK = timedelta(seconds=15)  # how often a rollout held by alerts asks Prometheus again
Candidate = tuple[NodeView, str]  # a node that may start, and the hash it should get


HELD_BY_CORDON = (
    "waiting, not taken: cordoned by someone else (another maintenance may own it); uncordon it, or set "
    "rollout.takeCordonedNodes: true"
)


class Candidates(Protocol):
    def __bool__(self) -> bool: ...

    def starting_order(self, room: int | None, budget: int) -> Sequence[Candidate]:
        """The candidates the gates walk, in rollout order; an implementation may leave out the ones
        that cannot make a difference (see PassMemo)."""
        ...


def finish(
    inputs: Inputs,
    tally: Tally,
    decisions: Iterable[NodeDecision],
    done: Sequence[NodeView],
    candidates: Candidates,
) -> Plan:
    """`decisions` in rollout order (those without notes, actions or wakes may be left out); `done`: the
    nodes Done at the wanted hash."""
    target, spec, now = inputs.target, inputs.target.spec, inputs.now
    actions: list[Action] = []
    notes: list[NodeNote] = []
    failures: list[NodeNote] = []
    retrying: list[NodeNote] = []
    conflicts: list[OwnerConflict] = []
    foreign: list[HeldNode] = []
    held_by: tuple[HeldNode, ...]
    wakes: list[datetime] = []
    for decision in decisions:
        notes.extend(decision.notes)
        failures.extend(decision.failures)
        retrying.extend(decision.retrying)
        conflicts.extend(decision.conflicts)
        foreign.extend(decision.foreign)
        wakes.extend(decision.wakes)
        if decision.action is not None:
            actions.append(decision.action)
    # A deletion is never halted: it gives back every node it holds, failed ones included (decide.py).
    canary_failed = tally.failed > 0 and not _canaries_passed(done, tally, target) and not target.deleting
    max_failed = int_or_percent(spec.rollout.max_failed_nodes, tally.total)
    failed_out = tally.failed >= max_failed
    unhealthy = tally.unhealthy > 0 and not target.deleting
    halted = (failed_out or canary_failed or unhealthy) and not target.deleting
    watch = healthgate.after(done, target, now, actions, wakes)  # None: the gate is off
    paused = spec.rollout.paused and not target.deleting
    window_closed = not window.any_open(spec.rollout, now)
    alerting = bool(target.alerts) and not target.deleting
    no_agent = [n for n in notes if n.cause is Cause.NO_AGENT]
    holding = bool(no_agent) and spec.rollout.on_no_agent is OnNoAgent.HOLD and not target.deleting
    waiting, held_by = "", ()
    if halted:
        waiting = _halt_text(
            spec.rollout, tally, max_failed, canary_failed=canary_failed, unhealthy=unhealthy
        ) + _guard_text(failures)
    elif candidates or holding:
        start = _Start(inputs, tally, actions, notes, wakes, watch)
        if holding:
            waiting = f"holding (rollout.onNoAgent: Hold) while {_no_agent_text(no_agent)}"
        elif paused:
            waiting = "paused (spec.rollout.paused)"
        elif window_closed:
            waiting = f"outside the maintenance window ({window.describe_all(spec.rollout)})"
        elif alerting:
            waiting = f"no new node while {target.alerts} (rollout.alertGate)"
            wakes.append(now + ALERT_RECHECK)  # asked again: the alert has no event of ours to wake us
        else:
            waiting, held_by = start.start(done, candidates, foreign)
    if no_agent and not waiting:
        waiting = _no_agent_text(no_agent)
    attention = notes[:MAX_ATTENTION]
    complete = (
        not candidates
        and tally.in_flight == 0
        and not tally.retry_pending
        and not tally.no_agent
        and not tally.awaiting_approval
    )
    return Plan(
        actions=tuple(actions),
        summary=Summary(
            tally=tally,
            want_hash=inputs.want,
            complete=complete,
            halted=halted,
            canary_failed=canary_failed,
            paused=paused,
            window_closed=window_closed,
            alerting=alerting,
            waiting=waiting,
            conflicts=tuple(conflicts),
            attention=tuple(attention),
            attention_truncated=len(notes) - len(attention),
            failures=tuple(failures),
            finalized=target.deleting and not tally.owned and complete,
            next_wake=min(wakes, default=None),
            held_by=held_by,
            budget_stuck=bool(held_by) and tally.in_flight == 0,
            retrying=tuple(retrying[:MAX_ATTENTION]),
            blocked=_blocked_for_good(tally, notes, failures, moving=halted or paused or window_closed),
            awaiting_approval=tuple(n.name for n in notes if n.state == NodeState.AWAITING_APPROVAL),
            unhealthy=unhealthy,
            health_watch=tuple(dict.fromkeys(watch or ())),
        ),
    )


def _blocked_for_good(
    tally: Tally, notes: Sequence[NodeNote], failures: Sequence[NodeNote], *, moving: bool
) -> tuple[NodeNote, ...]:
    """The remaining nodes when every one is blocked in a way waiting will not fix: each node that may be
    taken is left in service by a drain that could never finish, the others failed, and nothing is in
    flight, retried, waiting for its agent or for approval; () otherwise, or when a gate (`moving`: halt,
    pause, window) says why nothing starts already."""
    if moving or not tally.stuck or tally.stuck != tally.offered:
        return ()
    if tally.in_flight or tally.retry_pending or tally.no_agent or tally.awaiting_approval:
        return ()
    return tuple(n for n in notes if n.stuck) + tuple(failures)


class _Start:
    """Cordons as many candidates as the canary phase and the budget allow."""

    def __init__(
        self,
        inputs: Inputs,
        tally: Tally,
        actions: list[Action],
        notes: list[NodeNote],
        wakes: list[datetime],
        watch: list[str] | None = None,
    ) -> None:
        self.inputs, self.tally, self.actions, self.notes, self.wakes = inputs, tally, actions, notes, wakes
        self.watch = watch  # rollout.healthGate is on: the nodes it looked at, to read for the next pass
        self.reading = 0  # candidates the gate has not read yet
        self.gated: list[str] = []  # candidates whose pods are not Ready, "node (pods)"
        self.stage = ""  # the step (rollout.steps) whose nodes in progress hold the rest, "" for the canary

    def start(
        self, done: Sequence[NodeView], candidates: Candidates, foreign: list[HeldNode]
    ) -> tuple[str, tuple[HeldNode, ...]]:
        """(why the rest wait, the nodes made unavailable outside the rollout that hold the budget)."""
        target, tally = self.inputs.target, self.tally
        spec = target.spec
        held, room = self._canary_gate(done)
        if held:
            return held, ()
        settling = self._post_node_delay(done)
        if settling:
            return settling, ()
        total = tally.total
        allowed = int_or_percent(spec.rollout.max_unavailable, total)  # resolved once per pass
        budget = allowed - tally.unavailable
        started = 0
        blocked: list[str] = []  # started, but only to look again at a drain that could never finish
        # rollout.healthGate may pass over a candidate without taking budget: walk as many more as it holds.
        extra = sum(1 for pods in target.health.values() if pods) if self.watch is not None else 0
        for node, want in candidates.starting_order(room, budget + extra):
            if not node.ready:
                marks = node.marks
                self.notes.append(
                    NodeNote(
                        node.name, NodeState.PENDING, "waiting: node is NotReady", marks.since, marks.evidence
                    )
                )
                continue
            if node.unschedulable and not spec.rollout.take_cordoned_nodes:  # someone else's maintenance
                marks = node.marks
                self.notes.append(
                    NodeNote(node.name, NodeState.PENDING, HELD_BY_CORDON, marks.since, marks.evidence)
                )
                continue
            if room is not None and started + self.reading >= room:
                break
            free = node.unschedulable  # already unavailable: processing it costs no capacity
            if not free and budget < 1:
                continue
            cost = self._health_gate(node, free)
            if cost is not None:
                budget -= cost
                continue
            self.actions.append(cordon(node, target, want, self.inputs.policy))
            if node.marks.blocked:  # left in service (its note is decide's); the Cordon step looks again
                blocked.append(f"{node.name}: {node.marks.blocked}")
            started += 1
            budget -= 0 if free else 1
        health = self._health_waiting(started)
        if health:
            return health, ()
        if started:
            if blocked:
                return BLOCKED + "; ".join(blocked), ()
            return "", ()
        if room == 0:
            if self.stage:
                return f"{self.stage}: waiting for its node(s) in progress to finish", ()
            return "canary: waiting for the canary node(s) in progress to finish", ()
        held_by = tuple(foreign)
        return _budget_text(spec.rollout.max_unavailable, allowed, total, tally.unavailable, held_by), held_by

    def _health_gate(self, node: NodeView, free: bool) -> int | None:
        """rollout.healthGate before a node is taken: None when it may be; else the budget it keeps (a
        node not read yet keeps its place until the next pass has read it; one whose pods are not Ready
        keeps none: the rollout goes on without it)."""
        target = self.inputs.target
        if self.watch is None:
            return None
        kept = healthgate.held(node, target)
        if not kept:
            return None
        marks = node.marks
        self.notes.append(NodeNote(node.name, NodeState.PENDING, kept, marks.since, marks.evidence))
        self.watch.append(node.name)
        if node.name in target.health:
            self.gated.append(f"{node.name} ({healthgate.names(target.health[node.name])})")
            return 0
        self.reading += 1
        return 0 if free else 1

    def _health_waiting(self, started: int) -> str:
        """Why no node started because of rollout.healthGate ("" when one did, or the gate did not hold
        any); a node being read wakes the next pass soon."""
        if self.reading:
            self.wakes.append(self.inputs.now + healthgate.RECHECK)
        if started:
            return ""
        if self.reading:
            return f"reading the readiness of the pods on {self.reading} node(s) to take (rollout.healthGate)"
        if self.gated:
            more = f" and {len(self.gated) - 5} more" if len(self.gated) > 5 else ""
            return (
                f"{len(self.gated)} node(s) wait, not cordoned, for their pods to be Ready "
                f"(rollout.healthGate): {'; '.join(self.gated[:5])}{more}"
            )
        return ""

    def _post_node_delay(self, done: Sequence[NodeView]) -> str:
        """Why no node starts yet after the last one was Done (spec.rollout.postNodeDelaySeconds), or ""."""
        delay, now = self.inputs.target.spec.rollout.post_node_delay_seconds, self.inputs.now
        if not delay or self.inputs.target.deleting:
            return ""
        last = max(done, key=lambda n: n.marks.since or now, default=None)
        if last is None or last.marks.since is None:
            return ""
        until = last.marks.since + timedelta(seconds=delay)
        if now >= until:
            return ""
        self.wakes.append(until)
        return (
            f"{last.name} was Done at {last.marks.since.isoformat(timespec='seconds')}; the next node starts "
            f"at {until.isoformat(timespec='seconds')} (rollout.postNodeDelaySeconds: {delay})"
        )

    def _canary_gate(self, done: Sequence[NodeView]) -> tuple[str, int | None]:
        """(why starts are held, how many more nodes may start) for the canary and the steps after it
        (spec.rollout.steps): each must be Done and soaked before the next starts; ("", None) after them."""
        target, now = self.inputs.target, self.inputs.now
        rollout = target.spec.rollout
        if target.deleting:
            return "", None
        soak = timedelta(seconds=rollout.canary.soak_seconds)
        for number, needed, name in stages(rollout, self.tally.eligible, self.tally.total):
            if len(done) < needed:
                self.stage = name if number else ""
                return "", max(0, needed - len(done) - self.tally.in_flight)
            soaked = [n for n in done if n.marks.since is not None and now - n.marks.since >= soak]
            if len(soaked) >= needed:
                continue
            ends = sorted((n.marks.since or now) + soak for n in done)
            until = ends[needed - 1]
            self.wakes.append(until)
            what = "canary" if number == 0 else f"{name} ({needed} node(s) Done)"
            return f"{what} soaking until {until.isoformat(timespec='seconds')}", 0
        return "", None


def stages(rollout: Rollout, eligible: int, total: int) -> list[tuple[int, int, str]]:
    """(number, nodes Done in all once it is over, name) of the canary (number 0, when it has nodes) and of
    each step of spec.rollout.steps that adds nodes; a percentage is of the selected nodes (`total`), as
    maxUnavailable's is. Nodes Done in all never shrink and never exceed the eligible nodes."""
    out: list[tuple[int, int, str]] = []
    reached = 0
    if rollout.canary.nodes:
        reached = min(rollout.canary.nodes, eligible)
        out.append((0, reached, "canary"))
    for i, step in enumerate(rollout.steps, start=1):
        needed = min(int_or_percent(step, total), eligible)
        if needed > reached:
            reached = needed
            out.append((i, needed, f"step {i} of {len(rollout.steps)} (rollout.steps[{i - 1}]: {step})"))
    return out


def _canaries_passed(done: Sequence[NodeView], tally: Tally, target: Target) -> bool:
    """True once enough nodes are Done at the wanted config to cover the canary count (or there is no
    canary phase). Until then every node that starts is a canary, so any failure is a canary's."""
    nodes = target.spec.rollout.canary.nodes
    if nodes == 0 or target.deleting:
        return True
    return len(done) >= min(nodes, tally.eligible)


def _halt_text(
    rollout: Rollout, tally: Tally, max_failed: int, *, canary_failed: bool, unhealthy: bool
) -> str:
    """`max_failed`: rollout.maxFailedNodes as a count of this pass's nodes (resolved once, in the pass)."""
    if canary_failed:
        return (
            f"halted: a canary node failed ({tally.failed} failed before the canaries passed; "
            "a failed canary halts the rollout whatever rollout.maxFailedNodes says)"
        )
    if unhealthy:
        return (
            f"halted: {tally.unhealthy} node(s) had pods not Ready {rollout.health_gate.after_seconds}s "
            "after they were given back (rollout.healthGate)"
        )
    value = rollout.max_failed_nodes
    limit = f"{value} ({max_failed} of {tally.total} node(s))" if isinstance(value, str) else value
    return f"halted after {tally.failed} failed node(s) (rollout.maxFailedNodes={limit})"


def _guard_text(failures: Sequence[NodeNote]) -> str:
    """The failed nodes the guard rolled back (by their typed cause), named: the gate misbehaved there."""
    guarded = [n.name for n in failures if n.cause is Cause.GUARD_ROLLBACK]
    if not guarded:
        return ""
    names = ", ".join(guarded[:5]) + (f" and {len(guarded) - 5} more" if len(guarded) > 5 else "")
    return (
        f"; {len(guarded)} of them ({names}) rolled back to generic PLEG by the guard after repeated PLEG "
        "incidents (spec.guard)"
    )


def _no_agent_text(notes: Sequence[NodeNote]) -> str:
    """The nodes waiting, not cordoned, for a live agent (each note's reason says why)."""
    names = ", ".join(n.name for n in notes[:5])
    more = f" and {len(notes) - 5} more" if len(notes) > 5 else ""
    return f"{len(notes)} node(s) wait, not cordoned, for a live eventedpleg agent: {names}{more}"


def _budget_text(
    value: int | str, allowed: int, total: int, unavailable: int, held: tuple[HeldNode, ...]
) -> str:
    """`value`: maxUnavailable as written, `allowed`: as resolved against `total`."""
    text = (
        f"waiting for capacity: {unavailable} of {total} node(s) unavailable, "
        f"maxUnavailable={value} ({allowed})"
    )
    if held:
        text += f"; made unavailable outside this rollout: {held_text(held)}"
    return text
