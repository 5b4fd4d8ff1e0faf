"""The writes that give a node back: Release (ours no more) and Uncordon (ours, out of our hands again),
each undoing exactly what we did to it; shared by every situation a node can be given back from."""

from __future__ import annotations

from eventedpleg.constants import NodeState
from eventedpleg.core.rollout.actions import Release, Uncordon
from eventedpleg.core.rollout.snapshot import NodeView

# A deletion gives back nodes in these states as they are: nothing it could do would be known to work.
FAILED_STATES = frozenset({NodeState.FAILED, NodeState.ROLLED_BACK})
# What ends the story of a node a deletion gave back as it is.
LEFT = (
    "our drop-ins may still be on it: `eventedpleg status` shows it, and a NodeConfig with "
    "eventedPleg: false selecting it removes them"
)


def release(node: NodeView, keep_current: bool, left: str = "") -> Release:
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


def uncordon(node: NodeView, agent_gone: str = "") -> Uncordon:
    marks = node.marks
    return Uncordon(
        node.name,
        node.resource_version,
        marks.was_unschedulable,
        marks.autoscaler_hold,
        node.our_taints,
        agent_gone=agent_gone,
    )
