"""NodeConfig reads and status writes (eventedpleg.io/v1alpha1, cluster-scoped, status subresource)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from kubernetes import client

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg.k8s.client import get_json, list_all, send_json
from eventedpleg.k8s.errors import translated

MERGE_PATCH = "application/merge-patch+json"


@translated
def patch_status(api: client.ApiClient, name: str, status: dict[str, Any]) -> None:
    """Replace the whole status through the /status subresource (lists such as conditions replace too).
    A plain JSON request: the generated method validates its arguments with pydantic on every call."""
    path = f"/apis/{protocol.GROUP}/{c.VERSION}/{c.PLURAL}/{quote(name, safe='')}/status"
    send_json(api, "PATCH", path, {"status": status}, content_type=MERGE_PATCH)


@translated
def get(api: client.ApiClient, name: str) -> dict[str, Any]:
    return get_json(api, f"/apis/{protocol.GROUP}/{c.VERSION}/{c.PLURAL}/{quote(name, safe='')}")


@translated
def names(api: client.ApiClient) -> list[str]:
    """The names of every NodeConfig (release-nodes refuses to run while one is left)."""
    items = list_all(api, f"/apis/{protocol.GROUP}/{c.VERSION}/{c.PLURAL}")
    return sorted(str(item["metadata"]["name"]) for item in items)


@translated
def patch_annotations(
    api: client.ApiClient, name: str, annotations: dict[str, str | None], resource_version: str
) -> None:
    """Merge-patch metadata.annotations, conditional on `resource_version` (409 when it moved on)."""
    body = {"metadata": {"annotations": annotations, "resourceVersion": resource_version}}
    client.CustomObjectsApi(api).patch_cluster_custom_object(
        protocol.GROUP, c.VERSION, c.PLURAL, name, body, _content_type=MERGE_PATCH
    )
