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
    namespace: str,
    name: str,
    *,
    replicas: int,
    node_selector: dict[str, str],
    may_allow_later: bool = False,
) -> list[dict[str, Any]]:
    """A Namespace, a Deployment of `replicas` pods on the fake nodes `node_selector` picks, and a
    PodDisruptionBudget NAME-pdb with minAvailable = replicas over them: no eviction is allowed.

    As is, the budget provably never allows one (desiredHealthy = expectedPods): the operator finds that
    before the cordon (spec.drain.onBlocked). With `may_allow_later`, the budget also covers a standby
    pod no scheduler has placed yet (NAME-standby, of a scheduler that does not run: Pending, never found
    unschedulable): evictions are refused all the same (disruptionsAllowed 0), but the budget would allow
    one once the standby runs -- a drain that waits. (A standby found unschedulable would make it a drain
    that never finishes: core.rollout.drain.budgets.)"""
    guard = {"guard": name}
    pod_spec = {
        "nodeSelector": node_selector,
        "tolerations": [KWOK_TOLERATION],
        "containers": [{"name": name, "image": f"registry.invalid/{name}:1"}],
    }
    objects = [
        workloads.namespace(namespace),
        workloads.deployment(
            name, namespace, replicas=replicas, pod_spec=pod_spec, labels={"app": name, **guard}
        ),
        workloads.disruption_budget(f"{name}-pdb", namespace, min_available=replicas, labels=guard),
    ]
    if may_allow_later:
        nowhere = {**pod_spec, "schedulerName": "eventedpleg-test-not-running"}
        standby = {"app": f"{name}-standby", **guard}
        objects.append(
            workloads.deployment(f"{name}-standby", namespace, replicas=1, pod_spec=nowhere, labels=standby)
        )
    return objects
