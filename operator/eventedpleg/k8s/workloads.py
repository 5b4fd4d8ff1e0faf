"""The pods of spec.rollout.healthGate on the nodes the planner asked about, read for the next pass.

Cheap at 5000 nodes: nothing is read unless the gate is configured, and then only for the few nodes the
previous pass named (`Summary.health_watch`: the candidates the budget lets it take next, those held by
the gate, and nodes at the end of their after-window), never for the fleet. A handful of nodes costs one
LIST each with a spec.nodeName field selector (served from the API server's watch cache by its node
index) and the gate's label selector; more than that costs one label-selected LIST per namespace (paged),
filtered here by node: the API server sends only the gate's pods, never the cluster's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kubernetes import client

from eventedpleg.core.rollout import podhealth
from eventedpleg.k8s.client import get_json, list_all
from eventedpleg.k8s.errors import translated
from eventedpleg.models.nodeconfig import HealthGate

PER_NODE_MAX = 10  # up to this many nodes, one field-selected LIST each; beyond, one label-selected LIST


@translated
def not_ready(api: client.ApiClient, gate: HealthGate, nodes: Sequence[str]) -> podhealth.PodsNotReady:
    """For each of `nodes`, the gate's pods on it that are not Ready (podhealth.not_ready)."""
    if not gate.enabled or not nodes:
        return {}
    labels = podhealth.selector_text(gate.pod_selector)
    paths = [f"/api/v1/namespaces/{ns}/pods" for ns in gate.namespaces] or ["/api/v1/pods"]
    pods: list[dict[str, Any]] = []
    if len(nodes) <= PER_NODE_MAX:
        for node in nodes:
            query = {"labelSelector": labels, "fieldSelector": f"spec.nodeName={node}"}
            for path in paths:
                pods.extend(get_json(api, path, query).get("items") or [])
    else:
        for path in paths:
            pods.extend(list_all(api, path, {"labelSelector": labels}))
    return podhealth.not_ready(pods, nodes)
