"""Workload manifests the lab, the tests and the benchmarks put on a cluster, as plain dicts for
`kubectl apply`: a Namespace, a Deployment or a DaemonSet, and a PodDisruptionBudget over its pods."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def deployment(
    name: str,
    namespace: str,
    *,
    replicas: int,
    pod_spec: Mapping[str, Any],
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A Deployment whose pods carry `labels` (default app=NAME), its selector."""
    labels = dict(labels or {"app": name})
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": dict(pod_spec)},
        },
    }


def daemonset(
    name: str, namespace: str, *, pod_spec: Mapping[str, Any], labels: Mapping[str, str]
) -> dict[str, Any]:
    """A DaemonSet whose pods carry `labels`, its selector."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "selector": {"matchLabels": dict(labels)},
            "template": {"metadata": {"labels": dict(labels)}, "spec": dict(pod_spec)},
        },
    }


def disruption_budget(
    name: str, namespace: str, *, min_available: int, labels: Mapping[str, str]
) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": dict(labels)}},
    }


def label_selector(labels: Mapping[str, str]) -> str:
    """The `-l` / labelSelector form of equality labels: a=1,b=2."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))
