"""The node protocol: how the operator and each node's agent talk, through annotations on the Node.

Request/acknowledge, as MCO's desiredConfig/currentConfig. The keys, the node states, the sets of states the
code branches on, the time stamps and who writes which key (WRITERS) are defined here and nowhere else, and
reached from here only (eventedpleg.constants has the product's other shared names, not these).

The operator's steps are planned by core.rollout.planner and written by core.rollout.steps (through
controller.executor); the agent's rule for acting is core.node.phases.agentdecide and what it writes is
core.node.blocks.effects (Report, PublishBenefit, PublishHostCheck). Every operator write is conditional on
the resourceVersion it planned on; every agent write but its host check is conditional on desired-config
being unchanged.

Operator, for a node that needs hash H (ConfigMap CONFIGMAP_PREFIX+H in the operator's namespace):
  0. Before the node is taken, still in service, as the spec asks: awaiting-approval (the hash a person is
     asked to approve: rollout.approval Manual; the person's `eventedpleg approve` writes ANN_APPROVED on
     the NodeConfig); owner and blocked (why it is left in service: a drain that could never finish under
     drain.onBlocked Wait, cause=DrainBlocked; or something that holds it for now, no cause); owner,
     tainted-since and taint
     (drain.taintBeforeCordon: the taint now, the cordon after the wait).
  1. Cordon step. First the take verdict (core.rollout.drain.takeverdict.classify, the one preflight
     shows), from the node's pods listed once, before any write (not needed for a refusal in the agent's
     host check or an in-place node): static pods or that refusal -> not cordoned, owner, desired-config=H,
     state=Skipped; a drain that could never finish -> drain.onBlocked; held for now -> owner, blocked (0);
     drain.taintBeforeCordon -> the taint (0); drain.mode InPlace -> no cordon, the apply request (3) at
     once. Else one write: owner, was-unschedulable, spec.unschedulable, cordoned=true, the autoscaler keys
     it adds (AUTOSCALER_ANNOTATIONS, listed in autoscaler-hold), state=Draining -- with the apply request
     (3) in the same write when there is nothing to evict -- then kubectl's list after the cordon and the
     first eviction pass. Every state the operator writes carries cause (Cause: why it skipped, failed or
     left the node) or removes it.
  2. Drain step while pods remain (PDBs respected): reason names what blocks; at drain.timeoutSeconds
     onTimeout decides: give the node back with state=Failed (drain-timeouts counts them, for the automatic
     retry) or Skipped (desired-config=H), or delete.
  3. Once drained (in step 1 or 2): agent-options=<json>, desired-config=H, state=Applying.
Agent (agentdecide: acts when desired-config is set and state=Applying -- also when current-config already
equals it, a re-apply request --, or state=Verifying with desired != current, i.e. it was interrupted after
writing files):
  4. state=Verifying after writing files and restarting runtime then kubelet
  5. success: current-config=H, state=Done, evidence, reason; then benefit (before/after figures)
     failure: restore the previous files exactly, restart, re-verify -> state=RolledBack (current-config
     unchanged) with evidence; onFailure=Halt or a failed rollback -> state=Failed (node stays cordoned);
     a node the agent refuses (unsupported host) -> state=Skipped, nothing changed; an error of its own
     while it holds the node -> state=Failed
Operator:
  6. Done: uncordon unless was-unschedulable, drop cordoned, autoscaler-hold and the keys it added.
     RolledBack/Failed: count the failure, halt the rollout at maxFailedNodes. No report within the
     verification timeout: state=Failed. New agent options while Done: agent-options alone.
  7. A node no longer selected (or the NodeConfig deleted): every key of NODE_ANNOTATIONS removed but the
     host check (current-config kept too when our files stay on the node), our cordon, taint and
     autoscaler keys undone. It is the end of the protocol for that node, so it is the one operator write
     that removes keys of the agent's (current-config, evidence, benefit).
Agent after Done: watches for drift (our file changed/removed) and silent fallback to generic PLEG
(k8s#129827); heals fallback by a kubelet restart when agent-options allow (state stays Done), else
state=Drifted with current-config removed, which the operator treats as "needs update" (steps 1-3).

Writers (WRITERS). Each key has one writer, except the three that carry the hand-off (state, state-since,
reason): the operator writes them while it holds the node (Draining, Applying, and Failed/Skipped when it
gives a node up or hears nothing), the agent from Applying on (Verifying, Done, RolledBack, Failed, Skipped,
Drifted). They never write at the same time: the operator writes nothing while the agent holds the node
(AGENT_PHASE) except Failed when the agent never answers, and the agent writes only in the states
agentdecide names, conditional on desired-config. One key, not one per writer, because status must show
one current state.

State label (LABEL_STATE): the label eventedpleg.io/state mirrors the state annotation, so that
`kubectl get nodes -L eventedpleg.io/state` shows it. Every Node write is built by k8s.nodes.node_patch,
which adds state_label(annotations) to it: the label changes in the same write, by the same writer, as the
annotation, and goes whenever the annotation goes. It is for display only: no decision reads it (the
planner and the agent read the annotation), and the chart's admission policies let the operator and the
agent change this one label, to the value of the state annotation of the same write, and no other.

Live agent: the agent publishes its host check (about the host, not about a NodeConfig) whenever it does not
hold the node, and marks it stopped on a clean exit (agent.main.withdraw_host_check). The operator cordons a
node only while that check is fresh (core.hostcheck.absence: younger than FRESH_PERIODS of the publishing
period the check states), and gives a node it took back, unchanged, when the check goes stale before the
agent was asked to apply, or GONE_GRACE after its agent marked the check stopped.

On the NodeConfig, ANN_RETRY: written by `eventedpleg retry` (a person), read by the operator (core.rollout.
retry): JSON node -> the state-since of the failure to retry. ANN_APPROVED likewise: written by
`eventedpleg approve`, read by the operator (core.rollout.approval): JSON node -> the config hash approved.
Both need `patch` on the NodeConfig, which no node's credential holds; every Node key the operator writes
is refused to everyone else by the chart's admission policy (node-keys-vap.yaml).

Time stamps in annotations (state-since, tainted-since, the host check's, the retry map's) are RFC 3339 in
UTC to the second: format_time writes them, parse_time reads them (also the "Z" form older agents wrote).
"""

