"""Objects the cluster tests put on the local control plane and read back with kubectl."""

from __future__ import annotations

import json
from typing import Any

from eventedpleg_lab.kube.fakenodes import KWOK_TOLERATION
from eventedpleg_lab.localcluster.cluster import LocalCluster


def kget(cluster: LocalCluster, *args: str) -> dict[str, Any]:
    """`kubectl get ARGS -o json`, parsed."""
    data: dict[str, Any] = json.loads(cluster.kubectl("get", *args, "-o", "json", check=True).stdout)
    return data


def guarded_deployment(namespace: str, name: str, *, replicas: int, pool: str) -> list[dict[str, Any]]:
    """A Namespace, a Deployment of `replicas` pods on the fake nodes labelled pool=POOL, and a
    PodDisruptionBudget with minAvailable = replicas: no eviction is ever allowed."""
    labels = {"app": name}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": {"pool": pool},
                        "tolerations": [KWOK_TOLERATION],
                        "containers": [{"name": name, "image": f"registry.invalid/{name}:1"}],
                    },
                },
            },
        },
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"minAvailable": replicas, "selector": {"matchLabels": labels}},
        },
    ]
