"""Where the rig keeps everything: one directory, `<cache>/realnode`, outside the repo.

`host/` plays the node's `/`: the kubelet, containerd and their state live under it, at the paths a
kubeadm node would use (`host/etc/kubernetes/kubelet.yaml`, `host/var/lib/kubelet`, ...). The daemons are
given the real absolute paths; the agent is given `host/` as its Host root. So that the absolute paths the
agent reads from /proc and from the kubelet's config also resolve under that root, `host/` contains a
symlink from its own absolute path back to itself (`host/root/.cache/.../host -> ../../../..`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from eventedpleg_lab.localcluster import build

ENV_REALNODE_DIR = "EVENTEDPLEG_REALNODE_DIR"

# Node paths (as the node sees them, relative to host/).
KUBELET_CONFIG = "/etc/kubernetes/kubelet.yaml"
KUBELET_CONFIG_DIR = "/etc/kubernetes/kubelet.conf.d"
STATIC_POD_DIR = "/etc/kubernetes/manifests"
KUBELET_ROOT = "/var/lib/kubelet"
POD_LOGS = "/var/log/pods"
VOLUME_PLUGINS = "/usr/libexec/kubernetes/kubelet-plugins/volume/exec"
KUBELET_LOG = "/var/log/kubelet.log"
CONTAINERD_LOG = "/var/log/containerd.log"
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
CONTAINERD_ROOT = "/var/lib/containerd"
CONTAINERD_STATE = "/run/containerd"
CONTAINERD_SOCK = "/run/containerd/containerd.sock"
CNI_CONF_DIR = "/etc/cni/net.d"
# The rig's own gate drop-in (benchmark runs); the agent writes 99-eventedpleg.conf next to it.
BENCH_DROPIN = "50-realnode-gate.conf"


@dataclass(frozen=True)
class Layout:
    base: Path

    @classmethod
    def default(cls) -> Layout:
        configured = os.environ.get(ENV_REALNODE_DIR)
        return cls(Path(configured).expanduser() if configured else build.cache_dir() / "realnode")

    @property
    def host(self) -> Path:
        return self.base / "host"

    def at(self, node_path: str) -> Path:
        """The real path of a node path."""
        return self.host / node_path.lstrip("/")

    @property
    def images(self) -> Path:
        return self.base / "images"

    @property
    def run_dir(self) -> Path:
        """PID records of the supervised daemons and the rig's state."""
        return self.base / "run"

    @property
    def state_file(self) -> Path:
        return self.run_dir / "rig.json"

    def prepare(self) -> None:
        for node_dir in (
            KUBELET_CONFIG_DIR,
            STATIC_POD_DIR,
            KUBELET_ROOT,
            POD_LOGS,
            VOLUME_PLUGINS,
            "/var/log",
            "/etc/containerd",
            CONTAINERD_ROOT,
            CONTAINERD_STATE,
            CNI_CONF_DIR,
        ):
            self.at(node_dir).mkdir(parents=True, exist_ok=True)
        self.images.mkdir(parents=True, exist_ok=True)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.host_alias()

    def host_alias(self) -> None:
        """host/<absolute path of host> -> host (see the module docstring), as a relative link: the agent
        resolves an absolute link from its host root (agent.hostfiles), where this one would loop."""
        host = self.host.resolve()
        alias = host / str(host).lstrip("/")
        target = os.path.relpath(host, alias.parent)
        if alias.is_symlink() and str(alias.readlink()) == target:
            return
        if alias.is_symlink():
            alias.unlink()
        alias.parent.mkdir(parents=True, exist_ok=True)
        alias.symlink_to(target, target_is_directory=True)
