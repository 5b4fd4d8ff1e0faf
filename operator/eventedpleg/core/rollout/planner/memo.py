"""Incremental planning: PassMemo keeps each node's NodeDecision while the node's view is the same object
and the pass's inputs are equal, and the running Tally of all of them. A pass decides again only the
nodes whose view changed (or whose pending deadline passed), then sorts only the decisions with
something to say (in progress, failed, skipped) and the few candidates that can start. The plan is the
same as plan.py's without a memo (tests/unit/core/rollout/planner/test_planner.py checks every pass of
random rollouts)."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime

from eventedpleg.core import compat
from eventedpleg.core.rollout.nodeorder import OrderKey, order_key
from eventedpleg.core.rollout.planner.decide import decide
from eventedpleg.core.rollout.planner.decider import Inputs, NodeDecision
from eventedpleg.core.rollout.planner.gates import finish
from eventedpleg.core.rollout.planner.selection import SelectionMemo
from eventedpleg.core.rollout.planner.start import Candidate
from eventedpleg.core.rollout.planner.summary import Plan
from eventedpleg.core.rollout.planner.tally import EMPTY
from eventedpleg.core.rollout.snapshot import NodeView, Target
from eventedpleg.models.nodeconfig import RolloutOrder


class PassMemo:
    """For a caller that plans again and again (one rollout loop; not thread-safe)."""

    def __init__(self) -> None:
        self.selection = SelectionMemo()
        self._inputs: tuple[Target, compat.Policy, str] | None = None
        self._order: Callable[[NodeView], OrderKey] = order_key(RolloutOrder())
        self._reset()

    def _reset(self) -> None:
        self._decisions: dict[str, NodeDecision] = {}
        self._tally = EMPTY
        self._noteworthy: dict[str, NodeDecision] = {}
        self._ordered: list[NodeDecision] | None = None  # _noteworthy in rollout order, until it changes
        self._pool = _Pool(self._order)
        self._done: dict[str, NodeView] = {}
        # When kept decisions expire: (until, name) for those valid until a deadline (an entry is stale
        # once the decision was replaced), and the names of those valid for one pass only.
        self._deadlines: list[tuple[datetime, str]] = []
        self._every_pass: set[str] = set()

    def plan(
        self,
        nodes: Iterable[NodeView],
        inputs: Inputs,
        changed: Mapping[str, NodeView | None] | None = None,
    ) -> Plan:
        """With `changed` (every node whose view differs from the previous pass's, None when it is gone),
        a pass costs in proportion to those nodes and the decisions that expired, not to the cluster: the
        other nodes are not looked at. Without it, or after the inputs changed, every node is."""
        key = (inputs.target, inputs.policy, inputs.want)
        if key != self._inputs:
            self._inputs = key
            self._order = order_key(inputs.target.spec.rollout.order)
            self._reset()
            changed = None
        views = nodes if isinstance(nodes, list) else list(nodes)
        self.selection.begin(inputs.target, inputs.policy, len(views))
        if changed is None:
            self._scan(views, inputs)
        else:
            self._catch_up(changed, inputs)
        if self._ordered is None:
            self._ordered = sorted(self._noteworthy.values(), key=lambda d: self._order(d.node))
        return finish(inputs, self._tally, self._ordered, list(self._done.values()), self._pool)

    def _scan(self, views: list[NodeView], inputs: Inputs) -> None:
        decisions, now = self._decisions, inputs.now
        for node in views:
            old = decisions.get(node.name)
            if old is not None and old.node is node and old.valid(now):
                continue
            self._replace(node.name, node, inputs)
        if len(decisions) != len(views):  # nodes went away
            names = {node.name for node in views}
            for name in [name for name in decisions if name not in names]:
                self._replace(name, None, inputs)

    def _catch_up(self, changed: Mapping[str, NodeView | None], inputs: Inputs) -> None:
        decisions, now = self._decisions, inputs.now
        for name, node in changed.items():
            old = decisions.get(name)
            if node is None:
                if old is not None:
                    self._replace(name, None, inputs)
            elif old is None or old.node is not node or not old.valid(now):
                self._replace(name, node, inputs)
        for name in [name for name in self._every_pass if name not in changed]:
            self._replace(name, decisions[name].node, inputs)
        while self._deadlines and self._deadlines[0][0] <= now:
            _, name = heapq.heappop(self._deadlines)
            old = decisions.get(name)
            if old is not None and not old.valid(now):  # else replaced since: a stale entry
                self._replace(name, old.node, inputs)

    def _replace(self, name: str, node: NodeView | None, inputs: Inputs) -> None:
        """Put `node`'s decision in place of the one kept for `name` (None: the node is gone)."""
        old = self._decisions.pop(name, None)
        if old is not None:
            self._forget(old)
        if node is None:
            return
        selection = self.selection.select(node, inputs.target, inputs.policy)
        new = decide(node, inputs, selection)
        self._decisions[name] = new
        self._keep(new)
        if not new.forever:
            if new.until is None or new.until <= inputs.now:  # holds for this pass only
                self._every_pass.add(name)
            else:
                heapq.heappush(self._deadlines, (new.until, name))

    def _keep(self, decision: NodeDecision) -> None:
        name = decision.node.name
        self._tally += decision.tally
        if decision.noteworthy:
            self._noteworthy[name] = decision
            self._ordered = None
        if decision.candidate is not None:
            self._pool.add(decision.node, decision.candidate)
        if decision.done:
            self._done[name] = decision.node

    def _forget(self, decision: NodeDecision) -> None:
        name = decision.node.name
        self._tally -= decision.tally
        self._every_pass.discard(name)
        if self._noteworthy.pop(name, None) is not None:
            self._ordered = None
        self._pool.discard(name)
        self._done.pop(name, None)


class _Pool:
    """The candidates: those that cost budget to start, and the NotReady or already cordoned ones."""

    def __init__(self, order: Callable[[NodeView], OrderKey]) -> None:
        self.order = order
        self.waiting: dict[str, Candidate] = {}
        self.special: dict[str, Candidate] = {}

    def add(self, node: NodeView, want: str) -> None:
        (self.special if not node.ready or node.unschedulable else self.waiting)[node.name] = (node, want)

    def discard(self, name: str) -> None:
        self.waiting.pop(name, None)
        self.special.pop(name, None)

    def __bool__(self) -> bool:
        return bool(self.waiting or self.special)

    def starting_order(self, room: int | None, budget: int) -> Sequence[Candidate]:
        """Without a canary limit, a candidate that costs budget after the budget is used up changes
        nothing (no action, no note): only the first `budget` of them are walked, with every NotReady or
        already cordoned one. With a limit, the walk may stop at any candidate: all of them, in order."""
        if room is not None:
            return sorted([*self.waiting.values(), *self.special.values()], key=self._candidate_order)
        first = heapq.nsmallest(max(0, budget), self.waiting.values(), key=self._candidate_order)
        return sorted([*first, *self.special.values()], key=self._candidate_order)

    def _candidate_order(self, candidate: Candidate) -> OrderKey:
        return self.order(candidate[0])
