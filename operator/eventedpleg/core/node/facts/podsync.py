"""Pods whose kubelet status has stopped following their containers. Pure: text and readings in, findings out.

On kubelet <= 1.36 with the gate on, a restarted container can run in the runtime while the kubelet's pod
status goes on saying waiting, terminated or nothing at all (docs/compatibility.md,
`#kubelet-136-missed-restarts`). Nothing in the
kubelet's log or metrics says so; only the two views side by side do. One look compares:

- the runtime: `crictl ps -a -o json` (CRI `ListContainers`, every state). Per container its ID, the pod
  it belongs to (the `io.kubernetes.pod.*` labels the kubelet puts on it), its name, state, `attempt`
  (the kubelet writes its restartCount there) and `createdAt`. `ps` carries no start or finish time;
  a caller holding `crictl inspect` figures may pass them (`started_at`, `finished_at`);
- the kubelet: a pod list, the kubelet's own `GET /pods` (port 10250, `nodes/proxy`; 10255 where the
  read-only port is on) or the API's pods with `spec.nodeName=<node>`. Per container: its ID, state and
  restartCount. The kubelet's /pods carries the status manager's view; the API's lags it by one status
  update (a few seconds), which the bound covers.

Per pod and container name, the runtime's newest container (highest attempt) is what the status should
show. It lags when:

- that container is running and the status shows another container, no container or one not running
  ("running in the runtime, the kubelet's status says waiting"): the missed restart;
- that container has exited and the status still shows it running: the missed exit.

A lag counts only once it has lasted longer than `bound` (30 s by default: the kubelet's status follows a
start within about a second through the generic relist, and within 5 s on the evented path's slowest
ordinary route, the cache's global time moved every `globalCacheUpdatePeriod`). It began at the earlier of
the container's own moment (its start: `started_at`, else `createdAt`, which is never later; or its finish:
`finished_at`, else this look) and the first look that saw a lag of the same pod, container name and kind
(`previous`), whichever container that was: a pod whose sandbox the kubelet keeps remaking gets a new
container every round and is one lag. It never began before the kubelet's last start (a restarted kubelet
rebuilds its statuses from a full relist). A pod being deleted and a pod the kubelet does not list are not
judged: their containers are being stopped, and a slow deletion is a different fault (k8s#124704).

Cost per look: one `crictl ps -a -o json` and one `/pods` read, which the caller makes (`/pods` first, so
a container that starts between the two reads is younger than the bound), and parsing both here. Measured
on the real-node rig (kubelet v1.36.4, containerd 2.2.9, crictl v1.36.0, 2 cores busy with a benchmark):
`crictl ps -a` over 109 containers (141 KB of JSON) took 1.1-2.6 s wall, 10-30 ms of CPU; the kubelet's
/pods of 5 pods (11 KB) 0.08-0.16 s; parsing both and comparing, 3.6 ms of CPU.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

BOUND = timedelta(seconds=30)
# The labels the kubelet writes on every container it creates
# (pkg/kubelet/kuberuntime/labels.go, v1.36.4 and v1.37.2).
POD_UID = "io.kubernetes.pod.uid"
POD_NAME = "io.kubernetes.pod.name"
POD_NAMESPACE = "io.kubernetes.pod.namespace"
CONTAINER_NAME = "io.kubernetes.container.name"


class PodSyncError(ValueError):
    """A reading that is not what `crictl ps -o json` or a pod list looks like."""


class RuntimeState(StrEnum):
    CREATED = "CONTAINER_CREATED"
    RUNNING = "CONTAINER_RUNNING"
    EXITED = "CONTAINER_EXITED"
    UNKNOWN = "CONTAINER_UNKNOWN"


class StatusState(StrEnum):
    """The one key of a container status's `state` (core/v1 ContainerState)."""

    WAITING = "waiting"
    RUNNING = "running"
    TERMINATED = "terminated"


@dataclass(frozen=True)
class RuntimeContainer:
    """One container as the runtime reports it."""

    id: str
    pod_uid: str
    pod: str  # namespace/name, for the reason
    name: str
    state: RuntimeState
    attempt: int
    created_at: datetime
    started_at: datetime | None = None  # from `crictl inspect`, when the caller has it
    finished_at: datetime | None = None


