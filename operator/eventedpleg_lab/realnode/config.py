"""The rig's configuration files: containerd (2.2 and Debian's 1.6), the kubelet, static pods.

Why: docs/realnode.md, "How the rig is put together" (what running them here taught us is noted inline).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

import yaml

from eventedpleg_lab.realnode import layout as lay
from eventedpleg_lab.realnode.images import IDLE_IMAGE, PAUSE_IMAGE

CONTAINERD_METRICS = "127.0.0.1:1338"
HEALTHZ_PORT = 10248
READ_ONLY_PORT = 10255
NODE_NAME = "realnode"
IDLE_PREFIX = "idle-"


class RigRuntime(StrEnum):
    CONTAINERD_22 = "containerd-2.2"  # built from Go modules: GetContainerEvents, several subscribers
    CONTAINERD_16 = "containerd-1.6"  # Debian bookworm's package: GetContainerEvents is Unimplemented


def containerd_config(runtime: RigRuntime, layout: lay.Layout) -> str:
    # Separate roots per runtime: 1.6 and 2.2 keep differently versioned metadata.
    root = layout.at(lay.CONTAINERD_ROOT) / runtime.value
    state = layout.at(lay.CONTAINERD_STATE) / runtime.value
    sock, cni = layout.at(lay.CONTAINERD_SOCK), layout.at(lay.CNI_CONF_DIR)
    if runtime is RigRuntime.CONTAINERD_22:
        return f"""\
# Written by eventedpleg realnode (config version 3 = containerd 2.x).
version = 3
root = "{root}"
state = "{state}"

[grpc]
  address = "{sock}"

[metrics]
  address = "{CONTAINERD_METRICS}"   # grpc_server_handled_total per CRI method (benchmark)

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = '{PAUSE_IMAGE}'

[plugins.'io.containerd.cri.v1.runtime']
  # This VM lacks CAP_SYS_RESOURCE: runc cannot lower oom_score_adj to the sandbox's -998 (docs/realnode.md).
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = 'io.containerd.runc.v2'
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
    SystemdCgroup = false
    BinaryName = "/usr/sbin/runc"
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['/usr/lib/cni']
    conf_dir = '{cni}'   # empty: NetworkReady=false, hostNetwork pods still run

# NRI would create /var/run/nri on the machine; the rig needs none of it.
[plugins.'io.containerd.nri.v1.nri']
  disable = true
"""
    return f"""\
# Written by eventedpleg realnode (config version 2 = containerd 1.x).
version = 2
root = "{root}"
state = "{state}"

[grpc]
  address = "{sock}"

[metrics]
  address = "{CONTAINERD_METRICS}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"   # without it: "Runtime.Name must be set" (containerd 1.6)
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "/usr/sbin/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni}"
"""


def kubelet_base(runtime_endpoint: str, *, max_pods: int) -> dict[str, object]:
    """The KubeletConfiguration fields every kubelet on this machine needs, the rig's and the lab nodes'."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "containerRuntimeEndpoint": runtime_endpoint,
        # The runtimes use cgroupfs (containerd: SystemdCgroup = false); kubelet 1.36+ also takes it from
        # containerd 2.x.
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,  # this machine is cgroup v1; the default is true since v1.35
        "failSwapOn": False,
        "oomScoreAdj": 0,  # cannot go below 0 without CAP_SYS_RESOURCE
        "resolvConf": "/etc/resolv.conf",
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        # The disk is this machine's, shared with everything else on it: at its default 85 % the image GC
        # deleted the nodes' local images (pullPolicy Never, no registry to bring them back), and every new
        # pod on the node then failed ErrImageNeverPull. 100 turns the image GC off.
        "imageGCHighThresholdPercent": 100,
        "maxPods": max_pods,
    }


def kubelet_config(layout: lay.Layout, *, gate: bool | None = None) -> str:
    """Standalone KubeletConfiguration (rig notes). `gate` None leaves featureGates out: the agent (or a
    drop-in) decides."""
    doc: dict[str, object] = {
        **kubelet_base(f"unix://{layout.at(lay.CONTAINERD_SOCK)}", max_pods=150),
        "staticPodPath": str(layout.at(lay.STATIC_POD_DIR)),
        "fileCheckFrequency": "5s",
        "podLogsDir": str(layout.at(lay.POD_LOGS)),
        "volumePluginDir": str(layout.at(lay.VOLUME_PLUGINS)),
        "cgroupsPerQOS": True,
        "enforceNodeAllocatable": ["pods"],
        "address": "127.0.0.1",
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": HEALTHZ_PORT,
        "readOnlyPort": READ_ONLY_PORT,  # plain-HTTP /metrics for the agent's RigHost
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
    }
    if gate is not None:
        doc["featureGates"] = {"EventedPLEG": gate}
    return "# Written by eventedpleg realnode.\n" + yaml.safe_dump(doc, sort_keys=True)


def gate_dropin(gate: bool) -> str:
    doc = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "featureGates": {"EventedPLEG": gate},
    }
    return "# Benchmark gate, written by eventedpleg realnode.\n" + yaml.safe_dump(doc, sort_keys=True)


def static_pod(name: str, *, command: tuple[str, ...] = (), labels: Mapping[str, str] | None = None) -> str:
    """An idle hostNetwork pod (no CNI here: the kubelet starts only hostNetwork pods, docs/realnode.md)."""
    container: dict[str, object] = {
        "name": "idle",
        "image": IDLE_IMAGE,
        "imagePullPolicy": "Never",
        "resources": {},
    }
    if command:
        container["command"] = list(command)
    doc = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": dict(labels or {"app": "idle"})},
        "spec": {
            "hostNetwork": True,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 1,
            "containers": [container],
        },
    }
    return yaml.safe_dump(doc, sort_keys=False)


def idle_pod_name(index: int) -> str:
    return f"{IDLE_PREFIX}{index:03d}"
