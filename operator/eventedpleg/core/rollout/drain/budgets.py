"""Evictions a PodDisruptionBudget can never allow as things stand, found before the cordon. Pure, over pods
and PDBs as API dicts.

The eviction API (k8s.io/kubernetes pkg/registry/core/pod/storage/eviction.go) lets a pod go without a PDB
check when it is not running (Pending, Succeeded, Failed) or already being deleted; refuses a pod matched by
more than one PDB ("more than one PodDisruptionBudget"), always; lets an unready pod go under
`unhealthyPodEvictionPolicy: AlwaysAllow`; otherwise needs `status.disruptionsAllowed > 0`. The disruption
controller (pkg/controller/disruption/disruption.go) sets that to `currentHealthy - desiredHealthy`. So when
`desiredHealthy >= expectedPods` (`maxUnavailable: 0`, `minAvailable` equal to the replicas, one replica
with `minAvailable: 1`) no eviction of a ready pod is allowed even with every pod healthy: that drain can
only finish after someone scales up or changes the budget. A budget whose status is older than its spec
(observedGeneration) is not judged: the eviction API answers it 429 too, and that clears by itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eventedpleg.core.rollout.drain.pods import PodRef


@dataclass(frozen=True)
class NeverAllowed:
    """A pod the drain would evict that no eviction can move until something else changes."""

    pod: PodRef
    why: str  # names the PDB(s) and what to change

    def __str__(self) -> str:
        return f"{self.pod}: {self.why}"


def _matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A policy/v1 PDB selector: null matches nothing, empty matches every pod of the namespace."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for req in selector.get("matchExpressions") or []:
        key, op, values = req.get("key", ""), req.get("operator", ""), req.get("values") or []
        present = key in labels
        if (
            (op == "In" and not (present and labels[key] in values))
            or (op == "NotIn" and present and labels[key] in values)
            or (op == "Exists" and not present)
            or (op == "DoesNotExist" and present)
        ):
            return False
    return True


def _ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(cond.get("type") == "Ready" and cond.get("status") == "True" for cond in conditions)


def _name(pdb: Mapping[str, Any]) -> str:
    meta = pdb.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _never(pdb: Mapping[str, Any]) -> str:
    """Why `pdb` allows no eviction of a ready pod even with all its pods healthy ("" when it may)."""
    meta, spec, status = pdb.get("metadata") or {}, pdb.get("spec") or {}, pdb.get("status") or {}
    if int(status.get("observedGeneration") or 0) < int(meta.get("generation") or 0):
        return ""  # not judged yet by the disruption controller
    expected, desired = int(status.get("expectedPods") or 0), int(status.get("desiredHealthy") or 0)
    if expected == 0 or desired < expected:
        return ""
    if "maxUnavailable" in spec:
        rule = f"maxUnavailable: {spec['maxUnavailable']}"
    else:
        rule = f"minAvailable: {spec.get('minAvailable')}"
    return (
        f"PodDisruptionBudget {_name(pdb)} ({rule}) needs {desired} of its {expected} pod(s) healthy, "
        "so it allows no eviction even with all of them healthy; scale the workload up or relax the budget"
    )


def never_allowed(
    pods: Iterable[Mapping[str, Any]], evict: Sequence[PodRef], pdbs: Iterable[Mapping[str, Any]]
) -> tuple[NeverAllowed, ...]:
    """Among `pods`, those in `evict` whose eviction cannot be allowed until something else changes."""
    wanted = set(evict)
    by_namespace: dict[str, list[Mapping[str, Any]]] = {}
    for pdb in pdbs:
        by_namespace.setdefault(str((pdb.get("metadata") or {}).get("namespace", "")), []).append(pdb)
    found: list[NeverAllowed] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        ref = PodRef(str(meta.get("namespace", "")), str(meta.get("name", "")))
        phase = (pod.get("status") or {}).get("phase", "")
        if ref not in wanted or meta.get("deletionTimestamp") or phase != "Running":
            continue
        labels = meta.get("labels") or {}
        covering = [
            p
            for p in by_namespace.get(ref.namespace, ())
            if _matches((p.get("spec") or {}).get("selector"), labels)
        ]
        if len(covering) > 1:
            names = ", ".join(sorted(_name(p) for p in covering))
            found.append(
                NeverAllowed(
                    ref,
                    f"matched by more than one PodDisruptionBudget ({names}), which the eviction API refuses",
                )
            )
            continue
        if not covering:
            continue
        pdb = covering[0]
        if not _ready(pod) and (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
            continue
        why = _never(pdb)
        if why and _ready(pod):
            found.append(NeverAllowed(ref, why))
    return tuple(found)


def namespaces(evict: Sequence[PodRef]) -> tuple[str, ...]:
    """The namespaces whose PDBs may cover `evict` (one LIST each)."""
    return tuple(sorted({ref.namespace for ref in evict}))
