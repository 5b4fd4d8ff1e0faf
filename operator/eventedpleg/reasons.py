"""Every `reason` the product writes: of its Events and of the NodeConfig's conditions.

Two vocabularies, both CamelCase words that tools match on (`kubectl get events --field-selector reason=X`,
alert rules), so the text of a member never changes. Not the node's eventedpleg.io/reason annotation: that
one is a human line (eventedpleg.protocol). README "Status, Events, metrics" names every Event reason
(tests/unit/test_reasons.py holds it to that).
"""

from collections.abc import Mapping
from enum import StrEnum
from typing import Final

from eventedpleg.protocol import NodeState


class EventReason(StrEnum):
    """The reason of an Event on a Node or a NodeConfig. An Event that reports a NodeConfig condition turning
    (Degraded, Stalled on a budget, an invalid spec) carries that condition's ConditionReason instead."""

    # Node, from the operator's steps (core.rollout.steps)
    AWAITING_APPROVAL = "AwaitingApproval"  # spec.rollout.approval Manual: waits for `eventedpleg approve`
    NODE_HELD = (
        "NodeHeld"  # not taken for now: a blocking pod (drain.onBlocked Wait), another maintenance owner
    )
    TAINTED = "Tainted"  # drain.taintBeforeCordon: tainted now, cordoned after the wait
    DRAINING = "Draining"
    DRAIN_BLOCKED = "DrainBlocked"  # what keeps the drain from finishing (a PDB, a do-not-disrupt pod)
    DRAIN_TIMEOUT = "DrainTimeout"
    DRAINED = "Drained"
    IN_PLACE = "InPlace"  # drain.mode InPlace: asked to apply without a cordon
    NOT_IN_PLACE = "NotInPlace"  # InPlace asked, but this node is drained first (or Skipped)
    PODS_BOUND_DURING_CORDON = "PodsBoundDuringCordon"  # pods the scheduler bound between survey and cordon
    UNCORDONED_BY_OTHERS = "UncordonedByOthers"  # someone else uncordoned the node mid-drain
    AGENT_GONE = "AgentGone"  # its agent went away before being asked to apply: given back unchanged
    SKIPPED = "Skipped"
    UNCORDONED = "Uncordoned"
    KEPT_CORDONED = "KeptCordoned"  # given back, still cordoned: it was cordoned before the rollout
    RELEASED = "Released"  # no longer managed: every key of the protocol removed
    RELEASED_AS_IS = "ReleasedAsIs"  # a failed node let go as it is (the NodeConfig deleted)
    # Node, from the agent (core.node.phases); UNSUPPORTED from the operator's Skip of a refused host too
    UNSUPPORTED = "Unsupported"  # the host cannot run Evented PLEG as asked: nothing changed
    APPLYING = "Applying"
    VERIFIED = "Verified"  # a Warning when the plan carried warnings
    VERIFICATION_FAILED = "VerificationFailed"  # onFailure Halt: left as it failed, still cordoned
    ROLLED_BACK = "RolledBack"
    ROLLBACK_FAILED = "RollbackFailed"
    CONFIG_REJECTED = (
        "ConfigRejected"  # bad input from the API side (rendered config, options): nothing touched
    )
    HOST_FAULT = "HostFault"  # a file operation or command failed (the errno and the fix in the message)
    DRIFT = "Drift"  # after Done: our file changed or went, or the kubelet runs with the gate off
    FALLBACK_DETECTED = "FallbackDetected"  # after Done: the kubelet fell back to generic PLEG (k8s#129827)
    FALLBACK_HEALED = "FallbackHealed"  # ...and a kubelet restart healed it
    FALLBACK_NOT_HEALED = "FallbackNotHealed"
    # The agent's guard (core.node.phases.guardphase): the kubelet <= 1.36 stopped syncing pods (a full
    # PLEG channel), lost its event stream without falling back, or lost a live pod's status; healed by a
    # kubelet restart, or not; a node that kept failing taken back to generic PLEG.
    PLEG_WEDGED = "PLEGWedged"
    EVENT_STREAM_LOST = "EventStreamLost"
    POD_STATUS_LOST = "PodStatusLost"
    PLEG_WEDGE_HEALED = "PLEGWedgeHealed"
    PLEG_WEDGE_NOT_HEALED = "PLEGWedgeNotHealed"
    GUARD_ROLLED_BACK = "GuardRolledBack"
    EVENTS_MISSED = "EventsMissed"  # another consumer takes containerd's events from the kubelet
    AGENT_ERROR = "AgentError"  # an error of the agent's own while it held the node
    # NodeConfig (controller.publisher), besides the condition reasons
    ROLLOUT_COMPLETE = "RolloutComplete"  # Available turned True
    RECOVERED = "Recovered"  # Degraded turned False
    NODE_FAILED = "NodeFailed"  # also on the Node, when the operator marks it Failed
    NODE_ROLLED_BACK = "NodeRolledBack"


# The NodeConfig's Warning for each node newly counted failed, by its state (the planner counts these two).
NODE_FAILURE_EVENTS: Final[Mapping[str, EventReason]] = {
    NodeState.FAILED: EventReason.NODE_FAILED,
    NodeState.ROLLED_BACK: EventReason.NODE_ROLLED_BACK,
}


class ConditionReason(StrEnum):
    """The reason of a NodeConfig condition (core.rollout.status)."""

    AS_EXPECTED = "AsExpected"  # the abnormal-true conditions (Degraded, Stalled) when False
    RECONCILING = "Reconciling"  # a generation seen, not planned yet
    INVALID_SPEC = "InvalidSpec"  # the spec passed admission but this operator cannot use it
    DELETING = "Deleting"
    # Available
    ALL_NODES_UPDATED = "AllNodesUpdated"
    ROLLOUT_IN_PROGRESS = "RolloutInProgress"
    NODES_FAILED = "NodesFailed"
    CONFLICT = "Conflict"  # a node another NodeConfig manages
    NODES_SKIPPED = "NodesSkipped"  # every eligible node skipped for a fault: nothing runs the gate
    # Progressing
    NODES_UPDATING = "NodesUpdating"
    WAITING = "Waiting"  # nothing in progress: waiting for capacity or a gate
    AWAITING_APPROVAL = "AwaitingApproval"
    ROLLOUT_COMPLETE = "RolloutComplete"
    ROLLOUT_HALTED = "RolloutHalted"  # maxFailedNodes reached
    NODES_BLOCKED = "NodesBlocked"  # every remaining node is blocked in a way waiting will not fix
    PAUSED = "Paused"
    OUTSIDE_MAINTENANCE_WINDOW = "OutsideMaintenanceWindow"
    ALERTS_FIRING = "AlertsFiring"
    # Degraded, besides NodesFailed, Conflict, RolloutHalted
    CANARY_FAILED = "CanaryFailed"
    WORKLOAD_NOT_READY = "WorkloadNotReady"  # rollout.healthGate: pods not Ready after the node was Done
    # Paused
    SPEC_PAUSED = "SpecPaused"
    RUNNING = "Running"  # Paused False
    # Ready, Reconciling, Stalled: as Progressing and Degraded say, and
    BUDGET_HELD_BY_OTHER_NODES = "BudgetHeldByOtherNodes"  # only nodes made unavailable by others hold it