import json
from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Final

# The API group; every key below is under it.
GROUP: Final = "eventedpleg.io"

ANN_DESIRED: Final = f"{GROUP}/desired-config"  # the hash the agent must apply (set once drained)
ANN_CURRENT: Final = f"{GROUP}/current-config"  # the hash verified on this node
ANN_STATE: Final = f"{GROUP}/state"  # NodeState below
LABEL_STATE: Final = f"{GROUP}/state"  # the label mirroring ANN_STATE (state_label), for display only
ANN_REASON: Final = f"{GROUP}/reason"  # with state: one line, human readable
ANN_STATE_SINCE: Final = f"{GROUP}/state-since"  # with state: when it was entered (format_time)
ANN_EVIDENCE: Final = f"{GROUP}/evidence"  # compact JSON of what verification saw
ANN_OWNER: Final = f"{GROUP}/owner"  # name of the NodeConfig that manages the node
ANN_WAS_UNSCHEDULABLE: Final = f"{GROUP}/was-unschedulable"  # "true" when cordoned before us
ANN_CORDONED_BY_US: Final = f"{GROUP}/cordoned"  # "true" while our cordon is in place
ANN_AGENT_OPTIONS: Final = f"{GROUP}/agent-options"  # JSON AgentOptions (timeouts, heal, onFailure)
ANN_BENEFIT: Final = f"{GROUP}/benefit"  # before/after relist, CPU and pod-start figures (JSON)
# How many drains of this node timed out in a row (onTimeout: Fail); drives the automatic retry with
# back-off (spec.drain.retries), cleared once a drain finishes.
ANN_DRAIN_TIMEOUTS: Final = f"{GROUP}/drain-timeouts"
# The autoscaler keys below that our cordon added (comma-separated); only these are removed when the node is
# given back, so a value the user set before the cordon is never touched.
ANN_AUTOSCALER_HOLD: Final = f"{GROUP}/autoscaler-hold"
# Why the node, still in service, is not taken (spec.drain.onBlocked: Wait): a drain that could never finish
# as things are; cleared by the cordon that takes the node.
ANN_BLOCKED: Final = f"{GROUP}/blocked"
# The kind of what the operator's last state write or ANN_BLOCKED says (Cause), for the planner: written
# with every state the operator writes (absent when it has no kind) and with ANN_BLOCKED. The agent's own
# Skipped reports carry their kind in the evidence (result "fault" or "refused").
ANN_CAUSE: Final = f"{GROUP}/cause"
# What the agent's host check found before the node is taken (JSON, core.hostcheck): per kubeletConfig
# mode, the refusal it would report if asked to turn Evented PLEG on ("" when it would go ahead).
ANN_HOST_CHECK: Final = f"{GROUP}/host-check"
# The agent's guard (core.guardincidents): the incidents it met on this node (JSON times and kinds), kept on
# the Node so that an agent restart does not forget how many fell in the window.
ANN_GUARD_INCIDENTS: Final = f"{GROUP}/guard-incidents"
# spec.drain.taintBeforeCordon: since when the node chosen waits, tainted, for its cordon; and the key of the
# taint we added (absent when a taint with that key was there before us: that one is not ours and is never
# removed). Both go, with our taint, whenever the node is given back.
ANN_TAINTED_SINCE: Final = f"{GROUP}/tainted-since"
ANN_TAINT: Final = f"{GROUP}/taint"
# spec.rollout.approval: Manual. The operator writes ANN_AWAITING_APPROVAL (the hash it asked approval for)
# with the node's AwaitingApproval Event, so that the Event is sent once per config. The approval itself
# is on the NodeConfig (ANN_APPROVED).
ANN_AWAITING_APPROVAL: Final = f"{GROUP}/awaiting-approval"
# On the NodeConfig, written by a person's command, read by the operator (see the module docstring).
ANN_APPROVED: Final = f"{GROUP}/approved"  # `eventedpleg approve` (core.rollout.approval)
ANN_RETRY: Final = f"{GROUP}/retry"  # `eventedpleg retry` (core.rollout.retry)

