"""Kubernetes Events (core/v1) with reasons, for the operator and the agent alike.

Events about cluster-scoped objects (Nodes, NodeConfigs) live in the `default` namespace, where
`kubectl describe` finds them, as the kubelet's node events do.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from kubernetes import client

from eventedpleg.k8s.errors import ApiError, translated

log = logging.getLogger(__name__)
EVENT_NAMESPACE = "default"
MAX_MESSAGE = 1024


@dataclass(frozen=True)
class ObjectRef:
    kind: str
    name: str
    api_version: str
    uid: str = ""
    namespace: str = ""


def node_ref(name: str, uid: str = "") -> ObjectRef:
    return ObjectRef("Node", name, "v1", uid)


class EventRecorder:
    """Events are written in the background (`background=True`, the operator): a rollout step never waits
    for one, and never fails because of one. The agent writes them inline (it has time, and order)."""

    def __init__(
        self, api: client.ApiClient, component: str, host: str = "", *, background: bool = False
    ) -> None:
        self._core = client.CoreV1Api(api)
        self._component, self._host = component, host
        self._pool = ThreadPoolExecutor(2, "events") if background else None

    def emit(self, ref: ObjectRef, kind: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        if self._pool is not None:
            self._pool.submit(self._emit, ref, kind, reason, message)
        else:
            self._emit(ref, kind, reason, message)

    def flush(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def _emit(self, ref: ObjectRef, kind: str, reason: str, message: str) -> None:
        """Best effort: a lost Event must never fail a rollout step, so errors are only logged."""
        try:
            self._create(ref, kind, reason, message)
        except ApiError as exc:
            log.warning("could not record event %s on %s/%s: %s", reason, ref.kind, ref.name, exc)

    @translated
    def _create(self, ref: ObjectRef, kind: str, reason: str, message: str) -> None:
        now = datetime.now(UTC)
        namespace = ref.namespace or EVENT_NAMESPACE
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{ref.name}.", namespace=namespace),
            involved_object=client.V1ObjectReference(
                kind=ref.kind,
                name=ref.name,
                api_version=ref.api_version,
                uid=ref.uid or None,
                namespace=ref.namespace or None,
            ),
            reason=reason,
            message=message[:MAX_MESSAGE],
            type=kind,
            source=client.V1EventSource(component=self._component, host=self._host or None),
            reporting_component=self._component,
            reporting_instance=self._host or self._component,
            first_timestamp=now,
            last_timestamp=now,
            count=1,
        )
        self._core.create_namespaced_event(namespace, body)
