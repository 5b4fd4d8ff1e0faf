"""spec.drain.rules: which rule a pod falls under, and which order of pods a drain pass evicts. Pure.

Cluster API's MachineDrainRule semantics (sigs.k8s.io/cluster-api internal/controllers/machine/drain): a
pod takes the behavior of the first rule that selects it, or `Drain` in order 0; only the pods of the
lowest order still on the node are evicted, pods already being deleted included, so the next order starts
once every pod of the lower ones is gone; `WaitCompleted` pods are in order 0, never evicted: they hold
the drain, and the orders above 0, until they complete. Rules only narrow kubectl drain: they decide
only about pods kubectl would evict (core.rollout.drain.pods.select asks), so no rule moves a DaemonSet,
static or opted-out pod.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from eventedpleg.core.rollout import selector
from eventedpleg.models.nodeconfig import DrainBehavior, DrainRule

T = TypeVar("T")
DEFAULT_ORDER = 0  # of a pod no rule selects, and of a Drain rule without `order`


@dataclass(frozen=True)
class Placement:
    """What the rules make of one pod."""

    behavior: DrainBehavior
    order: int = DEFAULT_ORDER  # WaitCompleted: always 0


DRAIN = Placement(DrainBehavior.DRAIN)


def _selects(rule: DrainRule, meta: Mapping[str, Any]) -> bool:
    if rule.namespaces and str(meta.get("namespace", "")) not in rule.namespaces:
        return False
    return selector.matches(rule.pod_selector, meta.get("labels") or {})


def place(pod: Mapping[str, Any], rules: Sequence[DrainRule]) -> Placement:
    """The first rule that selects `pod` decides; none: Drain in order 0."""
    meta = pod.get("metadata") or {}
    for rule in rules:
        if _selects(rule, meta):
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
