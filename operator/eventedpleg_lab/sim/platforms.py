# ruff: noqa: E501 - verbatim unit files
"""The nodes of the platforms users ask about, as simulated hosts (docs/platforms.md).

Each is laid out as that platform's own bootstrap lays it out, trimmed to what the agent reads: the kubelet's
unit and environment files, its --config, its drop-in directory, /etc/os-release and the filesystems that are
read-only there. The source of each layout is named beside it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from eventedpleg_lab.sim.profiles import (
    CONTAINERD_CONFIG,
    CRIO_CONF,
    CRIO_DISTRO_DROPIN,
    HostProfile,
    PlatformLayout,
    k3s_agent,
    kubeadm_default,
)

CONTAINERD = "containerd://2.1.4"
CONTAINERD_ENDPOINT = "unix:///run/containerd/containerd.sock"


def _os_release(os_id: str, name: str, version: str) -> str:
    return f'NAME="{name}"\nID={os_id}\nVERSION_ID="{version}"\nPRETTY_NAME="{name} {version}"\n'


def _json(doc: Mapping[str, object]) -> str:
    return json.dumps(doc, indent=4) + "\n"


KUBELET_CONFIG: dict[str, object] = {
    "apiVersion": "kubelet.config.k8s.io/v1beta1",
    "kind": "KubeletConfiguration",
    "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True}},
    "authorization": {"mode": "Webhook"},
    "cgroupDriver": "systemd",
    "clusterDomain": "cluster.local",
}


def kubeadm() -> HostProfile:
    """A worker joined by kubeadm 1.36 from pkgs.k8s.io packages, nothing customised."""
    return kubeadm_default()


# awslabs/amazon-eks-ami templates/al2023/runtime/rootfs/etc/systemd/system/kubelet.service; nodeadm writes
# /etc/eks/kubelet/environment (NODEADM_KUBELET_ARGS) and /etc/kubernetes/kubelet/config.json, and with
# spec.kubelet.config also config.json.d/00-nodeadm.conf, --config-dir and KUBELET_CONFIG_DROPIN_DIR_ALPHA
# (nodeadm/internal/kubelet/config.go, writeKubeletConfigToDir).
EKS_UNIT = """\
[Unit]
Description=Kubernetes Kubelet
Documentation=https://github.com/kubernetes/kubernetes
After=containerd.service
Requires=containerd.service

[Service]
Slice=runtime.slice
EnvironmentFile=/etc/eks/kubelet/environment
ExecStartPre=/sbin/iptables -P FORWARD ACCEPT -w 5
ExecStart=/usr/bin/kubelet \\
    --config /etc/kubernetes/kubelet/config.json \\
    --kubeconfig /var/lib/kubelet/kubeconfig \\
    --container-runtime-endpoint unix:///run/containerd/containerd.sock \\
    $NODEADM_KUBELET_ARGS\\
    $KUBELET_EXTRA_ARGS

Restart=on-failure
RestartForceExitStatus=SIGPIPE
RestartSec=5
KillMode=process
CPUAccounting=true
MemoryAccounting=true

