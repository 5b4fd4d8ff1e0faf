"""Every name the product shares with the cluster: API group, annotation and label keys, node states.

One module so that the operator, the agent, the chart and the tests cannot drift apart (MCO keeps the same
list in pkg/daemon/constants/constants.go).
"""

from enum import StrEnum
from typing import Final

GROUP: Final = "eventedpleg.io"
VERSION: Final = "v1alpha1"
KIND: Final = "NodeConfig"
PLURAL: Final = "nodeconfigs"
SINGULAR: Final = "nodeconfig"
SHORT_NAMES: Final = ("nc", "epc")
CRD_NAME: Final = f"{PLURAL}.{GROUP}"

FINALIZER: Final = f"{GROUP}/revert-on-delete"
# The leader-election Lease, in the operator's namespace; `kubectl get lease` shows which replica leads.
LEASE_NAME: Final = "eventedpleg-operator"

# --- Node protocol (request/acknowledge, as MCO's desiredConfig/currentConfig) --------------------------
# The operator's steps are planned by core.rollout.planner and written by core.rollout.steppolicy
# (through controller.executor); the agent's rule for acting is core.node.phases.agentdecide. Every operator
# write is conditional on the resourceVersion it planned on; every agent write is conditional on
# desired-config being unchanged.
#
# Operator, for a node that needs hash H (ConfigMap CONFIGMAP_PREFIX+H in the operator's namespace):
#   1. Cordon step, one write: owner=<NodeConfig>, was-unschedulable=<true|false>, spec.unschedulable,
#      cordoned=true, state=Draining. Then, in the same step: static pods on the node -> give it back,
#      desired-config=H, state=Skipped (unless includeControlPlane); else the first eviction pass.
#   2. Drain step while pods remain (PDBs respected): reason names what blocks; at drain.timeoutSeconds
#      onTimeout decides: give the node back with state=Failed or Skipped (desired-config=H), or delete.
#   3. Once drained (in step 1 or 2): agent-options=<json>, desired-config=H, state=Applying.
# Agent (core.node.phases.agentdecide: acts when desired-config is set and state=Applying -- also when
# current-config already equals it, a re-apply request --, or state=Verifying with desired != current,
# i.e. it was interrupted after writing files):
#   4. state=Verifying after writing files and restarting runtime then kubelet
#   5. success: current-config=H, state=Done, evidence, benefit, reason
#      failure: restore the previous files exactly, restart, re-verify -> state=RolledBack (current-config
#      unchanged) with evidence; onFailure=Halt or a failed rollback -> state=Failed (node stays cordoned);
#      a node the agent refuses (unsupported host) -> state=Skipped, nothing changed
# Operator:
#   6. Done: uncordon unless was-unschedulable, drop `cordoned`. RolledBack/Failed: count the failure,
#      halt the rollout at maxFailedNodes. No report within the verification timeout: state=Failed.
#   7. A node no longer selected (or the NodeConfig deleted): all keys below removed (current-config kept
#      when our files stay on the node), our cordon undone.
# Agent after Done: watches for drift (our file changed/removed) and silent fallback to generic PLEG
# (k8s#129827); heals fallback by a kubelet restart when agent-options allow (state stays Done), else
# state=Drifted with current-config removed, which the operator treats as "needs update" (steps 1-3).
#
# Writers. Each key has one writer, except the three that carry the hand-off (state, state-since, reason):
# the operator writes them while it holds the node (Draining, Applying, and Failed/Skipped when it gives a
# node up), the agent from Applying on (Verifying, Done, RolledBack, Failed, Skipped, Drifted). They never
# write at the same time: the operator writes nothing while the agent holds the node (Applying,
# Verifying: core.rollout.snapshot.AGENT_PHASE) except Failed when the agent never answers, and the agent
# writes only in the states core.node.phases.agentdecide names, conditional on desired-config. One key, not
# one
# per writer, because `kubectl get node -L eventedpleg.io/state` and status must show one current state.
# Release (7) removes every key, agent keys included, but the agent's host check (about the host, not about
# a NodeConfig): it is the end of the protocol for that node.
#
# Live agent: the operator cordons a node only while its host check (ANN_HOST_CHECK) is fresh
# (core.hostcheck.absence: younger than FRESH_PERIODS of the publishing period the check states), and
# gives a node it took back, unchanged, when the check goes stale before the agent was asked to apply, or
# GONE_GRACE after its agent marked the check stopped (a replaced agent pod is back well before that).
ANN_DESIRED: Final = f"{GROUP}/desired-config"  # operator: hash the agent must apply (set once drained)
ANN_CURRENT: Final = f"{GROUP}/current-config"  # agent: hash verified on this node (Release removes it)
ANN_STATE: Final = f"{GROUP}/state"  # NodeState below; operator and agent, by phase (see Writers)
ANN_REASON: Final = f"{GROUP}/reason"  # operator and agent, with state: one line, human readable
ANN_EVIDENCE: Final = f"{GROUP}/evidence"  # agent: compact JSON of what verification saw
ANN_OWNER: Final = f"{GROUP}/owner"  # operator: name of the NodeConfig that manages the node
ANN_WAS_UNSCHEDULABLE: Final = f"{GROUP}/was-unschedulable"  # operator: "true" when cordoned before us
ANN_CORDONED_BY_US: Final = f"{GROUP}/cordoned"  # operator: "true" while our cordon is in place
ANN_STATE_SINCE: Final = f"{GROUP}/state-since"  # operator and agent, with state: RFC 3339 time entered
ANN_AGENT_OPTIONS: Final = f"{GROUP}/agent-options"  # operator: JSON AgentOptions (timeouts, heal, onFailure)
ANN_BENEFIT: Final = f"{GROUP}/benefit"  # agent: before/after relist and CPU figures (JSON)
# operator: how many drains of this node timed out in a row (onTimeout: Fail); drives the automatic retry
# with back-off (spec.drain.retries), cleared once a drain finishes
ANN_DRAIN_TIMEOUTS: Final = f"{GROUP}/drain-timeouts"
# operator: the autoscaler keys below that our cordon added (comma-separated); only these are removed when
# the node is given back, so a value the user set before the cordon is never touched
ANN_AUTOSCALER_HOLD: Final = f"{GROUP}/autoscaler-hold"
# operator: why the node, still in service, is not taken (spec.drain.onBlocked: Wait): a drain that could
# never finish as things are; cleared by the cordon that takes the node
ANN_BLOCKED: Final = f"{GROUP}/blocked"
# agent: what its host check found before the node is taken (JSON, core.hostcheck): per kubeletConfig mode,
# the refusal it would report if asked to turn Evented PLEG on ("" when it would go ahead)
ANN_HOST_CHECK: Final = f"{GROUP}/host-check"
# operator (spec.drain.taintBeforeCordon): since when the node chosen waits, tainted, for its cordon; and the
# key of the taint we added (absent when a taint with that key was there before us: that one is not ours
# and is never removed). Both go, with our taint, whenever the node is given back.
ANN_TAINTED_SINCE: Final = f"{GROUP}/tainted-since"
ANN_TAINT: Final = f"{GROUP}/taint"

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

