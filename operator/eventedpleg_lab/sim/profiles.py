# ruff: noqa: E501 - verbatim kubeadm unit drop-in
"""Node layouts the simulated host can take, written as real files under a temp root.

Each profile is a kubeadm-style node: kubelet.service plus its `10-kubeadm.conf` drop-in, kubeadm-flags.env,
/etc/default/kubelet (or /etc/sysconfig/kubelet), /var/lib/kubelet/config.yaml, and the runtime's config
(docs/compatibility.md §3). The kubelet's command line is fixed by the profile and the files are written to agree with
it, so an agent that mis-reads the unit files disagrees with /proc and notices.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

KUBELET_BIN = "/usr/bin/kubelet"
KUBEADM_CONFIG = "/var/lib/kubelet/config.yaml"
KUBEADM_FLAGS = "/var/lib/kubelet/kubeadm-flags.env"
INSTANCE_CONFIG = "/var/lib/kubelet/instance-config.yaml"
STATIC_POD_DIR = "/etc/kubernetes/manifests"
CONFIG_DIR = "/etc/kubernetes/kubelet.conf.d"
KUBECONFIG_ARGS = (
    "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
)

KUBELET_SERVICE = """\
[Unit]
Description=kubelet: The Kubernetes Node Agent
Documentation=https://kubernetes.io/docs/
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
"""

# The kubeadm unit drop-in as pkgs.k8s.io ships it (kubernetes/release cmd/krel/templates/latest/kubeadm/
# 10-kubeadm.conf; kubeadm.spec rewrites /etc/sysconfig/kubelet to /etc/default/kubelet for DEB). With no
# extra_environment it is that file byte for byte.
KUBEADM_DROPIN = """\
# Note: This dropin only works with kubeadm and kubelet v1.11+
[Service]
Environment="KUBELET_KUBECONFIG_ARGS={kubeconfig_args}"
Environment="KUBELET_CONFIG_ARGS=--config={config}"
{extra_environment}# This is a file that "kubeadm init" and "kubeadm join" generates at runtime, populating the KUBELET_KUBEADM_ARGS variable dynamically
EnvironmentFile=-{kubeadm_flags}
# This is a file that the user can use for overrides of the kubelet args as a last resort. Preferably, the user should use
# the .NodeRegistration.KubeletExtraArgs object in the configuration files instead. KUBELET_EXTRA_ARGS should be sourced from this file.
EnvironmentFile=-{extra_args_file}
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
"""

CRIO_CONF = """\
# /etc/crio/crio.conf (lowest precedence; crio.conf.d overrides it)
[crio]
log_dir = "/var/log/crio/pods"

[crio.runtime]
default_runtime = "crun"
conmon_cgroup = "pod"
cgroup_manager = "systemd"

[crio.image]
pause_image = "registry.k8s.io/pause:3.10"
"""

CRIO_DISTRO_DROPIN = """\
# Shipped by the distribution package.
[crio.runtime.runtimes.crun]
runtime_path = "/usr/libexec/crio/crun"
runtime_root = "/run/crun"
"""

CONTAINERD_CONFIG = """\
version = 3
[plugins.'io.containerd.cri.v1.runtime']
  enable_selinux = false
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  SystemdCgroup = true
"""

EVICTION_DROPIN = """\
# Node pool defaults (written by the platform team).
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
evictionHard:
  memory.available: "200Mi"
featureGates:
  GracefulNodeShutdown: true
"""

STATIC_POD = """\
apiVersion: v1
kind: Pod
metadata: {name: kube-scheduler, namespace: kube-system}
spec:
  containers: [{name: kube-scheduler, image: registry.k8s.io/kube-scheduler:v1.33.2}]
"""


@dataclass(frozen=True)
class PlatformLayout:
    """A node laid out by a platform's own bootstrap instead of kubeadm's packages (eventedpleg_lab.sim.
    platforms): its files, the kubelet's command line, and whether systemd runs it as kubelet.service."""

    argv: tuple[str, ...]
    files: Mapping[str, str]
    kubelet_unit: bool = True