@dataclass(frozen=True)
class StatusContainer:
    """One entry of a pod's `status.containerStatuses`."""

    name: str
    id: str  # without the `containerd://` scheme; "" before the first start
    state: StatusState
    restart_count: int
    reason: str = ""  # waiting/terminated reason (CrashLoopBackOff, Error, ...)


@dataclass(frozen=True)
class KubeletPod:
    """One pod as the kubelet's status shows it."""

    uid: str
    pod: str  # namespace/name
    deleting: bool
    containers: tuple[StatusContainer, ...]


class LagKind(StrEnum):
    RESTART = "restart"  # running in the runtime, not in the status
    EXIT = "exit"  # exited in the runtime, running in the status


@dataclass(frozen=True)
class Lag:
    """A container whose kubelet status does not follow it, and since when (see the module docstring)."""

    pod_uid: str
    pod: str
    container: str
    container_id: str  # the runtime's
    kind: LagKind
    since: datetime
    reason: str  # one line

    @property
    def key(self) -> tuple[str, str, LagKind]:
        """Not the container ID: a pod whose sandbox the kubelet keeps remaking gets a new container each
        round while its status never follows, and that is one lag, not a new one per container."""
        return (self.pod_uid, self.container, self.kind)

    def seconds(self, at: datetime) -> float:
        return (at - self.since).total_seconds()


@dataclass(frozen=True)
class PodSyncLook:
    """What one look read: the runtime's containers, the kubelet's pods, when, and the kubelet's start."""

    runtime: tuple[RuntimeContainer, ...]
    pods: tuple[KubeletPod, ...]
    at: datetime
    kubelet_started: datetime | None = None


def lags(look: PodSyncLook, previous: Iterable[Lag] = ()) -> tuple[Lag, ...]:
    """Every container whose status does not follow it at this look, however young; pass the result back
    as `previous` at the next look so a lag keeps the moment it was first seen."""
    first_seen = {lag.key: lag.since for lag in previous}
    by_pod = {pod.uid: pod for pod in look.pods}
    found: list[Lag] = []
    for (uid, name), newest in sorted(_newest(look.runtime).items()):
        pod = by_pod.get(uid)
        if pod is None or pod.deleting:
            continue
        lag = _compare(newest, pod, look)
        if lag is None:
            continue
        since = min(lag.since, first_seen.get(lag.key, lag.since))
        if look.kubelet_started is not None:  # a restarted kubelet rebuilds its statuses: count anew
            since = min(max(since, look.kubelet_started), look.at)
        found.append(Lag(lag.pod_uid, lag.pod, name, lag.container_id, lag.kind, since, lag.reason))
    return tuple(found)


def overdue(found: Iterable[Lag], at: datetime, bound: timedelta = BOUND) -> tuple[Lag, ...]:
    """The lags that have lasted longer than `bound`: the pods to report."""
    return tuple(lag for lag in found if at - lag.since > bound)


def _newest(runtime: Iterable[RuntimeContainer]) -> dict[tuple[str, str], RuntimeContainer]:
    """Per pod and container name, the container the status should show: the highest attempt, then the
    latest created (two of one attempt only when the kubelet made a duplicate)."""
    newest: dict[tuple[str, str], RuntimeContainer] = {}
    for ctr in runtime:
        key = (ctr.pod_uid, ctr.name)
        held = newest.get(key)
        if held is None or (ctr.attempt, ctr.created_at, ctr.id) > (held.attempt, held.created_at, held.id):
            newest[key] = ctr
    return newest


def _compare(ctr: RuntimeContainer, pod: KubeletPod, look: PodSyncLook) -> Lag | None:
    status = next((s for s in pod.containers if s.name == ctr.name), None)
    shown = _describe(status)
    if ctr.state is RuntimeState.RUNNING:
        if status is not None and status.id == ctr.id and status.state is StatusState.RUNNING:
            return None
        began = ctr.started_at or ctr.created_at
        kind = LagKind.RESTART
        what = f"running in the runtime ({_short(ctr.id)}, attempt {ctr.attempt})"
    elif ctr.state is RuntimeState.EXITED:
        if status is None or status.id != ctr.id or status.state is not StatusState.RUNNING:
            return None
        began = ctr.finished_at or look.at  # without a finish time, from the first look that saw it
        kind = LagKind.EXIT
        what = f"exited in the runtime ({_short(ctr.id)}, attempt {ctr.attempt})"
    else:
        return None  # created or unknown: being started, or the runtime cannot say
    since = min(began, look.at)
    reason = f"{pod.pod} container {ctr.name}: {what}, the kubelet's status says {shown}"
    return Lag(pod.uid, pod.pod, ctr.name, ctr.id, kind, since, reason)


