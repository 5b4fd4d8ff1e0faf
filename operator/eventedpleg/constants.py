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

# --- Node protocol (request/acknowledge, as MCO's desiredConfig/currentConfig) --------------------------
# Operator, for a node that needs hash H (ConfigMap CONFIGMAP_PREFIX+H in the operator's namespace):
#   1. owner=<NodeConfig>, was-unschedulable=<true|false>, cordon, cordoned=true, state=Cordoned
#   2. state=Draining while evicting (PDBs respected)
#   3. once drained: agent-options=<json>, desired-config=H, state=Applying
# Agent (acts only when state=Applying and desired-config != current-config):
#   4. state=Verifying after writing files and restarting runtime then kubelet
#   5. success: current-config=H, state=Done, evidence, reason
#      failure: restore the previous files exactly, restart, re-verify -> state=RolledBack (current-config
#      unchanged) with evidence; onFailure=Halt or a failed rollback -> state=Failed (node stays cordoned)
# Operator:
#   6. Done: uncordon unless was-unschedulable, drop `cordoned`. RolledBack/Failed: count the failure,
#      halt the rollout at maxFailedNodes.
# Agent after Done: watches for drift (our file changed/removed) and silent fallback to generic PLEG
# (k8s#129827); heals fallback by a kubelet restart when agent-options allow, else state=Drifted, which
# the operator treats as "needs update" (cordon, drain, apply again).
ANN_DESIRED: Final = f"{GROUP}/desired-config"  # operator: hash the agent must apply (set once drained)
ANN_CURRENT: Final = f"{GROUP}/current-config"  # agent: hash verified on this node
ANN_STATE: Final = f"{GROUP}/state"  # NodeState below; written by whoever owns the step
ANN_REASON: Final = f"{GROUP}/reason"  # one line, human readable
ANN_EVIDENCE: Final = f"{GROUP}/evidence"  # agent: compact JSON of what verification saw
ANN_OWNER: Final = f"{GROUP}/owner"  # name of the NodeConfig that manages the node
ANN_WAS_UNSCHEDULABLE: Final = f"{GROUP}/was-unschedulable"  # "true" when the node was cordoned before us
ANN_CORDONED_BY_US: Final = f"{GROUP}/cordoned"  # "true" while our cordon is in place
ANN_STATE_SINCE: Final = f"{GROUP}/state-since"  # RFC 3339 time the state was entered
ANN_AGENT_OPTIONS: Final = f"{GROUP}/agent-options"  # operator: JSON AgentOptions (timeouts, heal, onFailure)
ANN_BENEFIT: Final = f"{GROUP}/benefit"  # agent: before/after relist and CPU figures (JSON)

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

    PENDING = "Pending"
    CORDONED = "Cordoned"
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
