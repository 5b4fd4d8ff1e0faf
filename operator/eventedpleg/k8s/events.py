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
from urllib.parse import quote

from kubernetes import client

from eventedpleg.k8s.client import send_json
from eventedpleg.k8s.errors import ApiError, translated
from eventedpleg.reasons import ConditionReason, EventReason

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
        self._api = api
        self._component, self._host = component, host
        self._pool = ThreadPoolExecutor(2, "events") if background else None

    def emit(
        self,
        ref: ObjectRef,
        kind: Literal["Normal", "Warning"],
        reason: EventReason | ConditionReason,
        message: str,
    ) -> None:
        if self._pool is not None:
            self._pool.submit(self._emit, ref, kind, reason, message)
        else:
            self._emit(ref, kind, reason, message)

    def _emit(self, ref: ObjectRef, kind: str, reason: str, message: str) -> None:
        """Best effort: a lost Event must never fail a rollout step, so errors are only logged."""
        try:
            self._create(ref, kind, reason, message)
        except ApiError as exc:
            log.warning("could not record event %s on %s/%s: %s", reason, ref.kind, ref.name, exc)

    @translated
    def _create(self, ref: ObjectRef, kind: str, reason: str, message: str) -> None:
        """A plain JSON POST: the generated method's model round trip cost more CPU than the request."""
        now = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        namespace = ref.namespace or EVENT_NAMESPACE
        involved = {"kind": ref.kind, "name": ref.name, "apiVersion": ref.api_version}
        if ref.uid:
            involved["uid"] = ref.uid
        if ref.namespace:
            involved["namespace"] = ref.namespace
        source = {"component": self._component} | ({"host": self._host} if self._host else {})
        body = {
            "metadata": {"generateName": f"{ref.name}.", "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message[:MAX_MESSAGE],
            "type": kind,
            "source": source,
            "reportingComponent": self._component,
            "reportingInstance": self._host or self._component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        send_json(self._api, "POST", f"/api/v1/namespaces/{quote(namespace, safe='')}/events", body)
