"""Which pods a drain evicts, skips or is blocked by: kubectl drain's filters (k8s.io/kubectl/pkg/drain
filters.go), pure, over pods as API dicts.

In kubectl's order: pods already being deleted are waited for; DaemonSet pods are skipped (we always
behave as --ignore-daemonsets, like MCO and SUC); mirror (static) pods are skipped; emptyDir pods need
deleteEmptyDirData; pods without a controller need force. Succeeded/Failed pods are always removable.
Before the last two, a running pod that asks the autoscalers not to be disrupted (DO_NOT_DISRUPT) blocks
the drain whatever the options say, a forced delete included.

Then spec.drain.rules (core.rollout.drain.rules), only over the pods those filters would evict: a pod a rule
skips stays, a WaitCompleted pod is waited for (never evicted), and of the pods to drain only those of the
lowest order still on the node are evicted in this pass.

Why a pod is skipped or blocks the drain is a kind (SkipKind, Blocker), never parsed text: the step policy
(core.rollout.steps) decides on kinds; the English is only for people (the reason annotation, Events).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from eventedpleg.core.rollout import selector
from eventedpleg.core.rollout.drain import rules as drainrules
from eventedpleg.models.nodeconfig import DrainBehavior, DrainRule, LabelSelector

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
MAX_REASONS = 3  # blocking pods named in the reason; the rest are counted


class SkipKind(StrEnum):
    """A pod a drain leaves where it is (the value is how people read it)."""

    DAEMONSET = "DaemonSet pod"
    MIRROR = "mirror pod"  # a static pod: the kubelet runs it from a file, eviction cannot move it
    OPTED_OUT = "annotated eventedpleg.io/drain: skip"
    NOT_SELECTED = "not matched by drain.podSelector"
    STALLED_DELETE = "terminating past drain.skipWaitForDeleteTimeoutSeconds"  # kubectl's flag of that name
    RULE = "skipped by drain.rules"
    COMPLETED = "completed (drain.rules: WaitCompleted)"  # nothing left to wait for; never evicted


# A pod annotated so is never evicted by our drains (as Cluster API spares a pod labelled
# `cluster.x-k8s.io/drain: skip`; ours is an annotation under our own prefix).
OPT_OUT_ANNOTATION = "eventedpleg.io/drain"
OPT_OUT_VALUE = "skip"


class Blocker(StrEnum):
    """What keeps a pod on the node (the value is how people read it, after the pod's name)."""

    EMPTY_DIR = "uses emptyDir (local data would be lost); set drain.deleteEmptyDirData: true"
    NO_CONTROLLER = "has no controller (it would not come back); set drain.force: true"
    EVICTION_REFUSED = "eviction refused"  # HTTP 429: a PodDisruptionBudget says not now
    EVICTION_FAILED = "eviction failed"  # any other API error: try again on the next pass
    NEVER_ALLOWED = "eviction can never be allowed as things are"  # core.rollout.drain.budgets names the PDB
    DO_NOT_DISRUPT = 'annotated karpenter.sh/do-not-disrupt: "true"'
    NOT_SAFE_TO_EVICT = 'annotated cluster-autoscaler.kubernetes.io/safe-to-evict: "false"'


# Pod annotations that ask not to be disrupted, as the autoscalers read them: Karpenter's
# (kubernetes-sigs/karpenter pkg/apis/v1/labels.go, DoNotDisruptAnnotationKey) and the cluster-autoscaler's
# (kubernetes/autoscaler cluster-autoscaler/utils/drain/drain.go, PodSafeToEvictKey). Such a pod is never
# evicted nor deleted by our drains: it blocks the drain (spec.drain.onBlocked), found before the cordon.
DO_NOT_DISRUPT = {
    "karpenter.sh/do-not-disrupt": ("true", Blocker.DO_NOT_DISRUPT),
    "cluster-autoscaler.kubernetes.io/safe-to-evict": ("false", Blocker.NOT_SAFE_TO_EVICT),
}
# Blockers no option of ours overrides: not even onTimeout: ForceDelete deletes these pods.
PROTECTED = frozenset({Blocker.DO_NOT_DISRUPT, Blocker.NOT_SAFE_TO_EVICT})
# Blockers a person has to look at (a PDB that never allows, a spec option): they get a Warning Event.
NEEDS_ATTENTION = frozenset(
    {Blocker.EMPTY_DIR, Blocker.NO_CONTROLLER, Blocker.EVICTION_REFUSED, Blocker.NEVER_ALLOWED} | PROTECTED
)
# Blockers that cannot clear by themselves: waiting for the drain timeout gains nothing
# (spec.drain.onBlocked).
PERMANENT = frozenset({Blocker.EMPTY_DIR, Blocker.NO_CONTROLLER, Blocker.NEVER_ALLOWED}) | PROTECTED


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class DrainSelection:
    evict: tuple[PodRef, ...]  # in this pass: the pods of the current order
    terminating: tuple[PodRef, ...]  # deletion requested: wait for them to go
    skipped: tuple[tuple[PodRef, SkipKind], ...]
    blocked: tuple[tuple[PodRef, Blocker], ...]  # cannot be evicted with these options
    later: tuple[tuple[PodRef, int], ...] = ()  # drain.rules: evicted once the lower orders are gone
    wait_completed: tuple[PodRef, ...] = ()  # drain.rules WaitCompleted, running: never evicted, order 0
    order: int | None = None  # the order this pass works on, when drain.rules give any pod one

    @property
    def drained(self) -> tuple[PodRef, ...]:
        """Every pod the drain evicts, in this pass or a later one."""
        return self.evict + tuple(ref for ref, _ in self.later)

    @property
    def mirror_pods(self) -> tuple[PodRef, ...]:
        return tuple(ref for ref, kind in self.skipped if kind is SkipKind.MIRROR)

    @property
    def done(self) -> bool:
        return not (self.evict or self.terminating or self.blocked or self.later or self.wait_completed)


def holding(
    pods: Iterable[Mapping[str, Any]], blocking: LabelSelector, maintenance: Sequence[str] = ()
) -> str:
    """What holds the node where it is for now, for people ("" when nothing): running pods that match
    spec.drain.blockingPodSelector (as kured, Succeeded/Failed/Unknown pods do not count) and other
    maintenance owners' claims (`maintenance`: their names)."""
    texts = [f"{name} (another maintenance owner) holds the node" for name in maintenance]
    if not blocking.empty:
        texts += [
            f"runs {_ref(pod)}, which matches drain.blockingPodSelector"
            for pod in pods
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed", "Unknown")
            and selector.matches(blocking, (pod.get("metadata") or {}).get("labels") or {})
        ]
    return "; ".join(_listed(texts))


def _ref(pod: Mapping[str, Any]) -> PodRef:
    meta = pod.get("metadata") or {}
    return PodRef(str(meta.get("namespace", "")), str(meta.get("name", "")))


def _controller(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for owner in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("controller"):
            return owner  # type: ignore[no-any-return]
    return None


@dataclass(frozen=True)
class Options:
    """What decides which pods a drain evicts, beyond kubectl's fixed filters (from DrainPolicy)."""

    delete_empty_dir_data: bool
    force: bool
    pods: LabelSelector = field(default_factory=LabelSelector)  # only these are evicted (empty: all)
    stalled_delete_seconds: int = 0  # a deletion older than this is not waited for (0: always)
    now: datetime | None = None  # for stalled_delete_seconds
    rules: tuple[DrainRule, ...] = ()  # spec.drain.rules
    # The labels of the pods' namespaces, for the rules' namespaceSelector (drainrules.reads_namespaces)
    namespaces: drainrules.NamespaceLabels = field(default_factory=dict)
    finish: bool = False  # onTimeout: ForceDelete at the deadline: WaitCompleted pods go too


def _stalled(meta: Mapping[str, Any], options: Options) -> bool:
    if not options.stalled_delete_seconds or options.now is None:
        return False
    try:
        since = datetime.fromisoformat(str(meta["deletionTimestamp"]).replace("Z", "+00:00"))
    except ValueError:
        return False
    return (options.now - since).total_seconds() > options.stalled_delete_seconds


def _do_not_disrupt(annotations: Mapping[str, Any]) -> Blocker | None:
    for key, (value, blocker) in DO_NOT_DISRUPT.items():
        if annotations.get(key) == value:
            return blocker
    return None


def _left(pod: Mapping[str, Any], options: Options) -> SkipKind | None:
    """Why kubectl drain (and ours) leaves a pod not being deleted where it is, or None."""
    meta = pod.get("metadata") or {}
    controller, annotations = _controller(pod), meta.get("annotations") or {}
    if controller is not None and controller.get("kind") == "DaemonSet":
        return SkipKind.DAEMONSET
    if MIRROR_ANNOTATION in annotations:
        return SkipKind.MIRROR
    if annotations.get(OPT_OUT_ANNOTATION) == OPT_OUT_VALUE:
        return SkipKind.OPTED_OUT
    if not options.pods.empty and not selector.matches(options.pods, meta.get("labels") or {}):
        return SkipKind.NOT_SELECTED
    return None


def _blocker(pod: Mapping[str, Any], options: Options) -> Blocker | None:
    """What keeps a running pod to drain from being evicted with these options, or None."""
    if (protected := _do_not_disrupt((pod.get("metadata") or {}).get("annotations") or {})) is not None:
        return protected
    if not options.delete_empty_dir_data and any(
        "emptyDir" in v for v in (pod.get("spec") or {}).get("volumes") or []
    ):
        return Blocker.EMPTY_DIR
    if _controller(pod) is None and not options.force:
        return Blocker.NO_CONTROLLER
    return None


def select_pods(pods: Iterable[Mapping[str, Any]], options: Options) -> DrainSelection:
    drain: list[tuple[PodRef, int]] = []  # to evict, with their orders
    terminating: list[PodRef] = []
    skipped: list[tuple[PodRef, SkipKind]] = []
    blocked: list[tuple[PodRef, Blocker]] = []
    waits: list[PodRef] = []
    orders: list[int] = []  # of the pods to drain still on the node: the lowest goes now
    for pod in pods:
        ref, meta = _ref(pod), pod.get("metadata") or {}
        finished = (pod.get("status") or {}).get("phase", "") in ("Succeeded", "Failed")
        place = (
            drainrules.place(pod, options.rules, options.namespaces) if options.rules else drainrules.DRAIN
        )
        if place.behavior is DrainBehavior.WAIT_COMPLETED and options.finish:
            place = drainrules.DRAIN  # onTimeout: ForceDelete ends the wait: deleted in order 0
        if meta.get("deletionTimestamp"):
            if _stalled(meta, options):
                skipped.append((ref, SkipKind.STALLED_DELETE))
            else:
                terminating.append(ref)
                if place.behavior is not DrainBehavior.SKIP:  # a lower order is gone only once deleted
                    orders.append(place.order)
        elif (left := _left(pod, options)) is not None:
            skipped.append((ref, left))
        elif place.behavior is DrainBehavior.SKIP:
            skipped.append((ref, SkipKind.RULE))
        elif place.behavior is DrainBehavior.WAIT_COMPLETED:
            if finished:
                skipped.append((ref, SkipKind.COMPLETED))
            else:
                waits.append(ref)
                orders.append(place.order)
        elif not finished and (blocker := _blocker(pod, options)) is not None:
            blocked.append((ref, blocker))
            orders.append(place.order)
        else:
            drain.append((ref, place.order))
    current = drainrules.current_order(orders + [order for _, order in drain])
    evict, later = drainrules.split(drain, current)
    ordered = any(rule.behavior is not DrainBehavior.SKIP for rule in options.rules)
    return DrainSelection(
        evict,
        tuple(terminating),
        tuple(skipped),
        tuple(blocked),
        later=later,
        wait_completed=tuple(waits),
        order=current if ordered else None,
    )


@dataclass(frozen=True)
class EvictionProblem:
    """An eviction the API did not accept on this attempt."""

    pod: PodRef
    kind: Blocker  # EVICTION_REFUSED or EVICTION_FAILED
    detail: str  # what the API said

    def __str__(self) -> str:
        verb = "refused" if self.kind is Blocker.EVICTION_REFUSED else "failed"
        return f"eviction of {self.pod} {verb}: {self.detail}"


@dataclass(frozen=True)
class DrainResult:
    """One drain attempt, as the step policy reads it."""

    done: bool  # nothing left that must go: the node may be handed to the agent
    waiting: str = ""  # why not done, naming the pods and PDBs, for people (empty when done)
    blockers: frozenset[Blocker] = frozenset()  # the kinds of what keeps pods on the node
    never: str = ""  # what keeps pods on the node and cannot clear by itself, for people ("" when nothing)
    protected: str = ""  # the part of `never` no option overrides, a forced delete included (`protected`)


def _listed(texts: Sequence[str]) -> list[str]:
    """The first MAX_REASONS texts, and how many more."""
    more = [f"and {len(texts) - MAX_REASONS} more"] if len(texts) > MAX_REASONS else []
    return list(texts[:MAX_REASONS]) + more


def waits(selection: DrainSelection) -> list[str]:
    """What the drain waits on because of drain.rules, naming the pods, for people."""
    texts: list[str] = []
    by_order: dict[int, list[str]] = {}
    for ref, order in selection.later:
        by_order.setdefault(order, []).append(str(ref))
    for order, names in sorted(by_order.items()):
        texts.append(f"order {order} waits for order {selection.order}: {', '.join(_listed(names))}")
    if selection.wait_completed:
        running = ", ".join(_listed([str(ref) for ref in selection.wait_completed]))
        texts.append(f"waits for {running} to complete (drain.rules: WaitCompleted)")
    return texts


def never(selection: DrainSelection, never_allowed: Sequence[str] = ()) -> str:
    """What keeps pods on the node for good (`never_allowed`: core.rollout.drain.budgets' findings), or ""."""
    texts = [f"{ref} {kind}" for ref, kind in selection.blocked if kind in PERMANENT]
    return "; ".join(_listed(texts + list(never_allowed)))


def protected(selection: DrainSelection) -> str:
    """The pods that asked not to be disrupted (PROTECTED), with the annotation, for people; "" when none.
    They hold the drain even where onTimeout: ForceDelete would delete everything else."""
    return "; ".join(_listed([f"{ref} {kind}" for ref, kind in selection.blocked if kind in PROTECTED]))


def result(
    selection: DrainSelection, problems: Sequence[EvictionProblem] = (), never_allowed: Sequence[str] = ()
) -> DrainResult:
    """The outcome of one attempt: `selection` as listed, `problems` from the evictions requested,
    `never_allowed`: refused evictions no PDB can allow as things are (core.rollout.drain.budgets)."""
    if selection.done:
        return DrainResult(done=True)
    texts = [f"{ref} {kind}" for ref, kind in selection.blocked] + [str(p) for p in problems]
    parts = []
    of_order = "" if selection.order is None else f" of order {selection.order}"
    if selection.evict:
        parts.append(f"evicting {len(selection.evict)} pod(s){of_order}")
    if selection.terminating:
        parts.append(f"waiting for {len(selection.terminating)} terminating pod(s)")
    parts.extend(_listed(texts))
    parts.extend(waits(selection))
    kinds = frozenset(
        [kind for _, kind in selection.blocked]
        + [p.kind for p in problems]
        + ([Blocker.NEVER_ALLOWED] if never_allowed else [])
    )
    return DrainResult(
        done=False,
        waiting="; ".join(parts),
        blockers=kinds,
        never=never(selection, never_allowed),
        protected=protected(selection),
    )
