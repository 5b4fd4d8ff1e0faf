"""What the planner asks the executor to do. Each action is one idempotent step on one node.

Every action carries the node's resourceVersion as seen by the planner: the executor writes with it as a
precondition, so a step planned on stale data fails with a conflict and is simply planned again.
"""

from __future__ import annotations

from dataclasses import dataclass

from eventedpleg.core.rollout.drain.policy import DrainPolicy
from eventedpleg.core.rollout.drain.taints import NO_TAINTS, NodeTaints
from eventedpleg.core.rollout.snapshot import NodeView
from eventedpleg.protocol import Cause


@dataclass(frozen=True)
class Cordon:
    """Take the node, as its take verdict (drain.takeverdict) says: its pods are listed before any write;
    a node running static (mirror) pods is marked Skipped, not cordoned, unless `include_control_plane`
    (k8s#121349, #123087); otherwise owner, was-unschedulable, cordon, state=Draining in one write (with
    the apply request when there is nothing to evict), then kubectl's list after the cordon and the first
    eviction pass. It may instead taint first, ask in place, hold the node or not take it (onBlocked).
    """

    node: str
    resource_version: str
    owner: str
    hash: str
    include_control_plane: bool
    was_unschedulable: bool  # valid because the write is conditional on resource_version
    agent_options: str
    drain: DrainPolicy  # for the pod survey and the first drain attempt
    # Autoscaler keys the user set before (valid, like was_unschedulable, by the rv precondition): our
    # cordon adds the others (protocol.AUTOSCALER_ANNOTATIONS) and lists them in ANN_AUTOSCALER_HOLD.
    autoscaler_user: frozenset[str] = frozenset()
    blocked: str = ""  # what the node says now (onBlocked: Wait); the Event is only sent when it changes
    host_refusal: str = ""  # the node's agent would refuse this change (core.hostcheck): never cordon it
    # drain.taintBeforeCordon: a node not tainted yet gets the taint instead of the cordon (the planner
    # cordons it once the wait is over); a node not taken after all loses our taint again.
    taints: NodeTaints = NO_TAINTS
    # spec.drain.mode: InPlace. in_place: neither cordon nor drain, ask the agent at once; drained_because:
    # why this node is drained first all the same (compat.in_place_refusal).
    in_place: bool = False
    drained_because: str = ""
    retrying: bool = False  # an automatic retry after a drain timeout: re-checks the budget first


@dataclass(frozen=True)
class AskApproval:
    """spec.rollout.approval: Manual: say, once per config (the node's Event and ANN_AWAITING_APPROVAL),
    that the node waits in service for `eventedpleg approve`. Nothing else on the node changes."""

    node: str
    resource_version: str
    hash: str


def approval_text(node: str, config: str) -> str:
    """What a node waiting for approval says, in its Event and in status."""
    return (
        f"not cordoned: waiting for approval of config {config} (spec.rollout.approval: Manual); "
        f"approve with `eventedpleg approve {node}`"
    )


@dataclass(frozen=True)
class Drain:
    """Evict what kubectl drain would evict (PDBs respected). Once nothing is left: desired=hash,
    agent-options, state=Applying. `deadline_reached` applies `on_timeout` instead of waiting longer.
    Static pods are looked for again (the Cordon step may have ended before its own check)."""

    node: str
    resource_version: str
    hash: str
    agent_options: str
    include_control_plane: bool
    deadline_reached: bool
    drain: DrainPolicy
    was_unschedulable: bool
    reason: str  # what the node says now; the blocking reason is only written when it changes
    autoscaler_hold: tuple[str, ...] = ()  # removed when a timed-out drain gives the node back
    drain_timeouts: int = 0  # earlier drains of this node that timed out in a row
    cordoned: bool = True  # the node is still cordoned (valid, like the rest, by the rv precondition)
    taints: NodeTaints = NO_TAINTS  # our taint (taintBeforeCordon) goes when the node is given back


@dataclass(frozen=True)
class Uncordon:
    """Give the node back: restore the pre-existing cordon (if any), drop our cordon mark."""

    node: str
    resource_version: str
    was_unschedulable: bool
    autoscaler_hold: tuple[str, ...] = ()  # the autoscaler keys our cordon added: removed with it
    taints: NodeTaints = NO_TAINTS  # our taint (taintBeforeCordon) goes with it
    # Given back before the agent was asked to change anything, because its agent is gone: the state goes
    # too (the node waits, in service, until its agent runs again) and a Warning says why.
    agent_gone: str = ""


@dataclass(frozen=True)
class MarkFailed:
    """The agent did not answer in time: Failed, node stays cordoned for a human."""

    node: str
    resource_version: str
    reason: str
    cause: Cause | None = None  # written with it (ANN_CAUSE): what the planner decides on


@dataclass(frozen=True)
class Release:
    """Stop managing the node: remove our annotations (keep current-config when files stay on the node)
    and undo our cordon if one is in place."""

    node: str
    resource_version: str
    keep_current: bool
    uncordon: bool
    was_unschedulable: bool
    autoscaler_hold: tuple[str, ...] = ()  # the autoscaler keys our cordon added: removed with ours
    taints: NodeTaints = NO_TAINTS  # our taint (taintBeforeCordon) goes too
    # What is left on the node that nobody will undo (a deletion letting go of a Failed node): a Warning
    # says it, with the command that ends it.
    left: str = ""


@dataclass(frozen=True)
class SetAgentOptions:
    """The spec changed options the agent uses after Done (healFallback, timeouts): no drain needed."""

    node: str
    resource_version: str
    agent_options: str


Action = Cordon | Drain | Uncordon | MarkFailed | Release | SetAgentOptions | AskApproval


def release(node: NodeView, keep_current: bool, left: str = "") -> Release:
    """Release `node`, undoing what we did to it as its marks say."""
    marks = node.marks
    return Release(
        node.name,
        node.resource_version,
        keep_current=keep_current,
        uncordon=marks.cordoned_by_us,
        was_unschedulable=marks.was_unschedulable,
        autoscaler_hold=marks.autoscaler_hold,
        taints=node.our_taints,
        left=left,
    )


def uncordon(node: NodeView, agent_gone: str = "") -> Uncordon:
    """Give `node` back, restoring the cordon it had before ours as its marks say."""
    marks = node.marks
    return Uncordon(
        node.name,
        node.resource_version,
        marks.was_unschedulable,
        marks.autoscaler_hold,
        node.our_taints,
        agent_gone=agent_gone,
    )
