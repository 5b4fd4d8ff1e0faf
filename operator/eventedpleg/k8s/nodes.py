"""Node writes shared by the operator and the agent: one merge patch, optionally conditional.

A merge patch that carries metadata.resourceVersion is rejected with 409 when the node changed since it
was read; that is how a step planned on stale data is refused (the caller plans again).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from kubernetes import client

from eventedpleg.core.rollout.steps.requests import Write
from eventedpleg.k8s.client import PAGE, get_json, list_all, send_json
from eventedpleg.k8s.errors import translated
from eventedpleg.protocol import state_label

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


def node_patch(
    *,
    annotations: Mapping[str, str | None] | None = None,
    unschedulable: bool | None = None,
    resource_version: str | None = None,
    taints: Sequence[Mapping[str, str]] | None = None,
) -> dict[str, Any]:
    """The merge-patch body; an annotation set to None is removed; `taints` replaces the whole list. A
    change of the state annotation changes the state label with it (protocol.state_label): every Node
    write of the operator and the agent is built here, so the two never part."""
    meta: dict[str, Any] = {}
    if annotations:
        meta["annotations"] = dict(annotations)
        if labels := state_label(annotations):
            meta["labels"] = labels
    if resource_version:
        meta["resourceVersion"] = resource_version
    body: dict[str, Any] = {"metadata": meta} if meta else {}
    spec: dict[str, Any] = {}
    if unschedulable is not None:
        spec["unschedulable"] = unschedulable
    if taints is not None:
        spec["taints"] = [dict(t) for t in taints]
    if spec:
        body["spec"] = spec
    return body


def write_patch(write: Write, resource_version: str) -> dict[str, Any]:
    """The merge-patch body of a step's Write (core.rollout.steps), conditional on `resource_version`."""
    return node_patch(
        annotations=write.annotations,
        unschedulable=write.unschedulable,
        resource_version=resource_version,
        taints=None if write.taints is None else [t.to_api() for t in write.taints],
    )


@translated
def patch_node(api: client.ApiClient, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """Apply a merge patch to a Node; returns the node as a plain dict."""
    return send_json(api, "PATCH", f"/api/v1/nodes/{quote(name, safe='')}", body, content_type=MERGE_PATCH)


@translated
def patch_node_condition(api: client.ApiClient, name: str, condition: Mapping[str, str]) -> None:
    """Set one of status.conditions by its type (a strategic merge patch of nodes/status: the list merges
    by type, so the kubelet's conditions stay as they are)."""
    body = {"status": {"conditions": [dict(condition)]}}
    path = f"/api/v1/nodes/{quote(name, safe='')}/status"
    send_json(api, "PATCH", path, body, content_type=STRATEGIC_MERGE_PATCH)


@translated
def get_node(api: client.ApiClient, name: str) -> dict[str, Any]:
    return get_json(api, f"/api/v1/nodes/{quote(name, safe='')}")


@translated
def list_nodes(
    api: client.ApiClient, label_selector: str | None = None, *, limit: int = PAGE
) -> list[dict[str, Any]]:
    """Every Node as a plain dict (a LIST in pages; for the CLI, never for the operator's loop)."""
    query = {"labelSelector": label_selector} if label_selector else None
    return list_all(api, "/api/v1/nodes", query, limit=limit)


@translated
def all_pods(api: client.ApiClient, *, limit: int = PAGE) -> list[dict[str, Any]]:
    """Every pod of the cluster, for preflight (static pods, what each node's drain would meet), read in
    pages of `limit`."""
    return list_all(api, "/api/v1/pods", limit=limit)


AGENT_POD_SELECTOR = "app.kubernetes.io/component=agent"  # the chart's agent DaemonSet (epo.agentSelector)


def agent_pods_path(namespace: str = "") -> str:
    """The collection the operator watches the agent pods in (with AGENT_POD_SELECTOR): the agent's
    namespace, or every namespace when it is not known."""
    return f"/api/v1/namespaces/{quote(namespace, safe='')}/pods" if namespace else "/api/v1/pods"


@translated
def agent_pods(api: client.ApiClient, *, limit: int = PAGE) -> list[dict[str, Any]]:
    """The agent DaemonSet's pods in every namespace (chunked LIST), for preflight and status: why a node
    shows no live agent."""
    pods = list_all(api, "/api/v1/pods", {"labelSelector": AGENT_POD_SELECTOR}, limit=limit)
    return [
        pod
        for pod in pods
        if any(ref.get("kind") == "DaemonSet" for ref in pod["metadata"].get("ownerReferences") or [])
    ]


@translated
def agent_pods_in(api: client.ApiClient, namespace: str) -> list[dict[str, Any]]:
    """The agent pods left in the agent's namespace (`release-nodes --wait-for-agents`: an agent that
    exits marks its host check stopped on its Node, so the cleanup waits until none is left)."""
    return list_all(api, agent_pods_path(namespace), {"labelSelector": AGENT_POD_SELECTOR})
