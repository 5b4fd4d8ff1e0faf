"""Distributions whose kubelet the agent does not manage: k3s and RKE2 start the kubelet themselves. Pure.

- k3s runs the kubelet inside its own process (`k3s server` / `k3s agent`), from the units the install script
  writes (`/etc/systemd/system/k3s.service`, `k3s-agent.service`); it reads `/etc/rancher/k3s/config.yaml`
  and `/etc/rancher/k3s/config.yaml.d/*.yaml`, and keeps its kubelet defaults in
  `/var/lib/rancher/k3s/agent/etc/kubelet.conf.d/00-k3s-defaults.conf`
  (https://docs.k3s.io/installation/configuration, "Configuration File" and "Kubelet configuration").
- RKE2 supervises its kubelet from `rke2-server.service` / `rke2-agent.service` and reads
  `/etc/rancher/rke2/config.yaml`; its kubelet defaults are in
  `/var/lib/rancher/rke2/agent/etc/kubelet.conf.d/00-rke2-defaults.conf`
  (https://docs.rke2.io/install/configuration, "Kubelet configuration"; units: docs.rke2.io/install/methods).

Neither has a `kubelet.service` to restart, and both regenerate the kubelet's flags on every start, so the
agent only recognises them and says what to set with the platform's own `kubelet-arg` (docs/compatibility.md
§3).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Distribution:
    name: str  # as shown to the user: "k3s", "RKE2"
    config_file: str
    kubelet_conf_d: str
    units: tuple[str, ...]  # service names, for the restart hint
    marks: tuple[str, ...]  # host paths whose presence identifies the distribution

    def fix(self) -> str:
        units = " or ".join(f"`systemctl restart {u}`" for u in self.units)
        return (
            f'set `kubelet-arg: ["feature-gates=EventedPLEG=true"]` in {self.config_file} (or put a '
            f"KubeletConfiguration drop-in with featureGates.EventedPLEG: true in {self.kubelet_conf_d}), "
            f"restart {self.name} ({units}) node by node, and label the node eventedpleg.io/skip=true"
        )


K3S = Distribution(
    name="k3s",
    config_file="/etc/rancher/k3s/config.yaml",
    kubelet_conf_d="/var/lib/rancher/k3s/agent/etc/kubelet.conf.d",
    units=("k3s-agent", "k3s"),
    marks=(
        "/etc/rancher/k3s",
        "/var/lib/rancher/k3s",
        "/etc/systemd/system/k3s.service",
        "/etc/systemd/system/k3s-agent.service",
        "/usr/local/bin/k3s",
    ),
)
RKE2 = Distribution(
    name="RKE2",
    config_file="/etc/rancher/rke2/config.yaml",
    kubelet_conf_d="/var/lib/rancher/rke2/agent/etc/kubelet.conf.d",
    units=("rke2-agent", "rke2-server"),
    marks=(
        "/etc/rancher/rke2",
        "/var/lib/rancher/rke2",
        "/usr/local/lib/systemd/system/rke2-server.service",
        "/usr/local/lib/systemd/system/rke2-agent.service",
        "/usr/lib/systemd/system/rke2-server.service",
        "/usr/lib/systemd/system/rke2-agent.service",
    ),
)
DISTRIBUTIONS = (K3S, RKE2)
MARKS: tuple[str, ...] = tuple(m for d in DISTRIBUTIONS for m in d.marks)


@dataclass(frozen=True)
class Embedded:
    """The distribution found on the host, and the paths that gave it away."""

    distribution: Distribution
    found: tuple[str, ...]


def recognise(present: Iterable[str]) -> Embedded | None:
    """The distribution whose marks are on the host (`present`: the marks that exist), if any."""
    have = set(present)
    for dist in DISTRIBUTIONS:
        found = tuple(m for m in dist.marks if m in have)
        if found:
            return Embedded(dist, found)
    return None
