"""The lab's node set: which kubelet and runtime each node runs, and its addresses (pure).

Every node is attached to one host bridge (BRIDGE, GATEWAY/24). Node N has the address 172.16.77.(10+N) and
the pod subnet 10.244.N.0/24; each node routes the other nodes' pod subnets to their addresses, so pods
reach each other across nodes without an overlay.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from enum import StrEnum

BRIDGE = "eplab0"
GATEWAY = "172.16.77.1"
NODE_NET = ipaddress.IPv4Network("172.16.77.0/24")
MAX_NODES = 9
# The lab's OCI registry (`crane registry serve`), on the host's bridge address: plain HTTP, reachable from
# every node and only from the machine itself.
REGISTRY = f"{GATEWAY}:5000"
CGROUP_PREFIX = "eplab-"


class LabRuntime(StrEnum):
    CONTAINERD_22 = "containerd-2.2"  # built from Go modules (the real-node rig's build)
    CONTAINERD_17 = "containerd-1.7"  # built from Go modules: one event subscriber (containerd#7318)
    CONTAINERD_16 = "containerd-1.6"  # Debian bookworm's package: no GetContainerEvents
    # Both built from Go modules; conmon and runc from Debian. 1.34 sends empty container statuses in its
    # events, which kubelets <= 1.36 dereference (cri-o#9663, fixed in 1.35.0): Risky under kubelet 1.36.
    CRIO_134 = "crio-1.34"
    CRIO_136 = "crio-1.36"

    @property
    def is_crio(self) -> bool:
        return self in (LabRuntime.CRIO_134, LabRuntime.CRIO_136)


# The options a node may carry (the spec's fourth field), and which runtimes each fits.
ADMIN_POD_EVENTS_OFF = "admin-pod-events-off"  # CRI-O: a site drop-in forcing pod events off
KUBEADM = "kubeadm"  # joined with `kubeadm join`, laid out as kubeadm's Debian packages lay a node out
KUBEADM_RUNTIMES = (LabRuntime.CONTAINERD_22, LabRuntime.CONTAINERD_17)


KUBELETS = ("1.36", "1.37")


@dataclass(frozen=True)
class NodeSpec:
    name: str
    index: int  # 1..MAX_NODES: decides the addresses
    kubelet: str  # a key of KUBELETS
    runtime: LabRuntime
    # CRI-O only: an administrator's own drop-in, later in crio.conf.d than ours, forcing pod events off.
    admin_pod_events_off: bool = False
    # Joined by the real `kubeadm join` (the kubelet unit and 10-kubeadm.conf from the packages, config.yaml
    # and kubeadm-flags.env written by kubeadm, no --config-dir) instead of the lab's own kubelet unit.
    kubeadm: bool = False

    @property
    def ip(self) -> str:
        return str(NODE_NET.network_address + 10 + self.index)

    @property
    def pod_subnet(self) -> str:
        return f"10.244.{self.index}.0/24"

    @property
    def pod_gateway(self) -> str:
        return f"10.244.{self.index}.1"

    @property
    def cgroup(self) -> str:
        return CGROUP_PREFIX + self.name

    def to_text(self) -> str:
        tail = f":{ADMIN_POD_EVENTS_OFF}" if self.admin_pod_events_off else ""
        tail += f":{KUBEADM}" if self.kubeadm else ""
        return f"{self.name}:{self.kubelet}:{self.runtime.value}{tail}"


DEFAULT_SPEC = ",".join(
    (
        "lab-c22:1.36:containerd-2.2",
        "lab-crio:1.36:crio-1.36",
        "lab-c37:1.37:containerd-2.2",
        "lab-c16:1.36:containerd-1.6",
        "lab-crio-off:1.36:crio-1.34:admin-pod-events-off",  # CRI-O 1.34 under 1.36: Risky (cri-o#9663)
        # Joined by the real kubeadm, laid out as kubeadm's packages lay a node out (no --config-dir).
        "lab-k22:1.36:containerd-2.2:kubeadm",
        "lab-k17:1.36:containerd-1.7:kubeadm",  # containerd 1.7: Risky, skipped without allowRisky
    )
)


class SpecError(ValueError):
    pass


SPEC_SYNTAX = f"NAME:KUBELET:RUNTIME[:{ADMIN_POD_EVENTS_OFF}|:{KUBEADM}]"


def parse(text: str) -> tuple[NodeSpec, ...]:
    """`NAME:KUBELET:RUNTIME[:admin-pod-events-off|:kubeadm]`, comma-separated; indexes follow the order."""
    nodes: list[NodeSpec] = []
    for index, item in enumerate((part.strip() for part in text.split(",") if part.strip()), start=1):
        fields = item.split(":")
        if len(fields) not in (3, 4):
            raise SpecError(f"{item!r}: want {SPEC_SYNTAX}")
        name, kubelet, runtime = fields[:3]
        extra = fields[3] if len(fields) == 4 else ""
        if not name or not all(ch.isalnum() or ch == "-" for ch in name) or name != name.lower():
            raise SpecError(f"{name!r}: a node name is lower-case letters, digits and '-'")
        if kubelet not in KUBELETS:
            raise SpecError(f"{item!r}: kubelet must be one of {', '.join(KUBELETS)}")
        try:
            rt = LabRuntime(runtime)
        except ValueError:
            raise SpecError(
                f"{item!r}: runtime must be one of {', '.join(r.value for r in LabRuntime)}"
            ) from None
        if extra == ADMIN_POD_EVENTS_OFF and not rt.is_crio:
            raise SpecError(f"{item!r}: {ADMIN_POD_EVENTS_OFF} is for a CRI-O node")
        if extra == KUBEADM and (rt not in KUBEADM_RUNTIMES or kubelet != "1.36"):
            runtimes = ", ".join(r.value for r in KUBEADM_RUNTIMES)
            raise SpecError(f"{item!r}: {KUBEADM} is for a kubelet 1.36 node on {runtimes}")
        if extra not in ("", ADMIN_POD_EVENTS_OFF, KUBEADM):
            raise SpecError(f"{item!r}: the options are {ADMIN_POD_EVENTS_OFF} (CRI-O) and {KUBEADM}")
        nodes.append(
            NodeSpec(
                name,
                index,
                kubelet,
                rt,
                admin_pod_events_off=extra == ADMIN_POD_EVENTS_OFF,
                kubeadm=extra == KUBEADM,
            )
        )
    if not nodes:
        raise SpecError("no nodes")
    if len(nodes) > MAX_NODES:
        raise SpecError(f"at most {MAX_NODES} nodes")
    if len({n.name for n in nodes}) != len(nodes):
        raise SpecError("node names must be unique")
    return tuple(nodes)
