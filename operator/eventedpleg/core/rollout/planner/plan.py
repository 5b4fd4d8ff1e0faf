"""The reference pass: decide every node in rollout order, add their Tallies, apply the gates. PassMemo
(memo.py) gives the same plan from kept decisions; tests/unit/core/rollout/planner/test_planner.py compares
them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from eventedpleg.core import compat
from eventedpleg.core.rollout.nodeorder import order_key
from eventedpleg.core.rollout.planner.decide import decide
from eventedpleg.core.rollout.planner.decider import Inputs
from eventedpleg.core.rollout.planner.gates import finish
from eventedpleg.core.rollout.planner.memo import PassMemo
from eventedpleg.core.rollout.planner.selection import SelectionMemo, select
from eventedpleg.core.rollout.planner.start import Candidate
from eventedpleg.core.rollout.planner.summary import Plan
from eventedpleg.core.rollout.planner.tally import total
from eventedpleg.core.rollout.snapshot import NodeView, Target


class _InOrder:
    """Every candidate, in rollout order."""

    def __init__(self, candidates: list[Candidate]) -> None:
        self.candidates = candidates

    def __bool__(self) -> bool:
        return bool(self.candidates)

    def starting_order(self, room: int | None, budget: int) -> Sequence[Candidate]:
        return self.candidates


def inputs_for(target: Target, now: datetime) -> Inputs:
    spec = target.spec
    policy = compat.Policy.of(spec)
    return Inputs(target, policy, target.hash_off if target.reverting else target.hash_on, now)


def plan(
    nodes: Iterable[NodeView],
    target: Target,
    now: datetime,
    memo: SelectionMemo | PassMemo | None = None,
    changed: Mapping[str, NodeView | None] | None = None,
) -> Plan:
    """`changed`, with a PassMemo: the nodes whose view is not the one the memo's previous pass saw (None:
    gone), so the pass looks at those alone instead of every node (see PassMemo.plan)."""
    inputs = inputs_for(target, now)
    if isinstance(memo, PassMemo):
        return memo.plan(nodes, inputs, changed)
    ordered = sorted(nodes, key=order_key(target.spec.rollout.order))
    if memo is not None:
        memo.begin(target, inputs.policy, len(ordered))
    pick = memo.select if memo is not None else select
    decisions = [decide(node, inputs, pick(node, target, inputs.policy)) for node in ordered]
    candidates = _InOrder([(d.node, d.candidate) for d in decisions if d.candidate is not None])
    done = [d.node for d in decisions if d.done]
    return finish(inputs, total([d.tally for d in decisions]), decisions, done, candidates)