[Install]
WantedBy=multi-user.target
"""
EKS_CONFIG_DIR = "/etc/kubernetes/kubelet/config.json.d"
EKS_NODEADM_ARGS = (
    "--node-ip=10.0.1.23",
    "--cloud-provider=external",
    "--hostname-override=ip-10-0-1-23.ec2.internal",
    "--node-labels=eks.amazonaws.com/nodegroup=general",
)


def eks_al2023(*, kubelet_config: bool = False) -> HostProfile:
    """An EKS node on Amazon Linux 2023 joined by nodeadm; `kubelet_config`: its NodeConfig sets
    spec.kubelet.config, so nodeadm passes --config-dir."""
    args = EKS_NODEADM_ARGS + ((f"--config-dir={EKS_CONFIG_DIR}",) if kubelet_config else ())
    env = f'NODEADM_KUBELET_ARGS="{" ".join(args)}"\n'
    files = {
        "/etc/systemd/system/kubelet.service": EKS_UNIT,
        "/etc/kubernetes/kubelet/config.json": _json(
            {**KUBELET_CONFIG, "containerRuntimeEndpoint": CONTAINERD_ENDPOINT}
        ),
        "/etc/containerd/config.toml": CONTAINERD_CONFIG,
    }
    if kubelet_config:
        env += "KUBELET_CONFIG_DROPIN_DIR_ALPHA=on\n"
        files[f"{EKS_CONFIG_DIR}/00-nodeadm.conf"] = _json(
            {"apiVersion": KUBELET_CONFIG["apiVersion"], "kind": "KubeletConfiguration", "maxPods": 58}
        )
    files["/etc/eks/kubelet/environment"] = env
    argv = (
        "/usr/bin/kubelet",
        "--config",
        "/etc/kubernetes/kubelet/config.json",
        "--kubeconfig",
        "/var/lib/kubelet/kubeconfig",
        "--container-runtime-endpoint",
        CONTAINERD_ENDPOINT,
        *args,
    )
    return HostProfile(
        "eks-al2023-nodeadm" + ("-kubelet-config" if kubelet_config else ""),
        kubelet_version="v1.34.2-eks-b3126f4",
        runtime=CONTAINERD,
        config_dir=None,
        bootstrap=PlatformLayout(argv, files),
        os_release=_os_release("amzn", "Amazon Linux", "2023"),
    )


# bottlerocket-os/bottlerocket packages/kubernetes/kubelet.service (EnvironmentFile=/etc/kubernetes/kubelet/env,
# --config /etc/kubernetes/kubelet/config, both rendered from settings); the root filesystem is read-only.
BOTTLEROCKET_UNIT = """\
[Unit]
Description=Kubelet
After=containerd.service configured.target
Wants=configured.target
BindsTo=containerd.service

[Service]
Type=notify
EnvironmentFile=/etc/kubernetes/kubelet/env
ExecStart=/usr/bin/kubelet \\
    --cloud-provider external \\
    --config /etc/kubernetes/kubelet/config \\
    --kubeconfig /etc/kubernetes/kubelet/kubeconfig \\
    --container-runtime-endpoint=unix:///run/dockershim.sock \\
    --root-dir /var/lib/kubelet \\
    --cert-dir /var/lib/kubelet/pki \\
    --node-ip ${NODE_IP} \\
    --node-labels "${NODE_LABELS}"
Restart=on-failure
Delegate=yes
KillMode=process

[Install]
WantedBy=multi-user.target
"""


def bottlerocket() -> HostProfile:
    """An EKS node on Bottlerocket (aws-k8s variant)."""
    argv = (
        "/usr/bin/kubelet",
        "--cloud-provider",
        "external",
        "--config",
        "/etc/kubernetes/kubelet/config",
        "--kubeconfig",
        "/etc/kubernetes/kubelet/kubeconfig",
        "--container-runtime-endpoint=unix:///run/dockershim.sock",
        "--root-dir",
        "/var/lib/kubelet",
        "--cert-dir",
        "/var/lib/kubelet/pki",
        "--node-ip",
        "10.0.1.24",
        "--node-labels",
        "",
    )
    files = {
        "/usr/lib/systemd/system/kubelet.service": BOTTLEROCKET_UNIT,
        "/etc/kubernetes/kubelet/env": 'NODE_IP=10.0.1.24\nNODE_LABELS=""\n',
        "/etc/kubernetes/kubelet/config": _json(KUBELET_CONFIG),
    }
    return HostProfile(
        "bottlerocket",
        kubelet_version="v1.34.2-eks-b3126f4",
        runtime=CONTAINERD,
        config_dir=None,
        bootstrap=PlatformLayout(argv, files),
        os_release=_os_release("bottlerocket", "Bottlerocket", "1.50.0"),
        read_only=("/usr",),
    )


# kubernetes cluster/gce/gci/configure-helper.sh (start-kubelet): the unit in /etc/systemd/system runs
# /home/kubernetes/bin/kubelet $KUBELET_OPTS from /etc/default/kubelet; configure.sh keeps kube-env in
# /home/kubernetes; --config is /home/kubernetes/kubelet-config.yaml.
GKE_UNIT = """\
[Unit]
Description=Kubernetes kubelet
Requires=network-online.target
After=network-online.target