@dataclass(frozen=True)
class HostProfile:
    name: str
    kubelet_version: str = "v1.33.2"
    runtime: str = "containerd://2.1.3"
    config_dir: str | None = CONFIG_DIR  # --config-dir, or None for a kubelet started without it
    extra_args_file: str = "/etc/default/kubelet"  # DEB; RPM nodes use /etc/sysconfig/kubelet
    unit_dropin_dir: str = "/usr/lib/systemd/system/kubelet.service.d"  # pkgs.k8s.io location (§3)
    extra_args: tuple[str, ...] = ()  # more KUBELET_EXTRA_ARGS (e.g. a --feature-gates conflict)
    verbosity: int | None = 2  # None: no --v, KUBELET_EXTRA_ARGS as the package ships it (empty)
    # kubeadm >= 1.36 (NodeLocalCRISocket GA): no flags in kubeadm-flags.env; the CRI socket is in
    # /var/lib/kubelet/instance-config.yaml, merged into config.yaml (cmd/kubeadm/app/phases/kubelet/config.go).
    node_local_cri_socket: bool = False
    unit_environment: Mapping[str, str] = field(default_factory=dict)  # Environment= in 10-kubeadm.conf
    config_overrides: Mapping[str, Any] = field(default_factory=dict)  # merged into config.yaml
    static_pods: bool = False
    extra_files: Mapping[str, str] = field(default_factory=dict)  # host path -> text
    # Seconds between container events on the node (only visible as log lines at --v>=4).
    pod_event_period: float = 30.0
    # "k3s": a k3s agent node instead of a kubeadm one (no kubelet.service; the kubelet runs inside k3s).
    distribution: str | None = None
    bootstrap: PlatformLayout | None = None  # a platform's own layout instead of kubeadm's
    os_release: str | None = None  # /etc/os-release, when the profile says which OS it is
    read_only: tuple[str, ...] = ()  # mount points of read-only filesystems (e.g. /usr on Flatcar)

    @property
    def runtime_kind(self) -> str:
        return self.runtime.partition("://")[0]

    @property
    def runtime_endpoint(self) -> str:
        if self.runtime_kind == "cri-o":
            return "unix:///var/run/crio/crio.sock"
        return "unix:///var/run/containerd/containerd.sock"

    def kubeadm_args(self) -> tuple[str, ...]:
        if self.node_local_cri_socket:
            return ()
        return (
            f"--container-runtime-endpoint={self.runtime_endpoint}",
            "--pod-infra-container-image=registry.k8s.io/pause:3.10",
        )

    def user_args(self) -> tuple[str, ...]:
        args: list[str] = []
        if self.config_dir:
            args.append(f"--config-dir={self.config_dir}")
        if self.verbosity is not None:
            args.append(f"--v={self.verbosity}")
        args.extend(self.extra_args)
        return tuple(args)

    def argv(self) -> tuple[str, ...]:
        """What /proc/<pid>/cmdline shows: ExecStart expanded by systemd."""
        if self.distribution == "k3s":
            return (K3S_BIN, "agent")  # the kubelet is a part of this process
        if self.bootstrap is not None:
            return self.bootstrap.argv
        return (
            KUBELET_BIN,
            *KUBECONFIG_ARGS.split(),
            f"--config={KUBEADM_CONFIG}",
            *self.kubeadm_args(),
            *self.user_args(),
        )

    def with_(self, **changes: Any) -> HostProfile:
        return replace(self, **changes)


def kubeadm_containerd() -> HostProfile:
    """kubeadm + containerd 2.1 + kubelet 1.33 started with --config-dir: the supported case."""
    return HostProfile("kubeadm-containerd")


def kubeadm_default() -> HostProfile:
    """A worker joined by kubeadm 1.36 from pkgs.k8s.io DEB packages, nothing customised: no --config-dir,
    no --v, KUBELET_EXTRA_ARGS as the package ships it, kubeadm-flags.env empty, instance-config.yaml."""
    return HostProfile(
        "kubeadm-default",
        kubelet_version="v1.36.4",
        runtime="containerd://2.2.1",
        config_dir=None,
        verbosity=None,
        node_local_cri_socket=True,
        # kubelet.spec (kubernetes/release): dpkg-deb keeps no empty directories, so the package ships these.
        extra_files={"/var/lib/kubelet/.kubelet-keep": "", f"{STATIC_POD_DIR}/.kubelet-keep": ""},
    )


def kubeadm_no_config_dir() -> HostProfile:
    """kubeadm's default: no --config-dir, only /var/lib/kubelet/config.yaml."""
    return HostProfile("kubeadm-no-config-dir", config_dir=None)


def crio() -> HostProfile:
    """CRI-O 1.33 with /etc/crio/crio.conf.d (RPM layout), kubelet 1.33 with --config-dir."""
    return HostProfile("crio", runtime="cri-o://1.33.2", extra_args_file="/etc/sysconfig/kubelet")


