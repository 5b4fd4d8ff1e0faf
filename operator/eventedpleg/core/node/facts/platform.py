"""Platforms that build the kubelet's flags and config themselves, recognised from the host. Pure.

Two kinds (docs/platforms.md has the whole table and its sources):

- Platforms that own the kubelet's settings: anything the agent wrote would be lost or fought over, so the
  agent leaves the node alone and names the platform's own way. Bottlerocket renders the kubelet's config
  from its settings API at every boot over a read-only root (bottlerocket-os/bottlerocket
  packages/kubernetes/kubelet.service, kubelet-config); Talos runs the kubelet from its machine config,
  not as a systemd unit (`machine.kubelet.extraConfig`, docs.siderolabs.com); GKE's node start-up
  (kubernetes cluster/gce/gci/configure-helper.sh, kube-env in /home/kubernetes) writes the kubelet's unit,
  /etc/default/kubelet and /home/kubernetes/kubelet-config.yaml again on every boot; OpenShift's Machine
  Config Operator owns the kubelet's config and takes feature gates only from the cluster's FeatureGate
  (openshift/machine-config-operator).
- Platforms whose own bootstrap can give the kubelet --config-dir: the fix then names that way rather than
  an edit of a file the bootstrap writes. EKS's nodeadm passes --config-dir=/etc/kubernetes/kubelet/
  config.json.d when its NodeConfig has spec.kubelet.config (awslabs/amazon-eks-ami nodeadm/internal/
  kubelet/config.go, writeKubeletConfigToDir).

They are told apart by /etc/os-release's ID (os-release(5)) or by a path their bootstrap leaves.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

OS_RELEASE = "/etc/os-release"
SKIP = "label the node eventedpleg.io/skip=true"


@dataclass(frozen=True)
class Platform:
    name: str
    os_ids: tuple[str, ...] = ()  # /etc/os-release ID values
    marks: tuple[str, ...] = ()  # host paths only this platform's bootstrap leaves
    owns_kubelet: str = ""  # why the agent leaves the kubelet alone ("" when it may manage it)
    fix: str = ""  # the platform's own way to turn the gate on (owns_kubelet) or to get --config-dir


BOTTLEROCKET = Platform(
    "Bottlerocket",
    os_ids=("bottlerocket",),
    owns_kubelet=(
        "Bottlerocket renders the kubelet's config (/etc/kubernetes/kubelet/config) from its settings API at "
        "every boot and keeps the root filesystem read-only, so a file the agent wrote would be gone at the "
        "next boot"
    ),
    fix=f"set the kubelet's settings through Bottlerocket's API (`apiclient set`) only, and {SKIP}",
)
TALOS = Platform(
    "Talos",
    os_ids=("talos",),
    owns_kubelet=(
        "Talos runs the kubelet from its machine config (no kubelet.service, a read-only root filesystem)"
    ),
    fix=(
        "set machine.kubelet.extraConfig: {featureGates: {EventedPLEG: true}} with `talosctl patch "
        f"machineconfig`, node by node, and {SKIP}"
    ),
)
GKE = Platform(
    "GKE",
    marks=("/home/kubernetes/kube-env",),
    owns_kubelet=(
        "GKE's node start-up writes kubelet.service, /etc/default/kubelet and "
        "/home/kubernetes/kubelet-config.yaml again on every boot from the node pool, so a change the agent "
        "made would be silently undone"
    ),
    fix=(
        "change the kubelet only through the node pool (GKE's node system configuration, which lists no "
        f"feature gates), and {SKIP}"
    ),
)
OPENSHIFT = Platform(
    "OpenShift",
    os_ids=("rhcos", "scos"),
    owns_kubelet=(
        "the Machine Config Operator owns the kubelet's and CRI-O's config on this node (a file written "
        "beside its own is outside what it renders and supports) and takes feature gates only from the "
        "cluster's FeatureGate"
    ),
    fix=(
        "turn EventedPLEG on in the FeatureGate `cluster` (featureSet CustomNoUpgrade, which blocks "
        f"upgrades) and CRI-O's enable_pod_events with a MachineConfig, or {SKIP}"
    ),
)
EKS_NODEADM = Platform(
    "EKS (nodeadm)",
    marks=("/etc/eks/kubelet/environment",),
    fix=(
        "set spec.kubelet.config in the node's nodeadm NodeConfig (user data; any KubeletConfiguration "
        "field): nodeadm then starts the kubelet with --config-dir=/etc/kubernetes/kubelet/config.json.d"
    ),
)
PLATFORMS = (BOTTLEROCKET, TALOS, GKE, OPENSHIFT, EKS_NODEADM)
MARKS: tuple[str, ...] = tuple(m for p in PLATFORMS for m in p.marks)


def os_release(text: str | None) -> Mapping[str, str]:
    """KEY=value lines of /etc/os-release (os-release(5)), values unquoted."""
    fields: dict[str, str] = {}
    for line in (text or "").splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key and not key.startswith("#"):
            fields[key] = value.strip().strip("\"'")
    return fields


def recognise(os_release_text: str | None, present: Iterable[str]) -> Platform | None:
    """The platform /etc/os-release's ID or a mark on the host (`present`: the marks that exist) names."""
    os_id = os_release(os_release_text).get("ID", "")
    have = set(present)
    for platform in PLATFORMS:
        if os_id in platform.os_ids or any(m in have for m in platform.marks):
            return platform
    return None