[Service]
Restart=always
RestartSec=10
EnvironmentFile=/etc/default/kubelet
ExecStart=/home/kubernetes/bin/kubelet $KUBELET_OPTS

[Install]
WantedBy=multi-user.target
"""
GKE_FLAGS = (
    "--v=2",
    "--cloud-provider=external",
    "--cert-dir=/var/lib/kubelet/pki/",
    "--kubeconfig=/var/lib/kubelet/kubeconfig",
    f"--container-runtime-endpoint={CONTAINERD_ENDPOINT}",
    "--config=/home/kubernetes/kubelet-config.yaml",
)


def gke(os_id: str) -> HostProfile:
    """A GKE node on Container-Optimized OS (`cos`: /usr read-only) or Ubuntu (`ubuntu`)."""
    files = {
        "/etc/systemd/system/kubelet.service": GKE_UNIT,
        "/etc/default/kubelet": f'KUBELET_OPTS="{" ".join(GKE_FLAGS)}"\n',
        "/home/kubernetes/kubelet-config.yaml": _json(KUBELET_CONFIG),
        "/home/kubernetes/kube-env": "CLUSTER_NAME: 'prod'\nKUBELET_ARGS: '--v=2 --cloud-provider=external'\n",
        "/etc/containerd/config.toml": CONTAINERD_CONFIG,
    }
    cos = os_id == "cos"
    return HostProfile(
        f"gke-{os_id}",
        kubelet_version="v1.34.1-gke.1829001",
        runtime=CONTAINERD,
        config_dir=None,
        bootstrap=PlatformLayout(("/home/kubernetes/bin/kubelet", *GKE_FLAGS), files),
        os_release=(
            _os_release("cos", "Container-Optimized OS", "121")
            if cos
            else _os_release("ubuntu", "Ubuntu", "24.04")
        ),
        read_only=("/usr",) if cos else (),
    )


# Azure/AgentBaker parts/linux/cloud-init/artifacts/kubelet.service: /usr/local/bin/kubelet with
# EnvironmentFile=/etc/default/kubelet (KUBELET_FLAGS, KUBELET_CONFIG_FILE_FLAGS=--config
# /etc/default/kubeletconfig.json), ExecStartPre /opt/azure/containers/kubelet.sh.
AKS_UNIT = """\
[Unit]
Description=Kubelet
ConditionPathExists=/usr/local/bin/kubelet
Wants=network-online.target containerd.service
After=network-online.target containerd.service

[Service]
Restart=always
RestartSec=2
EnvironmentFile=/etc/default/kubelet
SuccessExitStatus=143
ExecStartPre=/bin/bash /opt/azure/containers/kubelet.sh
ExecStart=/usr/local/bin/kubelet \\
        --enable-server \\
        --node-labels="${KUBELET_NODE_LABELS}" \\
        --v=2 \\
        --volume-plugin-dir=/etc/kubernetes/volumeplugins \\
        $KUBELET_TLS_BOOTSTRAP_FLAGS \\
        $KUBELET_CONFIG_FILE_FLAGS \\
        $KUBELET_CONTAINERD_FLAGS \\
        $KUBELET_CONTAINER_RUNTIME_FLAG \\
        $KUBELET_CGROUP_FLAGS \\
        $KUBELET_FLAGS