# On the NodeConfig, written by `eventedpleg retry` (people), read by the operator: JSON node -> the
# state-since of the failure to retry (core.rollout.retry).
ANN_RETRY: Final = f"{GROUP}/retry"

# spec.rollout.approval: Manual. `eventedpleg approve` (a person) writes ANN_APPROVED: the config hash the
# node may be taken for, so an approval is for one config; the operator never writes or removes it. The
# operator writes ANN_AWAITING_APPROVAL (the hash it asked approval for) with the node's AwaitingApproval
# Event, so that the Event is sent once per config.
ANN_APPROVED: Final = f"{GROUP}/approved"
ANN_AWAITING_APPROVAL: Final = f"{GROUP}/awaiting-approval"

# Every node annotation of the protocol: what Release removes (ANN_APPROVED is a person's: kept).
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
    ANN_HOST_CHECK,
    ANN_TAINTED_SINCE,
    ANN_TAINT,
    ANN_AWAITING_APPROVAL,
)

# A node labelled with this (any value but "false") is never touched; status lists it as Skipped.
LABEL_SKIP: Final = f"{GROUP}/skip"
# Nodes carrying this label opt in to being managed although they run static pods / the control plane.
LABEL_CONTROL_PLANE: Final = "node-role.kubernetes.io/control-plane"
LABEL_MASTER_LEGACY: Final = "node-role.kubernetes.io/master"
LABEL_ZONE: Final = "topology.kubernetes.io/zone"

# Rendered drop-ins live in an immutable ConfigMap named by their hash, in the operator's namespace.
CONFIGMAP_PREFIX: Final = "eventedpleg-rendered-"
CONFIGMAP_LABEL: Final = f"{GROUP}/rendered"
CM_KEY_KUBELET: Final = "kubelet.conf"
CM_KEY_CRIO: Final = "crio.conf"
CM_KEY_MANIFEST: Final = "manifest.json"

# File names on the host. "99-" sorts after every kubeadm/distro drop-in we know of, so ours wins the
# JSON-merge (kubelet: lexical WalkDir order; CRI-O: lexical order, last file wins;
# docs/compatibility.md §2, §3).
KUBELET_DROPIN_NAME: Final = "99-eventedpleg.conf"
CRIO_DROPIN_NAME: Final = "99-eventedpleg.conf"
CRIO_DROPIN_DIR: Final = "etc/crio/crio.conf.d"
# Agent's own bookkeeping on the host (backups for exact rollback); never inside a drop-in directory.
AGENT_STATE_DIR: Final = "var/lib/eventedpleg"

FEATURE_GATE: Final = "EventedPLEG"
EVENT_SOURCE: Final = "eventedpleg"


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


class ConditionType(StrEnum):
    AVAILABLE = "Available"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"
    PAUSED = "Paused"
    # kstatus (sigs.k8s.io/cli-utils/pkg/kstatus), read by Flux, Argo CD and `kubectl wait`:
    READY = "Ready"  # the rollout is complete for this generation, nothing failed
    RECONCILING = "Reconciling"  # abnormal-true: work is left and it can go on
    STALLED = "Stalled"  # abnormal-true: it cannot go on without a human
