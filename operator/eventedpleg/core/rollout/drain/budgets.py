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

A budget that allows some evictions now can still never let the whole drain through: when the drain must
evict more of its ready pods from this node than `status.disruptionsAllowed` allows, every further eviction
waits for a replacement to become healthy, and none can when a pod of the budget is Pending and found
unschedulable, or when more of those pods than the budget allows fit no node but this one (the scheduler's
label and taint filters, core.rollout.drain.placement): the first evictions go, their replacements stay
Pending, the rest are refused for good. Only an unready pod is evicted without using the allowance (the
eviction API lets it go while the budget is met, or always under AlwaysAllow), so only ready pods count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from eventedpleg.core.rollout.drain import placement
from eventedpleg.core.rollout.drain.placement import Destination
from eventedpleg.core.rollout.drain.pods import PodRef

# Pods of these namespaces, as the caller lists them (only the Pending ones are looked at).
PodsIn = Callable[[tuple[str, ...]], Iterable[Mapping[str, Any]]]


def _none(_: tuple[str, ...]) -> Iterable[Mapping[str, Any]]:
    return ()


@dataclass(frozen=True)
class Elsewhere:
    """Where the pods the drain evicts could go: the other nodes and the Pending pods of the namespaces.
    Both asked only for a budget the drain needs more evictions of than it allows now."""

    nodes: Callable[[], Iterable[Destination]] | None = None  # every node but this one (None: not known)
    pending: PodsIn = field(default=_none)  # the Pending pods of these namespaces (one LIST each)


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
    meta, status = pdb.get("metadata") or {}, pdb.get("status") or {}
    if int(status.get("observedGeneration") or 0) < int(meta.get("generation") or 0):
        return ""  # not judged yet by the disruption controller
    expected, desired = int(status.get("expectedPods") or 0), int(status.get("desiredHealthy") or 0)
    if expected == 0 or desired < expected:
        return ""
    return (
        f"PodDisruptionBudget {_name(pdb)} ({_rule(pdb)}) needs {desired} of its {expected} pod(s) healthy, "
        "so it allows no eviction even with all of them healthy; scale the workload up or relax the budget"
    )