def _describe(status: StatusContainer | None) -> str:
    if status is None:
        return "nothing of it"
    detail = f" ({status.reason})" if status.reason else ""
    ident = f"{_short(status.id)}, " if status.id else ""
    return f"{status.state.value}{detail} ({ident}restartCount {status.restart_count})"


def _short(container_id: str) -> str:
    return container_id[:12]


# --- reading the two sources --------------------------------------------------------------------------


def parse_crictl_ps(text: str) -> tuple[RuntimeContainer, ...]:
    """`crictl ps -a -o json` (crictl v1.36: `createdAt` in nanoseconds as a string). Containers without
    the kubelet's pod labels are not the kubelet's and are left out."""
    doc = _json(text, "crictl ps")
    items = doc.get("containers")
    if not isinstance(items, list):
        raise PodSyncError("crictl ps: no containers list")
    out: list[RuntimeContainer] = []
    for item in items:
        labels = _mapping(item.get("labels"))
        meta = _mapping(item.get("metadata"))
        uid, name = labels.get(POD_UID), labels.get(CONTAINER_NAME) or meta.get("name")
        if not isinstance(uid, str) or not uid or not isinstance(name, str) or not name:
            continue
        try:
            state = RuntimeState(str(item.get("state")))
        except ValueError:
            state = RuntimeState.UNKNOWN
        out.append(
            RuntimeContainer(
                id=str(item.get("id") or ""),
                pod_uid=uid,
                pod=f"{labels.get(POD_NAMESPACE, '')}/{labels.get(POD_NAME, '')}",
                name=name,
                state=state,
                attempt=_int(meta.get("attempt")),
                created_at=_from_nanoseconds(item.get("createdAt")),
            )
        )
    return tuple(out)


def parse_pods(text: str) -> tuple[KubeletPod, ...]:
    """A PodList (the kubelet's /pods or the API's), regular containers only: init and ephemeral ones
    do not restart in place."""
    doc = _json(text, "pods")
    items = doc.get("items")
    if not isinstance(items, list):
        raise PodSyncError("pods: no items list")
    return tuple(_pod(_mapping(item)) for item in items)


def _pod(item: Mapping[str, Any]) -> KubeletPod:
    meta, status = _mapping(item.get("metadata")), _mapping(item.get("status"))
    statuses = status.get("containerStatuses")
    return KubeletPod(
        uid=str(meta.get("uid") or ""),
        pod=f"{meta.get('namespace', '')}/{meta.get('name', '')}",
        deleting=bool(meta.get("deletionTimestamp")),
        containers=tuple(_status(_mapping(s)) for s in statuses) if isinstance(statuses, list) else (),
    )


def _status(item: Mapping[str, Any]) -> StatusContainer:
    state = _mapping(item.get("state"))
    key = next((k for k in (StatusState.RUNNING, StatusState.TERMINATED) if k.value in state), None)
    kind = key or StatusState.WAITING
    cid = str(item.get("containerID") or "")
    return StatusContainer(
        name=str(item.get("name") or ""),
        id=cid.split("://", 1)[-1],
        state=kind,
        restart_count=_int(item.get("restartCount")),
        reason=str(_mapping(state.get(kind.value)).get("reason") or ""),
    )


def _json(text: str, what: str) -> Mapping[str, Any]:
    try:
        doc = json.loads(text)
    except ValueError as err:
        raise PodSyncError(f"{what}: not JSON: {err}") from None
    if not isinstance(doc, dict):
        raise PodSyncError(f"{what}: not a JSON object")
    return doc


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _int(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def _from_nanoseconds(value: object) -> datetime:
    nanoseconds = _int(value)
    return datetime.fromtimestamp(nanoseconds / 1e9, tz=UTC)
