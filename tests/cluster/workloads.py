"""Objects the cluster tests put on the local control plane and read back with kubectl."""

from __future__ import annotations

import json
from typing import Any

from eventedpleg_lab.kube import workloads
from eventedpleg_lab.kube.fakenodes import KWOK_TOLERATION
from eventedpleg_lab.localcluster.cluster import LocalCluster


def kget(cluster: LocalCluster, *args: str) -> dict[str, Any]:
    """`kubectl get ARGS -o json`, parsed."""
    data: dict[str, Any] = json.loads(cluster.kubectl("get", *args, "-o", "json", check=True).stdout)
    return data


def guarded_deployment(
    namespace: str, name: str, *, replicas: int, node_selector: dict[str, str]
) -> list[dict[str, Any]]:
    """A Namespace, a Deployment of `replicas` pods on the fake nodes `node_selector` picks, and a
    PodDisruptionBudget NAME-pdb with minAvailable = replicas: no eviction is ever allowed."""
    labels = {"app": name}
    pod_spec = {
        "nodeSelector": node_selector,
        "tolerations": [KWOK_TOLERATION],
        "containers": [{"name": name, "image": f"registry.invalid/{name}:1"}],
    }
    return [
        workloads.namespace(namespace),
        workloads.deployment(name, namespace, replicas=replicas, pod_spec=pod_spec, labels=labels),
        workloads.disruption_budget(f"{name}-pdb", namespace, min_available=replicas, labels=labels),
    ]
