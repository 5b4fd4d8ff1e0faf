# ruff: noqa: E501 - links to upstream sources
"""docs/platforms.md's table, generated from PLATFORMS: one row per platform users ask about, each with the
simulated host of its layout (eventedpleg_lab.sim.platforms) and the verdict the agent's host check reaches
there, per kubeletConfig mode. tests/agent/test_platforms.py runs the real host check on each layout and
asserts these verdicts, so the page says what the agent does.

    python -m eventedpleg_lab.platformdocs            # rewrite the table in docs/platforms.md
    python -m eventedpleg_lab.platformdocs --check    # exit 1 when docs/platforms.md is out of date
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from eventedpleg.core.node.facts import embedded, platform
from eventedpleg_lab.sim import platforms as sim
from eventedpleg_lab.sim.profiles import HostProfile

PAGE = Path(__file__).resolve().parents[2] / "docs" / "platforms.md"
WORKS = ""  # a verdict: the agent goes ahead
_ADD_CONFIG_DIR = (
    "add --config-dir=/etc/kubernetes/kubelet.conf.d to KUBELET_FLAGS in /etc/default/kubelet, create that "
    "directory and restart the kubelet, or set spec.kubeletConfig: EditConfigFile to let the agent edit "
    "/etc/default/kubeletconfig.json (backed up, restored)"
)


@dataclass(frozen=True)
class PlatformRow:
    platform: str
    node: str  # the OS image and how the node joins
    profile: Callable[[], HostProfile]
    drop_in_only: str  # the fix the Skipped reason gives, or WORKS
    edit_config_file: str  # the same with spec.kubeletConfig: EditConfigFile
    why: str
    source: str

    def verdict(self, mode: str) -> str:
        return self.drop_in_only if mode == "DropInOnly" else self.edit_config_file


PLATFORMS: tuple[PlatformRow, ...] = (
    PlatformRow(
        "kubeadm",
        "any systemd distribution, pkgs.k8s.io packages, `kubeadm join`",
        sim.kubeadm,
        WORKS,
        WORKS,
        "kubeadm's 10-kubeadm.conf passes KUBELET_CONFIG_ARGS: the agent adds --config-dir there with a "
        "kubelet.service drop-in in /etc and writes its kubelet drop-in in /etc/kubernetes/kubelet.conf.d",
        "[10-kubeadm.conf](https://github.com/kubernetes/release/blob/master/cmd/krel/templates/latest/kubeadm/10-kubeadm.conf)",
    ),
    PlatformRow(
        "EKS",
        "Amazon Linux 2023, nodeadm, NodeConfig with `spec.kubelet.config`",
        lambda: sim.eks_al2023(kubelet_config=True),
        WORKS,
        WORKS,
        "nodeadm starts the kubelet with --config-dir=/etc/kubernetes/kubelet/config.json.d and writes only "
        "00-nodeadm.conf there: the agent's 99-eventedpleg.conf sorts after it",
        "[nodeadm config.go](https://github.com/awslabs/amazon-eks-ami/blob/main/nodeadm/internal/kubelet/config.go), "
        "[kubelet.service](https://github.com/awslabs/amazon-eks-ami/blob/main/templates/al2023/runtime/rootfs/etc/systemd/system/kubelet.service)",
    ),
    PlatformRow(
        "EKS",
        "Amazon Linux 2023, nodeadm, NodeConfig without `spec.kubelet.config`",
        sim.eks_al2023,
        platform.EKS_NODEADM.fix
        + ", or set spec.kubeletConfig: EditConfigFile to let the agent edit /etc/kubernetes/kubelet/config.json "
        "(backed up, restored)",
        WORKS,
        "nodeadm passes no --config-dir then; nodeadm writes config.json itself, so prefer giving it a "
        "`spec.kubelet.config` over EditConfigFile",
        "[nodeadm config.go](https://github.com/awslabs/amazon-eks-ami/blob/main/nodeadm/internal/kubelet/config.go) "
        "(writeKubeletConfigToDir)",
    ),
    PlatformRow(
        "EKS",
        "Bottlerocket",
        sim.bottlerocket,
        platform.BOTTLEROCKET.fix,
        platform.BOTTLEROCKET.fix,
        platform.BOTTLEROCKET.owns_kubelet,
        "[kubelet.service](https://github.com/bottlerocket-os/bottlerocket/blob/develop/packages/kubernetes/kubelet.service), "
        "[kubelet-config](https://github.com/bottlerocket-os/bottlerocket/blob/develop/packages/kubernetes/kubelet-config)",
    ),
    PlatformRow(
        "GKE",
        "Container-Optimized OS (containerd)",
        lambda: sim.gke("cos"),
        platform.GKE.fix,
        platform.GKE.fix,
        platform.GKE.owns_kubelet + "; /usr is read-only",
        "[configure-helper.sh](https://github.com/kubernetes/kubernetes/blob/master/cluster/gce/gci/configure-helper.sh) "
        "(start-kubelet), [node system config](https://cloud.google.com/kubernetes-engine/docs/how-to/node-system-config)",
    ),
    PlatformRow(
        "GKE",
        "Ubuntu (containerd)",
        lambda: sim.gke("ubuntu"),
        platform.GKE.fix,
        platform.GKE.fix,
        platform.GKE.owns_kubelet,
        "[configure-helper.sh](https://github.com/kubernetes/kubernetes/blob/master/cluster/gce/gci/configure-helper.sh) "
        "(start-kubelet)",
    ),
    PlatformRow(
        "AKS",
        "Ubuntu",
        lambda: sim.aks("ubuntu"),
        _ADD_CONFIG_DIR,
        WORKS,
        "AgentBaker's kubelet.service has --config /etc/default/kubeletconfig.json and no --config-dir; "
        "with EditConfigFile the agent sets the gate in that file (a reimaged node is rolled out again)",
        "[kubelet.service](https://github.com/Azure/AgentBaker/blob/master/parts/linux/cloud-init/artifacts/kubelet.service)",
    ),
    PlatformRow(
        "AKS",
        "Azure Linux",
        lambda: sim.aks("azurelinux"),
        _ADD_CONFIG_DIR,
        WORKS,
        "the same kubelet.service and /etc/default/kubelet as on Ubuntu",
        "[kubelet.service](https://github.com/Azure/AgentBaker/blob/master/parts/linux/cloud-init/artifacts/kubelet.service)",
    ),
    PlatformRow(
        "k3s",
        "any, get.k3s.io",
        sim.k3s,
        embedded.K3S.fix(),
        embedded.K3S.fix(),
        "the kubelet runs inside the k3s process, which sets its flags on every start; there is no "
        "kubelet.service",
        "[k3s configuration](https://docs.k3s.io/installation/configuration)",
    ),
    PlatformRow(
        "RKE2",
        "any, get.rke2.io",
        sim.rke2,
        embedded.RKE2.fix(),
        embedded.RKE2.fix(),
        "rke2 starts the kubelet itself and sets its flags on every start; there is no kubelet.service",
        "[RKE2 configuration](https://docs.rke2.io/install/configuration)",
    ),
    PlatformRow(
        "Talos",
        "Talos Linux",
        sim.talos,
        platform.TALOS.fix,
        platform.TALOS.fix,
        platform.TALOS.owns_kubelet,
        "[editing machine configuration](https://docs.siderolabs.com/talos/latest/configure-your-talos-cluster/system-configuration/editing-machine-configuration)",
    ),
    PlatformRow(
        "OpenShift",
        "RHCOS (CRI-O), Machine Config Operator",
        sim.openshift,
        platform.OPENSHIFT.fix,
        platform.OPENSHIFT.fix,
        platform.OPENSHIFT.owns_kubelet
        + "; KubeletConfig refuses featureGates and ContainerRuntimeConfig has no enable_pod_events",
        "[machine-config-operator](https://github.com/openshift/machine-config-operator), "
        "[openshift/api#1458](https://github.com/openshift/api/pull/1458) (eventedPleg, closed unmerged)",
    ),
    PlatformRow(
        "Flatcar",
        "Flatcar Container Linux, Kubernetes sysext, `kubeadm join`",
        sim.flatcar,
        WORKS,
        WORKS,
        "kubeadm's units come with the sysext in the read-only /usr; everything the agent writes is in /etc "
        "(a kubelet.service drop-in in /etc/systemd/system/kubelet.service.d, the kubelet drop-in)",
        "[sysext-bakery](https://github.com/flatcar/sysext-bakery), "
        "[Flatcar kubeadm guide](https://www.flatcar.org/docs/latest/container-runtimes/getting-started-with-kubernetes/)",
    ),
)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _verdict(fix: str) -> str:
    return "works" if fix == WORKS else f"Skipped. Fix: {fix}"


def table() -> str:
    lines = [
        "| platform | node | default (DropInOnly) | kubeletConfig: EditConfigFile | why | source |",
        "|---|---|---|---|---|---|",
    ]
    for row in PLATFORMS:
        same = row.edit_config_file == row.drop_in_only != WORKS
        edit = "Skipped, with the same fix" if same else _verdict(row.edit_config_file)
        cells = (row.platform, row.node, _verdict(row.drop_in_only), edit, row.why)
        lines.append("| " + " | ".join(_cell(c) for c in cells) + f" | {row.source} |")
    return "\n".join(lines)


_BLOCK = re.compile(
    r"(<!-- BEGIN GENERATED: platforms .*?-->\n)(.*?)(<!-- END GENERATED: platforms -->)", re.S
)


def regenerate(text: str) -> str:
    found = _BLOCK.search(text)
    if found is None:
        raise SystemExit(f"{PAGE.name} lacks the GENERATED: platforms markers")
    return text[: found.start(2)] + table() + "\n" + text[found.end(2) :]


def main(argv: list[str]) -> int:
    current = PAGE.read_text()
    wanted = regenerate(current)
    if "--check" in argv:
        if wanted != current:
            print(f"{PAGE}: stale; run python -m eventedpleg_lab.platformdocs", file=sys.stderr)
            return 1
        return 0
    if wanted != current:
        PAGE.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