def feature_gates_conflict() -> HostProfile:
    """An administrator put --feature-gates=EventedPLEG=false in KUBELET_EXTRA_ARGS (it overrides drop-ins)."""
    return HostProfile("feature-gates-conflict", extra_args=("--feature-gates=EventedPLEG=false",))


def kubelet_125() -> HostProfile:
    """kubelet 1.25: knows neither the EventedPLEG gate nor --config-dir."""
    return HostProfile(
        "kubelet-1.25", kubelet_version="v1.25.16", runtime="containerd://1.7.27", config_dir=None
    )


def kubelet_137() -> HostProfile:
    """kubelet 1.37: the narrowed EventedPLEG (k8s#139262), relisting stays at 1 s."""
    return HostProfile("kubelet-1.37", kubelet_version="v1.37.0")


def kubelet_129() -> HostProfile:
    """kubelet 1.29: --config-dir only with KUBELET_CONFIG_DROPIN_DIR_ALPHA in the environment (KEP-3983)."""
    return HostProfile(
        "kubelet-1.29",
        kubelet_version="v1.29.6",
        unit_environment={"KUBELET_CONFIG_DROPIN_DIR_ALPHA": "on"},
    )


def containerd_16() -> HostProfile:
    """containerd 1.6: GetContainerEvents is Unimplemented, so the kubelet falls back (docs/compatibility.md §2)."""
    return HostProfile("containerd-1.6", runtime="containerd://1.6.39")


def k3s_agent() -> HostProfile:
    """A k3s agent installed by get.k3s.io: `k3s agent` runs the kubelet and containerd in its own process."""
    return HostProfile(
        "k3s-agent",
        kubelet_version="v1.33.2+k3s1",
        runtime="containerd://2.0.5-k3s1",
        config_dir=None,
        distribution="k3s",
    )


def control_plane() -> HostProfile:
    """A kubeadm control-plane node: static pod manifests in /etc/kubernetes/manifests."""
    return HostProfile("control-plane", static_pods=True)


PROFILES = {
    p.name: p
    for p in (
        kubeadm_containerd(),
        kubeadm_no_config_dir(),
        kubeadm_default(),
        crio(),
        feature_gates_conflict(),
        kubelet_125(),
        kubelet_137(),
        kubelet_129(),
        containerd_16(),
        control_plane(),
        k3s_agent(),
    )
}


def _write(root: Path, path: str, text: str) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def _env_line(name: str, value: str) -> str:
    return f'{name}="{value}"\n'


def kubelet_config(profile: HostProfile) -> dict[str, Any]:
    """A kubeadm-generated /var/lib/kubelet/config.yaml (trimmed)."""
    doc: dict[str, Any] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True}},
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "systemd",
        "clusterDNS": ["10.96.0.10"],
        "clusterDomain": "cluster.local",
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "rotateCertificates": True,
        "staticPodPath": STATIC_POD_DIR,
    }
    if profile.node_local_cri_socket:
        doc["containerRuntimeEndpoint"] = profile.runtime_endpoint
    doc.update(profile.config_overrides)
    return doc


KUBELET_UNIT = "/usr/lib/systemd/system/kubelet.service"


def package_files(profile: HostProfile) -> dict[str, str]:
    """What the kubelet and kubeadm packages install for the kubelet: kubelet.service, its 10-kubeadm.conf
    drop-in and the administrator's /etc/default/kubelet (host path -> text). The lab's kubeadm nodes are
    laid out from these too (eventedpleg_lab/lab/nodefiles.py)."""
    extra_env = "".join(f'Environment="{k}={v}"\n' for k, v in profile.unit_environment.items())
    user_args = profile.user_args()
    # With nothing to add, the file is the package's own (kubernetes/release templates/latest/kubelet/kubelet.env).
    extra = _env_line("KUBELET_EXTRA_ARGS", " ".join(user_args)) if user_args else "KUBELET_EXTRA_ARGS=\n"
    return {
        KUBELET_UNIT: KUBELET_SERVICE,
        f"{profile.unit_dropin_dir}/10-kubeadm.conf": KUBEADM_DROPIN.format(
            kubeconfig_args=KUBECONFIG_ARGS,
            config=KUBEADM_CONFIG,
            extra_environment=extra_env,
            kubeadm_flags=KUBEADM_FLAGS,
            extra_args_file=profile.extra_args_file,
        ),
        profile.extra_args_file: extra,
    }


