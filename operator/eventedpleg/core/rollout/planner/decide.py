"""One node's part of a pass: `decide(node, inputs, selection) -> NodeDecision`, pure. At most one action
for the node, its Tally, its notes, whether it may start (a candidate) and the deadlines it waits for.
The parts of all nodes add up to the pass (plan.py); the whole-cluster gates come after (gates.py).

Here the node's situation is told apart; each situation's rules are in its own module: taking.py (to be
taken), inflight.py (in our hands), lettinggo.py (ours, and let go or ended); decider.py gathers the
decision they make."""

from __future__ import annotations

from eventedpleg.core.rollout import actions, retry
from eventedpleg.core.rollout.actions import SetAgentOptions
from eventedpleg.core.rollout.planner import skips
from eventedpleg.core.rollout.planner.decider import Decider, Inputs, NodeDecision
from eventedpleg.core.rollout.planner.inflight import in_flight_action, progress_text, tainted
from eventedpleg.core.rollout.planner.lettinggo import FAILED_STATES, converged, ended, let_go, let_go_failed
from eventedpleg.core.rollout.planner.selection import Selection, skip_reason
from eventedpleg.core.rollout.planner.summary import HeldNode, OwnerConflict
from eventedpleg.core.rollout.planner.taking import drain_retry, offer
from eventedpleg.core.rollout.planner.tally import Count
from eventedpleg.core.rollout.snapshot import NodeView, Target
from eventedpleg.protocol import AGENT_PHASE, IN_PROGRESS, NodeState


def decide(node: NodeView, inputs: Inputs, selection: Selection) -> NodeDecision:
    d = Decider(node, inputs)
    _visit(d, selection)
    return d.result()


def _visit(d: Decider, selection: Selection) -> None:
    node, target, marks = d.node, d.target, d.node.marks
    ours = marks.owner == target.name
    d.count(Count.OWNED, ours)
    if (selection.selected or ours) and _unavailable(node, target):
        d.count(Count.UNAVAILABLE)
        if not (ours and (marks.state in IN_PROGRESS or marks.cordoned_by_us or marks.waiting_for_cordon)):
            d.foreign += (HeldNode(node.name, "NotReady" if not node.ready else "cordoned"),)
    if selection.selected:
        d.count(Count.TOTAL)
    if selection.eligible:
        d.count(Count.ELIGIBLE)
        _managed(d, ours)
        return
    if selection.selected:
        d.count(Count.SKIPPED)
        d.count(skips.COUNTERS[skips.SkippedFor.NOT_ELIGIBLE])
        d.note(NodeState.SKIPPED, skip_reason(node, selection, target, d.inputs.policy))
        if selection.owner != target.name:
            d.conflicts += (OwnerConflict(node.name, selection.owner),)
    if ours:
        let_go(d)


def _managed(d: Decider, ours: bool) -> None:
    """A selected, eligible node: drive it to `want`."""
    node, marks, target, want = d.node, d.node.marks, d.target, d.want
    if ours and target.deleting and marks.state in FAILED_STATES:
        let_go_failed(d)
        return
    if ours and marks.state in IN_PROGRESS:
        d.count(Count.IN_FLIGHT)
        d.count(Count.UPDATING)
        d.note(marks.state.value, marks.reason or progress_text(marks.state))
        if target.deleting and not target.reverting and marks.state not in AGENT_PHASE:
            d.act(actions.release(node, keep_current=True))  # onDelete: Keep stops before the agent
        else:
            d.act(in_flight_action(d, want))
        return
    if ours and marks.waiting_for_cordon:
        tainted(d)
        return
    give_back = ours and marks.cordoned_by_us
    if ours and retry.requested(node, target.retry):  # `eventedpleg retry`: not a failure any more
        d.count(Count.IN_FLIGHT, give_back)
        d.note(marks.state or NodeState.FAILED, f"retry requested: {marks.reason}")
        if give_back:
            d.act(actions.uncordon(node))  # our cordon off first; then it is taken again like any other
        else:
            offer(d, want)
        return
    if ours and drain_retry(d):
        return
    if give_back and marks.state is not NodeState.FAILED:
        d.count(Count.IN_FLIGHT)  # not complete (so not Available) while our cordon is still on
    if ours and ended(d, give_back):
        return
    if converged(node, want, target.hash_off):
        _converged(d, ours, give_back)
    elif give_back:
        d.act(actions.uncordon(node))  # finished an older hash; hand it back before taking it again
    elif target.deleting and not target.reverting:
        d.act(actions.release(node, keep_current=True) if ours else None)
    else:
        offer(d, want)


def _converged(d: Decider, ours: bool, give_back: bool) -> None:
    """At `want`: given back if we still hold it, its agent's options brought up to date."""
    node, marks, target = d.node, d.node.marks, d.target
    d.count(Count.UPDATED)
    d.done = marks.current == d.want and marks.state is NodeState.DONE
    if target.deleting and ours:  # the release undoes our cordon too: one write, not two
        d.act(actions.release(node, keep_current=not target.reverting))
    elif give_back:
        d.act(actions.uncordon(node))
    elif ours and target.agent_options and marks.agent_options != target.agent_options:
        d.act(SetAgentOptions(node.name, node.resource_version, target.agent_options))


def _unavailable(node: NodeView, target: Target) -> bool:
    marks = node.marks
    in_our_hands = marks.owner == target.name and (marks.state in IN_PROGRESS or marks.waiting_for_cordon)
    return not node.ready or node.unschedulable or in_our_hands