[Install]
WantedBy=multi-user.target
"""
AKS_ENV = """\
KUBELET_FLAGS=--cloud-provider=external --pod-infra-container-image=mcr.microsoft.com/oss/kubernetes/pause:3.6
KUBELET_REGISTER_SCHEDULABLE=true
KUBELET_NODE_LABELS=kubernetes.azure.com/agentpool=nodepool1,kubernetes.azure.com/mode=system
KUBELET_TLS_BOOTSTRAP_FLAGS=--kubeconfig /var/lib/kubelet/kubeconfig --bootstrap-kubeconfig /var/lib/kubelet/bootstrap-kubeconfig
KUBELET_CONFIG_FILE_FLAGS=--config /etc/default/kubeletconfig.json
KUBELET_CONTAINERD_FLAGS=--runtime-request-timeout=15m --container-runtime-endpoint=unix:///run/containerd/containerd.sock
"""


def aks(os_id: str) -> HostProfile:
    """An AKS node on Ubuntu (`ubuntu`) or Azure Linux (`azurelinux`)."""
    argv = (
        "/usr/local/bin/kubelet",
        "--enable-server",
        "--node-labels=kubernetes.azure.com/agentpool=nodepool1,kubernetes.azure.com/mode=system",
        "--v=2",
        "--volume-plugin-dir=/etc/kubernetes/volumeplugins",
        "--kubeconfig",
        "/var/lib/kubelet/kubeconfig",
        "--bootstrap-kubeconfig",
        "/var/lib/kubelet/bootstrap-kubeconfig",
        "--config",
        "/etc/default/kubeletconfig.json",
        "--runtime-request-timeout=15m",
        f"--container-runtime-endpoint={CONTAINERD_ENDPOINT}",
        "--cloud-provider=external",
        "--pod-infra-container-image=mcr.microsoft.com/oss/kubernetes/pause:3.6",
    )
    files = {
        "/etc/systemd/system/kubelet.service": AKS_UNIT,
        "/etc/default/kubelet": AKS_ENV,
        "/etc/default/kubeletconfig.json": _json(KUBELET_CONFIG),
        "/opt/azure/containers/kubelet.sh": "#!/bin/bash\n",
        "/etc/containerd/config.toml": CONTAINERD_CONFIG,
    }
    names = {"ubuntu": ("Ubuntu", "22.04"), "azurelinux": ("Microsoft Azure Linux", "3.0")}
    return HostProfile(
        f"aks-{os_id}",
        kubelet_version="v1.34.1",
        runtime=CONTAINERD,
        config_dir=None,
        bootstrap=PlatformLayout(argv, files),
        os_release=_os_release(os_id, *names[os_id]),
    )


def k3s() -> HostProfile:
    return k3s_agent()


# docs.rke2.io/install/methods (rke2-agent.service in /usr/local/lib/systemd/system, tarball install) and
# /install/configuration (/etc/rancher/rke2/config.yaml; kubelet defaults in
# /var/lib/rancher/rke2/agent/etc/kubelet.conf.d): rke2 starts the kubelet itself, no kubelet.service.
RKE2_SERVICE = """\
[Unit]
Description=Rancher Kubernetes Engine v2 (agent)
Documentation=https://github.com/rancher/rke2#readme
Wants=network-online.target
After=network-online.target

[Service]
Type=notify
EnvironmentFile=-/etc/default/%N
EnvironmentFile=-/etc/sysconfig/%N
EnvironmentFile=-/usr/local/lib/systemd/system/%N.env
KillMode=process
Delegate=yes
Restart=always
RestartSec=5s
ExecStart=/usr/local/bin/rke2 agent

[Install]
WantedBy=multi-user.target
"""


def rke2() -> HostProfile:
    files = {
        "/usr/local/bin/rke2": "#!/bin/sh\n# stands in for the rke2 binary\n",
        "/usr/local/lib/systemd/system/rke2-agent.service": RKE2_SERVICE,
        "/etc/rancher/rke2/config.yaml": "server: https://10.0.0.10:9345\ntoken: example\n",
        "/var/lib/rancher/rke2/agent/etc/kubelet.conf.d/00-rke2-defaults.conf": _json(KUBELET_CONFIG),
    }
    argv = (
        "/var/lib/rancher/rke2/bin/kubelet",
        "--config-dir=/var/lib/rancher/rke2/agent/etc/kubelet.conf.d",
    )
    return HostProfile(
        "rke2-agent",
        kubelet_version="v1.34.2+rke2r1",
        runtime="containerd://2.1.4-k3s1",
        config_dir=None,
        bootstrap=PlatformLayout(argv, files, kubelet_unit=False),
    )


def talos() -> HostProfile:
    """A Talos worker: machined runs the kubelet in a container from the machine config (no systemd)."""
    files = {"/etc/kubernetes/kubelet.yaml": _json(KUBELET_CONFIG)}
    argv = ("/usr/local/bin/kubelet", "--config=/etc/kubernetes/kubelet.yaml")
    return HostProfile(
        "talos",
        kubelet_version="v1.34.1",
        runtime="containerd://2.1.4",
        config_dir=None,
        bootstrap=PlatformLayout(argv, files, kubelet_unit=False),
        os_release=_os_release("talos", "Talos", "v1.11.5"),
        read_only=("/usr", "/etc"),
    )


# openshift/machine-config-operator templates/*/01-*-kubelet/_base/units/kubelet.service.yaml: the kubelet
# unit MCO renders (CRI-O, --config=/etc/kubernetes/kubelet.conf, drop-ins in /etc/openshift/kubelet.conf.d).
OPENSHIFT_UNIT = """\
[Unit]
Description=Kubernetes Kubelet
Wants=rpc-statd.service network-online.target
Requires=crio.service kubelet-dependencies.target
After=kubelet-dependencies.target network-online.target

