"""What `kubeadm upgrade node` does to a node's kubelet files, for tests on a simulated host.

From kubeadm's source (read at v1.36.4 and v1.37.2, k8s.io/kubernetes cmd/kubeadm/app):
- phase `kubelet-config` (cmd/phases/upgrade/kubeletconfig.go -> phases/upgrade/postupgrade.go
  WriteKubeletConfigFiles): copy /var/lib/kubelet/config.yaml to
  /etc/kubernetes/tmp/kubeadm-kubelet-config-<2006-01-02-15-04-05>/config.yaml (CreateTimestampDir), write
  instance-config.yaml if it is missing, then write config.yaml anew (phases/kubelet/config.go
  WriteConfigToDisk): the cluster's KubeletConfiguration from the ConfigMap kube-system/kubelet-config, with
  `--patches` and instance-config.yaml applied over it, mode 0644. Whatever was edited into config.yaml is
  gone.
- phase `post-upgrade` (cmd/phases/upgrade/postupgrade.go): RemoveKubeletArgsFromFile with the release's
  list of unwanted flags (empty in 1.36 and 1.37; then kubeadm-flags.env is left alone). With flags to drop,
  kubeadm-flags.env is copied to /etc/kubernetes/tmp/kubeadm-kubelet-env<random>/ and rewritten as
  `KUBELET_KUBEADM_ARGS="<remaining flags>"` (WriteKubeletArgsToFile, fmt "%s=%q\\n").
- Nothing else of the kubelet's: not kubelet.service, not its drop-ins, not a --config-dir.
The documented next step is `systemctl daemon-reload` and `systemctl restart kubelet`
(https://kubernetes.io/docs/tasks/administer-cluster/kubeadm/kubeadm-upgrade/).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from eventedpleg_lab.sim.profiles import INSTANCE_CONFIG, KUBEADM_CONFIG, KUBEADM_FLAGS

TMP_DIR = "/etc/kubernetes/tmp"


def _at(root: Path, host_path: str) -> Path:
    return root / host_path.lstrip("/")


def upgrade_node(
    root: Path, cluster_config: dict[str, Any], now: datetime, *, unwanted_flags: Sequence[str] = ()
) -> list[str]:
    """Apply kubeadm's rewrite to the host under `root`; returns the host paths it wrote."""
    written: list[str] = []
    config = _at(root, KUBEADM_CONFIG)
    backup_dir = f"{TMP_DIR}/kubeadm-kubelet-config-{now.strftime('%Y-%m-%d-%H-%M-%S')}"
    _at(root, backup_dir).mkdir(parents=True, mode=0o700)
    shutil.copyfile(config, _at(root, f"{backup_dir}/config.yaml"))
    written.append(f"{backup_dir}/config.yaml")
    doc = dict(cluster_config)
    instance = _at(root, INSTANCE_CONFIG)
    if instance.is_file():
        doc.update(yaml.safe_load(instance.read_text()) or {})
    config.write_text(yaml.safe_dump(doc, sort_keys=True))
    config.chmod(0o644)
    written.append(KUBEADM_CONFIG)
    if unwanted_flags:
        flags_file = _at(root, KUBEADM_FLAGS)
        env_backup = f"{TMP_DIR}/kubeadm-kubelet-env0000000001"
        _at(root, env_backup).mkdir(parents=True, mode=0o700)
        shutil.copyfile(flags_file, _at(root, f"{env_backup}/kubeadm-flags.env"))
        written.append(f"{env_backup}/kubeadm-flags.env")
        value = flags_file.read_text().strip().partition("=")[2].strip('"')
        kept = [a for a in value.split() if a.lstrip("-").partition("=")[0] not in unwanted_flags]
        flags_file.write_text(f'KUBELET_KUBEADM_ARGS="{" ".join(kept)}"\n')
        written.append(KUBEADM_FLAGS)
    return written