# Autoscaler annotations that keep a node while it is ours (from our cordon until we give it back), so
# that no autoscaler reclaims an empty node mid-drain or mid-restart. Written in the same patch as our
# cordon, removed in the same patch that gives the node back (uncordon, Skipped/Failed give-back, release).
# - Karpenter: "karpenter.sh/do-not-disrupt": "true" on a Node blocks consolidation and drift
#   (https://karpenter.sh/docs/concepts/disruption/#node-level-controls,
#   https://karpenter.sh/docs/reference/annotations/).
# - cluster-autoscaler: "cluster-autoscaler.kubernetes.io/scale-down-disabled": "true" on a Node keeps it
#   from being scaled down (cluster-autoscaler/FAQ.md, "How can I prevent Cluster Autoscaler from scaling
#   down a particular node?", https://github.com/kubernetes/autoscaler).
# The chart's operator ValidatingAdmissionPolicy (operator-vap.yaml) lets the operator change exactly these.
AUTOSCALER_ANNOTATIONS: Final = (
    "karpenter.sh/do-not-disrupt",
    "cluster-autoscaler.kubernetes.io/scale-down-disabled",
)
AUTOSCALER_VALUE: Final = "true"

# Every node annotation of the protocol: what Release removes.
NODE_ANNOTATIONS: Final = (
    ANN_OWNER,
    ANN_DESIRED,
    ANN_CURRENT,
    ANN_STATE,
    ANN_STATE_SINCE,
    ANN_REASON,
    ANN_EVIDENCE,
    ANN_CORDONED_BY_US,
    ANN_WAS_UNSCHEDULABLE,
    ANN_AGENT_OPTIONS,
    ANN_BENEFIT,
    ANN_AUTOSCALER_HOLD,
    ANN_DRAIN_TIMEOUTS,
    ANN_BLOCKED,
    ANN_CAUSE,
    ANN_HOST_CHECK,
    ANN_GUARD_INCIDENTS,
    ANN_TAINTED_SINCE,
    ANN_TAINT,
    ANN_AWAITING_APPROVAL,
)


class NodeState(StrEnum):
    """Per-node rollout state, in the order a node moves through them."""

    PENDING = "Pending"  # status only (waiting for capacity or a gate); never written on a node
    AWAITING_APPROVAL = "AwaitingApproval"  # status only (spec.rollout.approval: Manual); never written
    DRAINING = "Draining"
    APPLYING = "Applying"
    VERIFYING = "Verifying"
    DONE = "Done"
    FAILED = "Failed"
    ROLLED_BACK = "RolledBack"
    SKIPPED = "Skipped"
    DRIFTED = "Drifted"


