"""Which pods of spec.rollout.healthGate are not Ready, per node, from pods as the API lists them (pure).
eventedpleg.k8s.workloads does the LISTs; the planner reads the answer as `Target.health`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from eventedpleg.core.rollout import selector
from eventedpleg.models.nodeconfig import HealthGate, LabelSelector, SelectorOperator

# node -> the gate's pods on it that are not Ready, as sorted "namespace/name" (empty: all of them Ready).
# A node missing from it was not looked at.
PodsNotReady = Mapping[str, tuple[str, ...]]


def selector_text(selector: LabelSelector) -> str:
    """The selector as a LIST's labelSelector query (k8s.io/apimachinery/pkg/labels syntax), so the API
    server filters the pods."""
    parts = [f"{key}={value}" for key, value in sorted(selector.match_labels.items())]
    for req in selector.match_expressions:
        values = ",".join(req.values)
        parts.append(
            {
                SelectorOperator.IN: f"{req.key} in ({values})",
                SelectorOperator.NOT_IN: f"{req.key} notin ({values})",
                SelectorOperator.EXISTS: req.key,
                SelectorOperator.DOES_NOT_EXIST: f"!{req.key}",
            }[req.operator]
        )
    return ",".join(parts)


def ready(pod: Mapping[str, Any]) -> bool:
    """Its Ready condition is True and it is not being deleted (a terminating pod is going away)."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(cond.get("type") == "Ready" and cond.get("status") == "True" for cond in conditions)


def not_ready(pods: Iterable[Mapping[str, Any]], nodes: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """`PodsNotReady` for `nodes` from the gate's pods (already selected by label and namespace). A pod that
    finished (Succeeded, Failed) guards nothing."""
    found: dict[str, list[str]] = {node: [] for node in nodes}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node not in found or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        if not ready(pod):
            meta = pod.get("metadata") or {}
            found[node].append(f"{meta.get('namespace', '')}/{meta.get('name', '')}")
    return {node: tuple(sorted(names)) for node, names in found.items()}


def guarding(gate: HealthGate, pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The gate's pods among `pods` (what the API server's label selection returns, for a caller that
    already holds every pod: preflight)."""
    if not gate.enabled:
        return []
    return [
        pod
        for pod in pods
        if (not gate.namespaces or (pod.get("metadata") or {}).get("namespace") in gate.namespaces)
        and selector.matches(gate.pod_selector, (pod.get("metadata") or {}).get("labels") or {})
    ]
