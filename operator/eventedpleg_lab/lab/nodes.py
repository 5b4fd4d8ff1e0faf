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
POD_NET = ipaddress.IPv4Network("10.244.0.0/16")
MAX_NODES = 9
# The lab's OCI registry (`crane registry serve`), on the host's bridge address: plain HTTP, reachable from
# every node and only from the machine itself.
REGISTRY = f"{GATEWAY}:5000"
CGROUP_PREFIX = "eplab-"


class LabRuntime(StrEnum):
    CONTAINERD_22 = "containerd-2.2"  # built from Go modules (the real-node rig's build)
    CONTAINERD_16 = "containerd-1.6"  # Debian bookworm's package: no GetContainerEvents
    CRIO_134 = "crio-1.34"  # built from Go modules; conmon and runc from Debian

    @property
    def is_crio(self) -> bool:
        return self is LabRuntime.CRIO_134


KUBELETS = ("1.36", "1.37")


@dataclass(frozen=True)
class NodeSpec:
    name: str
    index: int  # 1..MAX_NODES: decides the addresses
    kubelet: str  # a key of KUBELETS
    runtime: LabRuntime
    # CRI-O only: an administrator's own drop-in, later in crio.conf.d than ours, forcing pod events off.
    admin_pod_events_off: bool = False

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
        tail = ":admin-pod-events-off" if self.admin_pod_events_off else ""
        return f"{self.name}:{self.kubelet}:{self.runtime.value}{tail}"


DEFAULT_SPEC = ",".join(
    (
        "lab-c22:1.36:containerd-2.2",
        "lab-crio:1.36:crio-1.34",
        "lab-c37:1.37:containerd-2.2",
        "lab-c16:1.36:containerd-1.6",
        "lab-crio-off:1.36:crio-1.34:admin-pod-events-off",
    )
)


class SpecError(ValueError):
    pass


def parse(text: str) -> tuple[NodeSpec, ...]:
    """`NAME:KUBELET:RUNTIME[:admin-pod-events-off]`, comma-separated; indexes follow the order."""
    nodes: list[NodeSpec] = []
    for index, item in enumerate((part.strip() for part in text.split(",") if part.strip()), start=1):
        fields = item.split(":")
        if len(fields) not in (3, 4):
            raise SpecError(f"{item!r}: want NAME:KUBELET:RUNTIME[:admin-pod-events-off]")
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
        if extra not in ("", "admin-pod-events-off") or (extra and not rt.is_crio):
            raise SpecError(f"{item!r}: the only option is admin-pod-events-off, for a CRI-O node")
        nodes.append(NodeSpec(name, index, kubelet, rt, admin_pod_events_off=bool(extra)))
    if not nodes:
        raise SpecError("no nodes")
    if len(nodes) > MAX_NODES:
        raise SpecError(f"at most {MAX_NODES} nodes")
    if len({n.name for n in nodes}) != len(nodes):
        raise SpecError("node names must be unique")
    return tuple(nodes)