class Cause(StrEnum):
    """Why the operator left a node Skipped, Failed or in service (ANN_CAUSE)."""

    DRAIN_BLOCKED = "DrainBlocked"  # a drain that could never finish as things are (drain.onBlocked)
    DRAIN_TIMEOUT = "DrainTimeout"  # the drain did not finish in time (drain.onTimeout)
    HOST_REFUSED = "HostRefused"  # its agent's host check said it would refuse the change
    STATIC_PODS = "StaticPods"  # it runs static pods and includeControlPlane is off
    NOT_IN_PLACE = "NotInPlace"  # drain.mode: InPlace, not safe there, inPlace.onIneligible: Skip
    WORKLOAD_NOT_READY = "WorkloadNotReady"  # rollout.healthGate: its pods not Ready after it was Done
    NO_AGENT = "NoAgent"  # status only, never written on a node: not taken, no live agent on it
    # The agent's guard took the gate off a node that kept failing; an agent's report carries it as its
    # evidence's result (core.guardincidents).
    GUARD_ROLLBACK = "GuardRollback"


# The states in which a node is in the rollout's hands (taken, not yet given back or finished).
IN_PROGRESS: Final = frozenset({NodeState.DRAINING, NodeState.APPLYING, NodeState.VERIFYING})
# The states in which the agent holds the node: it is mid-write or mid-restart, so the operator never pulls
# the node back and writes nothing but Failed when the agent never answers; nothing else of the agent's
# (its host check) runs meanwhile.
AGENT_PHASE: Final = frozenset({NodeState.APPLYING, NodeState.VERIFYING})


class Writer(StrEnum):
    """Who writes a Node annotation."""

    OPERATOR = "operator"
    AGENT = "agent"
    HANDOFF = "handoff"  # both, by phase: the operator while it holds the node, the agent from Applying on


# Who sets each Node annotation (removing one counts as writing it, but the release, step 7 above, removes
# the agent's keys too). The operator's steps may write OPERATOR and HANDOFF keys, the agent's reports and
# publications AGENT and HANDOFF keys (tests/unit/test_protocol.py holds both to it).
WRITERS: Final[dict[str, Writer]] = {
    ANN_OWNER: Writer.OPERATOR,
    ANN_DESIRED: Writer.OPERATOR,
    ANN_WAS_UNSCHEDULABLE: Writer.OPERATOR,
    ANN_CORDONED_BY_US: Writer.OPERATOR,
    ANN_AGENT_OPTIONS: Writer.OPERATOR,
    ANN_AUTOSCALER_HOLD: Writer.OPERATOR,
    ANN_DRAIN_TIMEOUTS: Writer.OPERATOR,
    ANN_BLOCKED: Writer.OPERATOR,
    ANN_CAUSE: Writer.OPERATOR,
    ANN_TAINTED_SINCE: Writer.OPERATOR,
    ANN_TAINT: Writer.OPERATOR,
    ANN_AWAITING_APPROVAL: Writer.OPERATOR,
    **dict.fromkeys(AUTOSCALER_ANNOTATIONS, Writer.OPERATOR),  # only those its cordon added
    ANN_STATE: Writer.HANDOFF,
    ANN_STATE_SINCE: Writer.HANDOFF,
    ANN_REASON: Writer.HANDOFF,
    ANN_CURRENT: Writer.AGENT,
    ANN_EVIDENCE: Writer.AGENT,
    ANN_BENEFIT: Writer.AGENT,
    ANN_HOST_CHECK: Writer.AGENT,
    ANN_GUARD_INCIDENTS: Writer.AGENT,
}


def format_time(when: datetime) -> str:
    """An annotation's time stamp: RFC 3339 to the second, as every writer of one writes it."""
    return when.isoformat(timespec="seconds")


def parse_time(text: str | None) -> datetime | None:
    """An annotation's time stamp, or None when it is missing or unreadable."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def json_map(text: str | None) -> dict[str, object]:
    """An annotation that holds a JSON object (a map keyed by node name), or {} when it is missing or
    unreadable: a request nobody can read asks for nothing."""
    try:
        raw = json.loads(text or "{}")
    except ValueError:
        return {}
    return {str(key): value for key, value in raw.items()} if isinstance(raw, dict) else {}


def state_label(annotations: Mapping[str, str | None]) -> dict[str, str | None]:
    """The label change that mirrors a write's state annotation change: the same value, None (removed)
    when the annotation is removed, nothing when the write leaves the state alone."""
    if ANN_STATE not in annotations:
        return {}
    return {LABEL_STATE: annotations[ANN_STATE]}
