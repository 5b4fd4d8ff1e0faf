"""The agent DaemonSet's pod on a node, as the operator keeps it: a small frozen summary (AgentPod) of
whether it is Ready and since when, and what its container says about itself.

The agent's host check (core.hostcheck) says the agent is live for hours after it last wrote; a pod that
crash-loops, or whose readiness fails because its loop is stuck, writes nothing new, so its check would
stay fresh for up to FRESH_PERIODS publishing periods. Its pod tells at once: a pod not Ready for longer
than GONE_GRACE (the grace a stopped agent gets to come back) means no live agent (`pod_absence`). A node
with no pod known says nothing by itself: the check's rules still apply.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from eventedpleg.core.hostcheck import GONE_GRACE
from eventedpleg.protocol import format_time, parse_time

_EPOCH = datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class AgentPod:
    """One agent pod: `name` is namespace/name; `since` when it last became Ready or not Ready (its Ready
    condition's lastTransitionTime, else its creation); `reason` its container's own word, short."""

    name: str
    node: str
    ready: bool
    since: datetime | None
    reason: str = ""

    @property
    def gone_at(self) -> datetime | None:
        """When a pod that is not Ready stops counting as a live agent (None: it is Ready, or says not
        since when, and then it never does by itself)."""
        return None if self.ready or self.since is None else self.since + GONE_GRACE

    @property
    def not_ready(self) -> str:
        at = format_time(self.since) if self.since else "its start"
        return f"agent pod {self.name} on node {self.node} not Ready since {at}: {self.reason}"


def pod_node(pod: Mapping[str, Any]) -> str:
    """The node a DaemonSet pod is for: where it runs, else the node its affinity names (a pod the
    scheduler has not placed yet has no nodeName; the DaemonSet controller pins it by matchFields)."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in required.get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("values"):
                return str(field["values"][0])
    return ""


def _reason(status: Mapping[str, Any], ready: bool) -> str:
    """The first waiting or terminated container's reason (else the pod's phase), with the restarts."""
    containers = status.get("containerStatuses") or []
    words = [
        str(stuck.get("reason") or kind.capitalize())
        for container in containers
        for kind, stuck in (container.get("state") or {}).items()
        if kind in ("waiting", "terminated") and isinstance(stuck, Mapping)
    ]
    phase = str(status.get("phase") or "Pending")
    # A running agent that is not Ready fails its readiness probe (its loop stopped beating: agent.health).
    failing = phase == "Running" and not ready
    word = words[0] if words else "Running, failing its readiness probe" if failing else phase
    restarts = max((int(container.get("restartCount") or 0) for container in containers), default=0)
    return f"{word} (restarts {restarts})" if restarts else word


def agent_pod(body: Mapping[str, Any]) -> AgentPod | None:
    """The summary of an agent pod as the API returns it (dict form); None for a pod no DaemonSet owns
    (not our agent), that is going away (its agent marks its check stopped as it goes) or that is for no
    node yet."""
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    node = pod_node(body)
    owned = any(ref.get("kind") == "DaemonSet" for ref in meta.get("ownerReferences") or [])
    if not owned or meta.get("deletionTimestamp") or not node:
        return None
    ready: Mapping[str, Any] = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {}
    )
    since = parse_time(ready.get("lastTransitionTime")) or parse_time(meta.get("creationTimestamp"))
    return AgentPod(
        name=f"{meta.get('namespace', '')}/{meta.get('name', '')}",
        node=node,
        ready=ready.get("status") == "True",
        since=since,
        reason=_reason(status, ready.get("status") == "True"),
    )


def pick(pods: Iterable[AgentPod]) -> AgentPod | None:
    """The pod that speaks for a node with more than one (a rolling update's new pod beside the old): a
    Ready one, else the one not Ready for the shortest time, as any of them may still become the agent."""
    return max(pods, key=_liveliness, default=None)


def _liveliness(pod: AgentPod) -> tuple[bool, bool, datetime, str]:
    return (pod.ready, pod.since is None, pod.since or _EPOCH, pod.name)


def pod_absence(pod: AgentPod | None, now: datetime) -> str:
    """Why `pod` shows no live agent at `now`: not Ready for longer than GONE_GRACE; "" when it is Ready,
    within that grace, or unknown (None: no pod known says nothing by itself)."""
    gone_at = pod.gone_at if pod is not None else None
    if pod is None or gone_at is None or now < gone_at:
        return ""
    return pod.not_ready