def _by_namespace(pdbs: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    by_namespace: dict[str, list[Mapping[str, Any]]] = {}
    for pdb in pdbs:
        by_namespace.setdefault(str((pdb.get("metadata") or {}).get("namespace", "")), []).append(pdb)
    return by_namespace


def _covering(
    pod: Mapping[str, Any], by_namespace: Mapping[str, list[Mapping[str, Any]]]
) -> list[Mapping[str, Any]]:
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    return [
        p
        for p in by_namespace.get(str(meta.get("namespace", "")), ())
        if _matches((p.get("spec") or {}).get("selector"), labels)
    ]


def _ref(pod: Mapping[str, Any]) -> PodRef:
    meta = pod.get("metadata") or {}
    return PodRef(str(meta.get("namespace", "")), str(meta.get("name", "")))


def never_allowed(
    pods: Iterable[Mapping[str, Any]],
    evict: Sequence[PodRef],
    pdbs: Iterable[Mapping[str, Any]],
    elsewhere: Elsewhere | None = None,
) -> tuple[NeverAllowed, ...]:
    """Among `pods`, those in `evict` whose eviction cannot be allowed until something else changes;
    `elsewhere` (None: not looked at): where their replacements could go, for the budgets the drain needs
    more evictions of than they allow now."""
    wanted, by_namespace = set(evict), _by_namespace(pdbs)
    found: list[NeverAllowed] = []
    counted: dict[str, tuple[Mapping[str, Any], list[Mapping[str, Any]]]] = {}  # PDB -> its ready pods
    unready: dict[str, int] = {}  # PDB -> its unready pods the drain evicts too (no allowance used)
    for pod in pods:
        ref = _ref(pod)
        if ref not in wanted or (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        if (pod.get("status") or {}).get("phase", "") != "Running":
            continue
        covering = _covering(pod, by_namespace)
        if len(covering) > 1:
            names = ", ".join(sorted(_name(p) for p in covering))
            why = f"matched by more than one PodDisruptionBudget ({names}), which the eviction API refuses"
            found.append(NeverAllowed(ref, why))
        elif covering and _ready(pod):
            if why := _never(covering[0]):
                found.append(NeverAllowed(ref, why))
            else:
                counted.setdefault(_name(covering[0]), (covering[0], []))[1].append(pod)
        elif covering:
            unready[_name(covering[0])] = unready.get(_name(covering[0]), 0) + 1
    if elsewhere is not None:
        found.extend(_short(list(counted.values()), elsewhere, unready))
    return tuple(found)


def _allowed(pdb: Mapping[str, Any], *, default: int) -> int:
    """status.disruptionsAllowed; `default` while the disruption controller has not judged the spec."""
    meta, status = pdb.get("metadata") or {}, pdb.get("status") or {}
    if int(status.get("observedGeneration") or 0) < int(meta.get("generation") or 0):
        return default
    return int(status.get("disruptionsAllowed") or 0)


def _short(
    budgets: Sequence[tuple[Mapping[str, Any], list[Mapping[str, Any]]]],
    elsewhere: Elsewhere,
    unready: Mapping[str, int],
) -> list[NeverAllowed]:
    """The budgets the drain needs more evictions of than they allow now and whose pods' replacements
    cannot become healthy anywhere: one finding each, on the first pod refused."""
    short = [(pdb, pods) for pdb, pods in budgets if len(pods) > _allowed(pdb, default=len(pods))]
    if not short:
        return []
    places = tuple(elsewhere.nodes()) if elsewhere.nodes is not None else None
    names = tuple(sorted({str((pdb.get("metadata") or {}).get("namespace", "")) for pdb, _ in short}))
    pending = [p for p in elsewhere.pending(names) if placement.unschedulable(p)]
    found = []
    for pdb, pods in short:
        allowed = _allowed(pdb, default=0)
        why = _stuck(pdb, pods, allowed, places, pending, unready.get(_name(pdb), 0))
        if why:
            found.append(NeverAllowed(_ref(pods[allowed]), why))
    return found


def _stuck(
    pdb: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    allowed: int,
    places: tuple[Destination, ...] | None,
    pending: Sequence[Mapping[str, Any]],
    unready: int = 0,
) -> str:
    """Why the replacements of `pdb`'s pods cannot become healthy ("" when they may); `unready`: its
    pods on the node that go too without using the allowance."""
    namespace = str((pdb.get("metadata") or {}).get("namespace", ""))
    selector = (pdb.get("spec") or {}).get("selector")
    waiting = [
        p
        for p in pending
        if str((p.get("metadata") or {}).get("namespace", "")) == namespace
        and _matches(selector, (p.get("metadata") or {}).get("labels") or {})
        and not any(place.returning and placement.fits(p, place) for place in places or ())
    ]
    nowhere = [p for p in pods if places is not None and not any(placement.fits(p, n) for n in places)]
    if not waiting and len(nowhere) <= allowed:
        return ""
    # The last eviction needs desiredHealthy pods healthy besides the one it takes: the budget's other
    # pods, but those Pending unschedulable, and the replacements that fit another node (none while a pod
    # of the budget is found unschedulable: they would wait as it does). Fewer can ever be healthy: the
    # drain never finishes. As many: it may, once they are (the drain waits).
    status = pdb.get("status") or {}
    others = int(status.get("expectedPods") or 0) - len(pods) - unready - len(waiting)
    replaced = 0 if waiting else len(pods) - len(nowhere)
    if others + replaced >= int(status.get("desiredHealthy") or 0):
        return ""
    if waiting:
        cause = f"its pod {_ref(waiting[0])} is Pending, unschedulable"
    else:
        cause = f"{len(nowhere)} of them fit no other node (nodeSelector, affinity, taints, cordons)"
    return (
        f"PodDisruptionBudget {_name(pdb)} ({_rule(pdb)}) allows {allowed} disruption(s) now and the drain "
        f"needs {len(pods)}, but no replacement can become healthy: {cause}; make room for them on another "
        "node (a node they fit, or capacity) or relax the budget"
    )


def _rule(pdb: Mapping[str, Any]) -> str:
    spec = pdb.get("spec") or {}
    if "maxUnavailable" in spec:
        return f"maxUnavailable: {spec['maxUnavailable']}"
    return f"minAvailable: {spec.get('minAvailable')}"


def exhausted(
    pods: Iterable[Mapping[str, Any]], evict: Sequence[PodRef], pdbs: Iterable[Mapping[str, Any]]
) -> str:
    """The first PodDisruptionBudget covering a ready pod of `evict` that allows no disruption now, named
    for people ("" when none): a drain that timed out on it is not started again until it allows one."""
    wanted, by_namespace = set(evict), _by_namespace(pdbs)
    for pod in pods:
        if _ref(pod) not in wanted or not _ready(pod):
            continue
        for pdb in _covering(pod, by_namespace):
            if _allowed(pdb, default=1) == 0:
                return f"PodDisruptionBudget {_name(pdb)} ({_rule(pdb)}) allows 0 disruptions now"
    return ""


def namespaces(evict: Sequence[PodRef]) -> tuple[str, ...]:
    """The namespaces whose PDBs may cover `evict` (one LIST each)."""
    return tuple(sorted({ref.namespace for ref in evict}))
