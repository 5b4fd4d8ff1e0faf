"""The agent's API calls (eventedpleg.core.node.blocks.nodeapi.AgentApi) with the kubernetes client.

Only what the agent's RBAC allows: get/watch/patch its own Node (watch with fieldSelector
metadata.name=NODE), patch its nodes/status (the EventedPLEGHealthy condition), get ConfigMaps in the
operator's namespace, create Events. The admission policy
(manifests/.../agent-vap.yaml) further limits patches to the agent's own Node and `eventedpleg.io/*`
annotations, and in status to its EventedPLEGHealthy condition.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from eventedpleg.core.node.blocks.nodeapi import AgentNode
from eventedpleg.k8s import configmaps, nodes
from eventedpleg.k8s.errors import Conflict, NotFound, Unreachable, from_api_exception
from eventedpleg.k8s.events import EventRecorder, node_ref
from eventedpleg.reasons import EventReason

log = logging.getLogger(__name__)
COMPONENT = "eventedpleg-agent"
PATCH_ATTEMPTS = 8  # Node status heartbeats bump resourceVersion; a conflict just means "read again"
WATCH_READ_MARGIN = 30  # client read timeout = the server's timeoutSeconds + this: a silent stream is dead


def agent_node(obj: Mapping[str, Any]) -> AgentNode:
    """A Node as a plain dict (sanitize_for_serialization) -> AgentNode."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    info = status.get("nodeInfo") or {}
    ready: bool | None = None
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
    return AgentNode(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        annotations=dict(meta.get("annotations") or {}),
        kubelet_version=str(info.get("kubeletVersion", "")),
        runtime_version=str(info.get("containerRuntimeVersion", "")),
        ready=ready,
        unschedulable=bool((obj.get("spec") or {}).get("unschedulable", False)),
        addresses=tuple(
            (str(a.get("type", "")), str(a.get("address", ""))) for a in status.get("addresses") or []
        ),
    )


class KubeAgentApi:
    def __init__(self, api: client.ApiClient, *, host: str = "") -> None:
        self._api = api
        self._core = client.CoreV1Api(api)
        self._events = EventRecorder(api, COMPONENT, host)

    def _plain(self, obj: Any) -> dict[str, Any]:
        plain: dict[str, Any] = self._api.sanitize_for_serialization(obj)
        return plain

    def get_node(self, name: str) -> AgentNode | None:
        try:
            return agent_node(nodes.get_node(self._api, name))
        except NotFound:
            return None

    def watch_node(self, name: str, *, resource_version: str, timeout_seconds: int) -> Iterator[AgentNode]:
        stream = watch.Watch()
        try:
            for event in stream.stream(
                self._core.list_node,
                field_selector=f"metadata.name={name}",
                resource_version=resource_version or None,
                timeout_seconds=timeout_seconds,
                _request_timeout=(5, timeout_seconds + WATCH_READ_MARGIN),
            ):
                kind = event.get("type")
                if kind in ("ADDED", "MODIFIED"):
                    yield agent_node(self._plain(event["object"]))
                elif kind == "ERROR":
                    return  # e.g. 410 Gone: the caller reads the node again and re-watches
        except ApiException as exc:
            if exc.status == 410:
                return
            raise from_api_exception(exc) from exc
        except (HTTPError, OSError) as exc:  # a read timeout: the API server went quiet past its own end
            raise Unreachable(0, type(exc).__name__, str(exc)) from exc
        finally:
            stream.stop()

    def patch_node_annotations(
        self, name: str, changes: Mapping[str, str | None], *, require: Mapping[str, str] | None = None
    ) -> AgentNode | None:
        """Compare-and-set on annotations: read, check `require`, merge-patch with that resourceVersion."""
        for _ in range(PATCH_ATTEMPTS):
            current = self.get_node(name)
            if current is None:
                return None
            if any(current.annotations.get(k, "") != v for k, v in (require or {}).items()):
                return None
            body = nodes.node_patch(annotations=changes, resource_version=current.resource_version)
            try:
                return agent_node(nodes.patch_node(self._api, name, body))
            except Conflict:
                continue
        raise Conflict(409, "Conflict", f"node {name} kept changing; gave up after {PATCH_ATTEMPTS} attempts")

    def set_node_condition(self, name: str, condition: Mapping[str, str]) -> None:
        nodes.patch_node_condition(self._api, name, condition)

    def read_configmap(self, namespace: str, name: str) -> Mapping[str, str] | None:
        try:
            return configmaps.read(self._api, namespace, name)
        except NotFound:
            return None

    def emit_event(
        self, node: AgentNode, *, reason: EventReason, message: str, warning: bool = False
    ) -> None:
        self._events.emit(node_ref(node.name, node.uid), "Warning" if warning else "Normal", reason, message)