def layout(profile: HostProfile, root: Path) -> None:
    """Write the node's files under `root` (an empty directory)."""
    if profile.os_release is not None:
        _write(root, "/etc/os-release", profile.os_release)
    if profile.distribution == "k3s":
        _layout_k3s(root)
        return
    if profile.bootstrap is not None:
        for path, text in profile.bootstrap.files.items():
            _write(root, path, text)
        return
    for path, text in package_files(profile).items():
        _write(root, path, text)
    _write(root, KUBEADM_FLAGS, _env_line("KUBELET_KUBEADM_ARGS", " ".join(profile.kubeadm_args())))
    if profile.node_local_cri_socket:  # WriteInstanceConfigToDisk: fmt "containerRuntimeEndpoint: %q\n"
        _write(root, INSTANCE_CONFIG, f'containerRuntimeEndpoint: "{profile.runtime_endpoint}"\n')
    _write(root, KUBEADM_CONFIG, yaml.safe_dump(kubelet_config(profile), sort_keys=False))
    (root / STATIC_POD_DIR.lstrip("/")).mkdir(parents=True, exist_ok=True)
    (root / "etc/systemd/system").mkdir(parents=True, exist_ok=True)  # systemd's own, on every host
    if profile.static_pods:
        _write(root, f"{STATIC_POD_DIR}/kube-scheduler.yaml", STATIC_POD)
    if profile.config_dir:
        _write(root, f"{profile.config_dir}/10-eviction.conf", EVICTION_DROPIN)
        # Not *.conf: the kubelet skips it (docs/compatibility.md §3); a good test of the suffix rule.
        _write(
            root, f"{profile.config_dir}/README", "Drop-ins for the kubelet; only *.conf files are read.\n"
        )
    if profile.runtime_kind == "cri-o":
        _write(root, "/etc/crio/crio.conf", CRIO_CONF)
        _write(root, "/etc/crio/crio.conf.d/10-crun.conf", CRIO_DISTRO_DROPIN)
    else:
        _write(root, "/etc/containerd/config.toml", CONTAINERD_CONFIG)
    for path, text in profile.extra_files.items():
        _write(root, path, text)


# k3s's install script (k3s-io/k3s install.sh, create_systemd_service_file) for `INSTALL_K3S_EXEC=agent`:
# SYSTEMD_TYPE=exec, BIN_DIR=/usr/local/bin, FILE_K3S_ENV=/etc/systemd/system/k3s-agent.service.env.
K3S_BIN = "/usr/local/bin/k3s"
K3S_AGENT_SERVICE = """\
[Unit]
Description=Lightweight Kubernetes
Documentation=https://k3s.io
Wants=network-online.target
After=network-online.target

[Install]
WantedBy=multi-user.target

[Service]
Type=exec
EnvironmentFile=-/etc/default/%N
EnvironmentFile=-/etc/sysconfig/%N
EnvironmentFile=-/etc/systemd/system/k3s-agent.service.env
KillMode=process
Delegate=yes
User=root
# Having non-zero Limit*s causes performance problems due to accounting overhead
# in the kernel. We recommend using cgroups to do container-local accounting.
LimitNOFILE=1048576
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity
TimeoutStartSec=0
Restart=always
RestartSec=5s
ExecStartPre=-/sbin/modprobe br_netfilter
ExecStartPre=-/sbin/modprobe overlay
ExecStart=/usr/local/bin/k3s \\
    agent \\

"""
# docs.k3s.io/installation/configuration: /etc/rancher/k3s/config.yaml (written by the user), the kubelet
# defaults k3s writes to /var/lib/rancher/k3s/agent/etc/kubelet.conf.d/00-k3s-defaults.conf.
K3S_CONFIG = """\
node-label:
  - "pool=general"
"""
K3S_KUBELET_DEFAULTS = """\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
clusterDNS:
  - 10.43.0.10
clusterDomain: cluster.local
"""


def _layout_k3s(root: Path) -> None:
    _write(root, K3S_BIN, "#!/bin/sh\n# stands in for the k3s binary\n")
    _write(root, "/etc/systemd/system/k3s-agent.service", K3S_AGENT_SERVICE)
    _write(
        root,
        "/etc/systemd/system/k3s-agent.service.env",
        "K3S_TOKEN=K10example::server:example\nK3S_URL=https://10.0.0.10:6443\n",
    )
    _write(root, "/etc/rancher/k3s/config.yaml", K3S_CONFIG)
    _write(
        root,
        "/var/lib/rancher/k3s/agent/etc/kubelet.conf.d/00-k3s-defaults.conf",
        K3S_KUBELET_DEFAULTS,
    )
