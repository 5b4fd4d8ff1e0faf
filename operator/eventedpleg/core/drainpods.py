"""Which pods a drain evicts, skips or is blocked by: kubectl drain's filters (k8s.io/kubectl/pkg/drain
filters.go), pure, over pods as API dicts.

In kubectl's order: pods already being deleted are waited for; DaemonSet pods are skipped (we always
behave as --ignore-daemonsets, like MCO and SUC); mirror (static) pods are skipped; emptyDir pods need
deleteEmptyDirData; pods without a controller need force. Succeeded/Failed pods are always removable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class DrainSelection:
    evict: tuple[PodRef, ...]
    terminating: tuple[PodRef, ...]  # deletion requested: wait for them to go
    skipped: tuple[tuple[PodRef, str], ...]
    blocked: tuple[tuple[PodRef, str], ...]  # cannot be evicted with these options

    @property
    def mirror_pods(self) -> tuple[PodRef, ...]:
        return tuple(ref for ref, why in self.skipped if why == "mirror pod")

    @property
    def done(self) -> bool:
        return not (self.evict or self.terminating or self.blocked)


def _ref(pod: Mapping[str, Any]) -> PodRef:
    meta = pod.get("metadata") or {}
    return PodRef(str(meta.get("namespace", "")), str(meta.get("name", "")))


def _controller(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for owner in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("controller"):
            return owner  # type: ignore[no-any-return]
    return None


def select(pods: Iterable[Mapping[str, Any]], *, delete_empty_dir_data: bool, force: bool) -> DrainSelection:
    evict: list[PodRef] = []
    terminating: list[PodRef] = []
    skipped: list[tuple[PodRef, str]] = []
    blocked: list[tuple[PodRef, str]] = []
    for pod in pods:
        ref, meta = _ref(pod), pod.get("metadata") or {}
        phase = (pod.get("status") or {}).get("phase", "")
        finished = phase in ("Succeeded", "Failed")
        controller = _controller(pod)
        if meta.get("deletionTimestamp"):
            terminating.append(ref)
        elif controller is not None and controller.get("kind") == "DaemonSet":
            skipped.append((ref, "DaemonSet pod"))
        elif MIRROR_ANNOTATION in (meta.get("annotations") or {}):
            skipped.append((ref, "mirror pod"))
        elif finished:
            evict.append(ref)
        elif not delete_empty_dir_data and any(
            "emptyDir" in v for v in (pod.get("spec") or {}).get("volumes") or []
        ):
            blocked.append(
                (ref, "uses emptyDir (local data would be lost); set drain.deleteEmptyDirData: true")
            )
        elif controller is None and not force:
            blocked.append((ref, "has no controller (it would not come back); set drain.force: true"))
        else:
            evict.append(ref)
    return DrainSelection(tuple(evict), tuple(terminating), tuple(skipped), tuple(blocked))
