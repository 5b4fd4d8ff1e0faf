"""Fake Nodes that kwok keeps alive: created with the nodeInfo, labels, taints and capacity a test chooses.

kwok manages a Node when it carries the annotation kwok.x-k8s.io/node=fake (we start kwok with
--manage-nodes-with-annotation-selector). Its node-initialize stage writes status with
`or .status.nodeInfo.<field> <kwok default>`, so the nodeInfo we create the Node with is kept, and the Node
strategy does not clear status on create (the kubelet registers its Node the same way).
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from kubernetes import client
from kubernetes.client import ApiException

from eventedpleg import constants as c

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_TAINT = {"key": KWOK_ANNOTATION, "value": "fake", "effect": "NoSchedule"}
KWOK_TOLERATION = {"key": KWOK_ANNOTATION, "operator": "Exists", "effect": "NoSchedule"}
CONTROL_PLANE_TAINT = {"key": c.LABEL_CONTROL_PLANE, "effect": "NoSchedule"}


@dataclass(frozen=True)
class FakeNode:
    """One fake node. Defaults look like a kubeadm worker on Ubuntu with containerd 2."""

    name: str
    kubelet_version: str = "v1.33.4"
    container_runtime_version: str = "containerd://2.1.4"
    os_image: str = "Ubuntu 24.04.2 LTS"
    operating_system: str = "linux"
    architecture: str = "amd64"
    kernel_version: str = "6.8.0-60-generic"
    control_plane: bool = False  # adds node-role.kubernetes.io/control-plane label and its NoSchedule taint
    zone: str | None = "zone-a"  # topology.kubernetes.io/zone; None leaves it out
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[
        Mapping[str, str]
    ] = ()  # extra taints, e.g. {"key": "k", "value": "v", "effect": "NoSchedule"}
    kwok_taint: bool = True  # kwok's convention: keep pods that do not tolerate fake nodes off them
    unschedulable: bool = False
    internal_ip: str | None = None  # status.addresses InternalIP; None derives a stable one from the name
    cpu: str = "32"
    memory: str = "256Gi"
    pods: str = "110"

    def manifest(self) -> dict[str, Any]:
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": self.operating_system,
            "kubernetes.io/arch": self.architecture,
            "type": "kwok",
        }
        if self.zone is not None:
            labels[c.LABEL_ZONE] = self.zone
        if self.control_plane:
            labels[c.LABEL_CONTROL_PLANE] = ""
        labels.update(self.labels)
        taints = [dict(t) for t in self.taints]
        if self.control_plane:
            taints.append(dict(CONTROL_PLANE_TAINT))
        if self.kwok_taint:
            taints.append(dict(KWOK_TAINT))
        ip = self.internal_ip or _ip_for(self.name)
        resources = {"cpu": self.cpu, "memory": self.memory, "pods": self.pods, "ephemeral-storage": "100Gi"}
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": labels,
                "annotations": {
                    KWOK_ANNOTATION: "fake",
                    "node.alpha.kubernetes.io/ttl": "0",
                    **self.annotations,
                },
            },
            "spec": {"taints": taints, "unschedulable": self.unschedulable},
            "status": {
                # kwok's node-initialize keeps addresses already set; without, every node gets one node IP.
                "addresses": [
                    {"type": "InternalIP", "address": ip},
                    {"type": "Hostname", "address": self.name},
                ],
                "capacity": resources,
                "allocatable": resources,
                "nodeInfo": {
                    "architecture": self.architecture,
                    "containerRuntimeVersion": self.container_runtime_version,
                    "kernelVersion": self.kernel_version,
                    "kubeletVersion": self.kubelet_version,
                    "kubeProxyVersion": self.kubelet_version,
                    "operatingSystem": self.operating_system,
                    "osImage": self.os_image,
                    "bootID": "",
                    "machineID": "",
                    "systemUUID": "",
                },
            },
        }


def _ip_for(name: str) -> str:
    digest = zlib.crc32(name.encode())
    return f"10.{64 + (digest >> 16) % 64}.{(digest >> 8) % 256}.{1 + digest % 254}"


def create_nodes(api: client.ApiClient, nodes: Iterable[FakeNode]) -> list[str]:
    core = client.CoreV1Api(api)
    names = []
    for node in nodes:
        manifest = node.manifest()
        # The client serialises a plain dict as-is; a manifest is easier to read than V1Node(...) here.
        core.create_node(cast(client.V1Node, manifest))
        # Belt and braces: the Node strategy keeps status on create today; if a future release drops it,
        # write it through the status subresource before kwok's node-initialize stage runs.
        got = core.read_node(node.name)
        info = got.status.node_info if got.status else None
        if info is None or info.kubelet_version != node.kubelet_version:
            core.patch_node_status(node.name, {"status": manifest["status"]})
        names.append(node.name)
    return names


def node_ready(node: Any) -> bool:
    for cond in (node.status.conditions or []) if node.status else []:
        if cond.type == "Ready":
            return bool(cond.status == "True")
    return False


# The node lifecycle controller taints a node it has not yet seen Ready (a new one included) and lifts the
# taints on a later pass of its own: under load, seconds after the Ready condition.
LIFECYCLE_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


def settled(node: Any) -> bool:
    """Ready, and the node lifecycle controller has seen it so (none of its LIFECYCLE_TAINTS left): what
    the scheduler, the taint manager and our planner see from then on is the node as created."""
    taints = (node.spec.taints or []) if node.spec else []
    return node_ready(node) and not any(t.key in LIFECYCLE_TAINTS for t in taints)


def wait_nodes_ready(api: client.ApiClient, names: Iterable[str], *, timeout: float = 60.0) -> None:
    """Wait until every node is `settled`."""
    core = client.CoreV1Api(api)
    pending = set(names)
    deadline = time.monotonic() + timeout
    while pending:
        for name in sorted(pending):
            if settled(core.read_node(name)):
                pending.discard(name)
        if not pending:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"nodes not Ready, or still tainted by the node lifecycle controller, after {timeout:.0f}s: "
                + ", ".join(sorted(pending))
            )
        time.sleep(0.2)


def delete_nodes(api: client.ApiClient, names: Iterable[str]) -> None:
    core = client.CoreV1Api(api)
    for name in names:
        try:
            core.delete_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise
