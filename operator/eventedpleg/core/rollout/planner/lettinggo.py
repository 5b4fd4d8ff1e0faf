"""A node of ours whose story ends: let go when no longer ours to manage (deselected, ineligible,
skip-labelled, in conflict, or its NodeConfig deleted), or ended by its agent or a step (Failed,
RolledBack, Skipped), which decides what is left: give it back, count the failure, or leave it cordoned
for a human."""

from __future__ import annotations

from eventedpleg.core.rollout import actions
from eventedpleg.core.rollout.planner import skips
from eventedpleg.core.rollout.planner.decider import LEFT, Decider
from eventedpleg.core.rollout.planner.inflight import in_flight_action
from eventedpleg.core.rollout.planner.taking import before_cordon, offer
from eventedpleg.core.rollout.planner.tally import Count
from eventedpleg.core.rollout.snapshot import NodeView
from eventedpleg.protocol import AGENT_PHASE, IN_PROGRESS, NodeState

# A deletion gives back nodes in these states as they are: nothing it could do would be known to work.
FAILED_STATES = frozenset({NodeState.FAILED, NodeState.ROLLED_BACK})


def let_go(d: Decider) -> None:
    """A node we hold but should no longer manage (deselected, ineligible, skip-labelled, conflict)."""
    node, marks, target = d.node, d.node.marks, d.target
    held = marks.cordoned_by_us and marks.state is not NodeState.FAILED
    if marks.state in IN_PROGRESS or held or marks.waiting_for_cordon:
        d.count(Count.IN_FLIGHT)  # not complete while we still hold it
    if marks.state in AGENT_PHASE:  # never pull a node out from under the agent
        d.act(in_flight_action(d, marks.desired))
    elif target.deleting and marks.state in FAILED_STATES:
        let_go_failed(d)
    elif node.skip_labelled:
        d.act(actions.release(node, keep_current=True))
    elif converged(node, target.hash_off, target.hash_off):
        d.act(actions.release(node, keep_current=False))
    elif marks.state in IN_PROGRESS:
        d.act(in_flight_action(d, target.hash_off))
    elif marks.cordoned_by_us:
        d.act(actions.uncordon(node))
    elif marks.waiting_for_cordon:  # started: taken for our drop-ins to come off after its wait
        before_cordon(d, target.hash_off)
    else:
        offer(d, target.hash_off)  # our drop-ins come off the same safe way


def let_go_failed(d: Decider) -> None:
    """A deletion lets go of a node that failed (Failed, RolledBack): given back as it is, at once, with
    a Warning saying what may be left and how to end it; the agent is not asked again (a node whose
    rollback failed must not be changed by a deletion), so the deletion does not wait on it."""
    node, marks = d.node, d.node.marks
    d.count(Count.IN_FLIGHT)
    left = f"left as it {marks.state}: {marks.reason or 'no reason given'}; {LEFT}"
    d.note(marks.state or NodeState.FAILED, f"given back: {left}")
    d.act(actions.release(node, keep_current=True, left=left))


def ended(d: Decider, give_back: bool) -> bool:
    """A node of ours the agent or a step left Failed, RolledBack or Skipped: what that leaves to do.
    True when this decides the node."""
    node, marks, want = d.node, d.node.marks, d.want
    if marks.state is NodeState.FAILED and give_back and marks.desired != want == d.target.hash_off:
        d.act(actions.uncordon(node))  # eventedPleg turned off after it failed: given back first
        return True
    if marks.state is NodeState.FAILED and (marks.cordoned_by_us or marks.desired == want):
        d.failure()  # a node whose rollback failed stays cordoned for a human
        return True
    if marks.state is NodeState.ROLLED_BACK and marks.desired == want:
        d.failure()
        d.act(actions.uncordon(node) if give_back else None)
        return True
    if marks.state is NodeState.SKIPPED and marks.desired == want:
        d.count(Count.SKIPPED)
        if (cause := skips.skip_cause(marks)) is not None:
            d.count(skips.COUNTERS[cause])
        d.note(NodeState.SKIPPED, marks.reason)
        if d.target.deleting:  # unchanged: nothing to revert (onDelete: Keep lands here)
            d.act(actions.release(node, keep_current=True))
        else:
            d.act(actions.uncordon(node) if give_back else None)
        return True
    return False


def converged(node: NodeView, want: str, hash_off: str) -> bool:
    """The node is at `want` with nothing left to do there (off: none of our drop-ins, and not drifted)."""
    marks = node.marks
    if marks.state in IN_PROGRESS:
        return False
    if want == hash_off and marks.current in ("", hash_off):
        return marks.state is not NodeState.DRIFTED
    return marks.current == want and marks.state in (NodeState.DONE, None)
