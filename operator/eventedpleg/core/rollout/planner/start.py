"""Starting nodes, once no gate holds every new one: as many candidates as the canary phase and the steps
(soaked before the next), rollout.postNodeDelaySeconds, rollout.healthGate and the budget (maxUnavailable,
nodes unavailable for any reason counted) allow, walked in rollout order. What waits is said, by name."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Protocol

from eventedpleg.core.rollout.actions import Action
from eventedpleg.core.rollout.planner import healthgate
from eventedpleg.core.rollout.planner.decider import Inputs
from eventedpleg.core.rollout.planner.summary import HeldNode, NodeNote, held_text, int_or_percent
from eventedpleg.core.rollout.planner.taking import BLOCKED, cordon_action
from eventedpleg.core.rollout.planner.tally import Tally
from eventedpleg.core.rollout.snapshot import NodeView
from eventedpleg.models.nodeconfig import Rollout
from eventedpleg.protocol import NodeState, format_time

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


class Start:
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
            if kept := self._kept(node):
                self.notes.append(
                    NodeNote(node.name, NodeState.PENDING, kept, node.marks.since, node.marks.evidence)
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
            self.actions.append(cordon_action(node, target, want, self.inputs.policy))
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

    def _kept(self, node: NodeView) -> str:
        """Why a candidate is not taken whatever the budget says ("" when it may be)."""
        if not node.ready:
            return "waiting: node is NotReady"
        if node.unschedulable and not self.inputs.target.spec.rollout.take_cordoned_nodes:
            return HELD_BY_CORDON  # someone else's maintenance
        return ""

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
            f"{last.name} was Done at {format_time(last.marks.since)}; the next node starts "
            f"at {format_time(until)} (rollout.postNodeDelaySeconds: {delay})"
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
            return f"{what} soaking until {format_time(until)}", 0
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