[Service]
Type=notify
EnvironmentFile=/etc/os-release
EnvironmentFile=-/etc/kubernetes/kubelet-workaround
EnvironmentFile=-/etc/kubernetes/kubelet-env
ExecStart=/usr/bin/kubelet \\
    --config=/etc/kubernetes/kubelet.conf \\
    --config-dir=/etc/openshift/kubelet.conf.d \\
    --bootstrap-kubeconfig=/etc/kubernetes/kubeconfig \\
    --kubeconfig=/var/lib/kubelet/kubeconfig \\
    --container-runtime-endpoint=/var/run/crio/crio.sock \\
    --runtime-cgroups=/system.slice/crio.service \\
    --node-labels=node-role.kubernetes.io/worker,node.openshift.io/os_id=${ID}
Restart=always
RestartSec=10

[Install]
WantedBy=multi-user.target
"""


def openshift() -> HostProfile:
    """An OpenShift worker on RHCOS (/usr read-only, ostree), its kubelet and CRI-O configured by MCO."""
    argv = (
        "/usr/bin/kubelet",
        "--config=/etc/kubernetes/kubelet.conf",
        "--config-dir=/etc/openshift/kubelet.conf.d",
        "--bootstrap-kubeconfig=/etc/kubernetes/kubeconfig",
        "--kubeconfig=/var/lib/kubelet/kubeconfig",
        "--container-runtime-endpoint=/var/run/crio/crio.sock",
        "--runtime-cgroups=/system.slice/crio.service",
        "--node-labels=node-role.kubernetes.io/worker,node.openshift.io/os_id=rhcos",
    )
    files = {
        "/etc/systemd/system/kubelet.service": OPENSHIFT_UNIT,
        "/etc/kubernetes/kubelet.conf": _json(KUBELET_CONFIG),
        "/etc/openshift/kubelet.conf.d/20-auto-sizing.conf": _json(
            {
                "apiVersion": KUBELET_CONFIG["apiVersion"],
                "kind": "KubeletConfiguration",
                "systemReserved": {"cpu": "500m"},
            }
        ),
        "/etc/crio/crio.conf": CRIO_CONF,
        "/etc/crio/crio.conf.d/10-crun.conf": CRIO_DISTRO_DROPIN,
    }
    return HostProfile(
        "openshift",
        kubelet_version="v1.34.2",
        runtime="cri-o://1.35.1",
        config_dir=None,
        bootstrap=PlatformLayout(argv, files),
        os_release=_os_release("rhcos", "Red Hat Enterprise Linux CoreOS", "9.6"),
        read_only=("/usr",),
    )


def flatcar() -> HostProfile:
    """Flatcar with the Kubernetes sysext (flatcar/sysext-bakery): kubeadm's kubelet.service and
    10-kubeadm.conf merged into the read-only /usr; /etc writable."""
    return kubeadm_default().with_(
        name="flatcar-kubeadm",
        os_release=_os_release("flatcar", "Flatcar Container Linux by Kinvolk", "4230.2.3"),
        read_only=("/usr",),
    )
