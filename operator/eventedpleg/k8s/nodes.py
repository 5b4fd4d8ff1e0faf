"""Node writes shared by the operator and the agent: one merge patch, optionally conditional.

A merge patch that carries metadata.resourceVersion is rejected with 409 when the node changed since it
was read; that is how a step planned on stale data is refused (the caller plans again).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ProtocolError, ReadTimeoutError

from eventedpleg.k8s.errors import from_api_exception, translated

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
) -> dict[str, Any]:
    """The merge-patch body; an annotation set to None is removed."""
    meta: dict[str, Any] = {}
    if annotations:
        meta["annotations"] = dict(annotations)
    if resource_version:
        meta["resourceVersion"] = resource_version
    body: dict[str, Any] = {"metadata": meta} if meta else {}
    if unschedulable is not None:
        body["spec"] = {"unschedulable": unschedulable}
    return body


@translated
def patch_node(api: client.ApiClient, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """Apply a merge patch to a Node; returns the node as a plain dict."""
    core = client.CoreV1Api(api)
    return raw(core.patch_node(name, dict(body), _content_type=MERGE_PATCH, _preload_content=False))


@translated
def get_node(api: client.ApiClient, name: str) -> dict[str, Any]:
    return raw(client.CoreV1Api(api).read_node(name, _preload_content=False))


@translated
def list_nodes(api: client.ApiClient, label_selector: str | None = None) -> list[dict[str, Any]]:
    """Every Node as a plain dict (one LIST; for the CLI, never for the operator's loop)."""
    return list(
        raw(client.CoreV1Api(api).list_node(label_selector=label_selector, _preload_content=False))["items"]
    )


@translated
def nodes_with_static_pods(api: client.ApiClient) -> set[str]:
    """Names of nodes that run mirror pods (static pods: kubernetes.io/config.mirror), for preflight."""
    pods = raw(client.CoreV1Api(api).list_pod_for_all_namespaces(_preload_content=False))["items"]
    return {
        str(pod["spec"].get("nodeName"))
        for pod in pods
        if "kubernetes.io/config.mirror" in ((pod.get("metadata") or {}).get("annotations") or {})
    }


def watch_nodes(
    api: client.ApiClient, *, label_selector: str | None, resource_version: str, timeout_seconds: int
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(event type, node dict) from one watch; ends at the timeout or on 410 Gone (list again then)."""
    stream = watch.Watch()
    try:
        for event in stream.stream(
            client.CoreV1Api(api).list_node,
            label_selector=label_selector,
            resource_version=resource_version or None,
            timeout_seconds=timeout_seconds,
            allow_watch_bookmarks=True,
        ):
            kind = str(event.get("type"))
            if kind == "ERROR":
                return
            yield kind, api.sanitize_for_serialization(event["object"])
    except ApiException as exc:
        if exc.status == 410:
            return
        raise from_api_exception(exc) from exc
    except (ProtocolError, ReadTimeoutError):
        return  # the server closed the stream (restart, timeout): list again
    finally:
        stream.stop()


@translated
def list_nodes_with_version(
    api: client.ApiClient, label_selector: str | None = None
) -> tuple[list[dict[str, Any]], str]:
    """The nodes and the list's resourceVersion, to start a watch from."""
    result = raw(client.CoreV1Api(api).list_node(label_selector=label_selector, _preload_content=False))
    return list(result.get("items", [])), str(result["metadata"].get("resourceVersion", ""))
