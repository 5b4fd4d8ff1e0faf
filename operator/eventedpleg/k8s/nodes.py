"""Node writes shared by the operator and the agent: one merge patch, optionally conditional.

A merge patch that carries metadata.resourceVersion is rejected with 409 when the node changed since it
was read; that is how a step planned on stale data is refused (the caller plans again).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from kubernetes import client

from eventedpleg.k8s.client import get_json, send_json
from eventedpleg.k8s.errors import translated

MERGE_PATCH = "application/merge-patch+json"


def raw(response: Any) -> dict[str, Any]:
    """The JSON body of a `_preload_content=False` call: skipping the client's model round trip (JSON ->
    V1Node -> dict) is most of the operator's CPU per step on a big cluster."""
    body: dict[str, Any] = json.loads(response.data)
    return body


def node_patch(
    *,
    annotations: Mapping[str, str | None] | None = None,
    unschedulable: bool | None = None,
    resource_version: str | None = None,
    taints: Sequence[Mapping[str, str]] | None = None,
) -> dict[str, Any]:
    """The merge-patch body; an annotation set to None is removed; `taints` replaces the whole list."""
    meta: dict[str, Any] = {}
    if annotations:
        meta["annotations"] = dict(annotations)
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


@translated
def patch_node(api: client.ApiClient, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """Apply a merge patch to a Node; returns the node as a plain dict."""
    return send_json(api, "PATCH", f"/api/v1/nodes/{quote(name, safe='')}", body, content_type=MERGE_PATCH)


@translated
def get_node(api: client.ApiClient, name: str) -> dict[str, Any]:
    return get_json(api, f"/api/v1/nodes/{quote(name, safe='')}")


@translated
def list_nodes(api: client.ApiClient, label_selector: str | None = None) -> list[dict[str, Any]]:
    """Every Node as a plain dict (one LIST; for the CLI, never for the operator's loop)."""
    query = {"labelSelector": label_selector} if label_selector else None
    return list(get_json(api, "/api/v1/nodes", query)["items"])


@translated
def all_pods(api: client.ApiClient) -> list[dict[str, Any]]:
    """Every pod of the cluster, for preflight (static pods, what each node's drain would meet)."""
    return list(get_json(api, "/api/v1/pods")["items"])


AGENT_POD_SELECTOR = "app.kubernetes.io/component=agent"  # the chart's agent DaemonSet (epo.agentSelector)
AGENT_PAGE = 500


@translated
def agent_pods(api: client.ApiClient) -> list[dict[str, Any]]:
    """The agent DaemonSet's pods in every namespace (chunked LIST), for preflight and status: why a node
    shows no live agent."""
    pods: list[dict[str, Any]] = []
    token = ""
    while True:
        query = {"labelSelector": AGENT_POD_SELECTOR, "limit": str(AGENT_PAGE)}
        if token:
            query["continue"] = token
        page = get_json(api, "/api/v1/pods", query)
        pods += [
            pod
            for pod in page.get("items") or []
            if any(ref.get("kind") == "DaemonSet" for ref in pod["metadata"].get("ownerReferences") or [])
        ]
        token = str((page.get("metadata") or {}).get("continue") or "")
        if not token:
            return pods


@translated
def list_nodes_page(
    api: client.ApiClient, label_selector: str | None, limit: int, token: str | None
) -> dict[str, Any]:
    """One page of a chunked LIST (items, metadata.continue, metadata.resourceVersion) as a plain dict."""
    return raw(
        client.CoreV1Api(api).list_node(
            label_selector=label_selector, limit=limit, _continue=token, _preload_content=False
        )
    )
