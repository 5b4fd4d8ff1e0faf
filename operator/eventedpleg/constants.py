"""The names the product shares with the cluster beside the node protocol: the NodeConfig CRD's names, its
finalizer, labels, the rendered ConfigMaps, the files on the host, condition types.

One module so that the operator, the agent, the chart and the tests cannot drift apart (MCO keeps the same
list in pkg/daemon/constants/constants.go). The node protocol's names (the API group, annotation keys, the
state label, NodeState, Cause) live in eventedpleg.protocol only, with the protocol itself; this module
does not re-export them. The reasons of Events and conditions are in eventedpleg.reasons.
"""

from enum import StrEnum
from typing import Final

from eventedpleg import protocol

VERSION: Final = "v1alpha1"
KIND: Final = "NodeConfig"
PLURAL: Final = "nodeconfigs"
SINGULAR: Final = "nodeconfig"
SHORT_NAMES: Final = ("nc", "epc")
CRD_NAME: Final = f"{PLURAL}.{protocol.GROUP}"

FINALIZER: Final = f"{protocol.GROUP}/revert-on-delete"
# The leader-election Lease, in the operator's namespace; `kubectl get lease` shows which replica leads.
LEASE_NAME: Final = "eventedpleg-operator"

# A node labelled with this (any value but "false") is never touched; status lists it as Skipped.
LABEL_SKIP: Final = f"{protocol.GROUP}/skip"
# Nodes carrying this label opt in to being managed although they run static pods / the control plane.
LABEL_CONTROL_PLANE: Final = "node-role.kubernetes.io/control-plane"
LABEL_MASTER_LEGACY: Final = "node-role.kubernetes.io/master"
LABEL_ZONE: Final = "topology.kubernetes.io/zone"

# Rendered drop-ins live in an immutable ConfigMap named by their hash, in the operator's namespace.
CONFIGMAP_PREFIX: Final = "eventedpleg-rendered-"
CONFIGMAP_LABEL: Final = f"{protocol.GROUP}/rendered"
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


class ConditionType(StrEnum):
    AVAILABLE = "Available"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"
    PAUSED = "Paused"
    # kstatus (sigs.k8s.io/cli-utils/pkg/kstatus), read by Flux, Argo CD and `kubectl wait`:
    READY = "Ready"  # the rollout is complete for this generation, nothing failed
    RECONCILING = "Reconciling"  # abnormal-true: work is left and it can go on
    STALLED = "Stalled"  # abnormal-true: it cannot go on without a human
