"""spec.drain.rules: which rule a pod falls under, and which order of pods a drain pass evicts. Pure.

Cluster API's MachineDrainRule semantics (sigs.k8s.io/cluster-api internal/controllers/machine/drain): a
pod takes the behavior of the first rule that selects it, or `Drain` in order 0; only the pods of the
lowest order still on the node are evicted, pods already being deleted included, so the next order starts
once every pod of the lower ones is gone; `WaitCompleted` pods are in order 0, never evicted: they hold
the drain, and the orders above 0, until they complete. Rules only narrow kubectl drain: they decide
only about pods kubectl would evict (core.rollout.drain.pods.select_pods asks), so no rule moves a DaemonSet,
static or opted-out pod.

A rule selects a pod as a MachineDrainRule's `pods[]` entry does (api/core/v1beta2/machinedrainrules_types.go,
MachineDrainRulePodSelector; core/reconcilers/machine/drain/filters.go, machineDrainRuleAppliesToPod): its
`podSelector` matches the pod's labels AND its `namespaceSelector` the labels of the pod's namespace, an
empty selector matching everything; our `namespaces` list narrows further (AND). The namespaces' labels
are data the caller reads (only when some rule has a namespaceSelector: `reads_namespaces`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from eventedpleg.core.rollout import selector
from eventedpleg.models.nodeconfig import DrainBehavior, DrainRule

T = TypeVar("T")
# Namespace name -> its labels, as the API lists Namespaces (only asked when `reads_namespaces`).
NamespaceLabels = Mapping[str, Mapping[str, str]]
NO_NAMESPACES: NamespaceLabels = {}
DEFAULT_ORDER = 0  # of a pod no rule selects, and of a Drain rule without `order`


@dataclass(frozen=True)
class Placement:
    """What the rules make of one pod."""

    behavior: DrainBehavior
    order: int = DEFAULT_ORDER  # WaitCompleted: always 0


DRAIN = Placement(DrainBehavior.DRAIN)


def reads_namespaces(rules: Sequence[DrainRule]) -> bool:
    """Whether placing pods under `rules` needs their namespaces' labels (some rule has a
    namespaceSelector): only then does the caller list Namespaces."""
    return any(not rule.namespace_selector.empty for rule in rules)


def _selects(rule: DrainRule, meta: Mapping[str, Any], namespaces: NamespaceLabels) -> bool:
    namespace = str(meta.get("namespace", ""))
    if rule.namespaces and namespace not in rule.namespaces:
        return False
    if not selector.matches(rule.pod_selector, meta.get("labels") or {}):
        return False
    # A namespace not listed (deleted since) has no labels here; Cluster API reports such a pod as an
    # error instead, but its pods are being deleted with it either way.
    return selector.matches(rule.namespace_selector, namespaces.get(namespace) or {})


def place(
    pod: Mapping[str, Any], rules: Sequence[DrainRule], namespaces: NamespaceLabels = NO_NAMESPACES
) -> Placement:
    """The first rule that selects `pod` decides; none: Drain in order 0. `namespaces`: the labels of the
    pods' namespaces (needed only when `reads_namespaces(rules)`)."""
    meta = pod.get("metadata") or {}
    for rule in rules:
        if _selects(rule, meta, namespaces):
            if rule.behavior is DrainBehavior.DRAIN:
                return Placement(DrainBehavior.DRAIN, DEFAULT_ORDER if rule.order is None else rule.order)
            return Placement(rule.behavior)
    return DRAIN


def current_order(orders: Iterable[int]) -> int | None:
    """The order a pass works on: the lowest among the pods to drain or wait for still on the node (None:
    none)."""
    return min(orders, default=None)


def split(
    pods: Iterable[tuple[T, int]], current: int | None
) -> tuple[tuple[T, ...], tuple[tuple[T, int], ...]]:
    """Pods to drain with their orders, as (those of `current`: evicted now, the rest: later)."""
    now: list[T] = []
    later: list[tuple[T, int]] = []
    for item, order in pods:
        if order == current:
            now.append(item)
        else:
            later.append((item, order))
    return tuple(now), tuple(sorted(later, key=lambda pair: pair[1]))
