"""The order nodes are taken in (spec.rollout.order), as a sort key over NodeViews (pure).

Zone always comes first: a rollout finishes one zone before it starts the next (MCO does the same), so a
batch stays in one zone and a bad change hurts one zone at most. The chosen order ranks the nodes within
their zone; the name breaks ties, so every order is total and every pass picks the same node."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC
from functools import partial

from eventedpleg.core.rollout.snapshot import NodeView
from eventedpleg.models.nodeconfig import OrderBy, RolloutOrder

OrderKey = tuple[str, ...]
_LAST = "\U0010ffff"  # sorts after any value: nodes without a creationTimestamp or the label go last


def order_key(order: RolloutOrder) -> Callable[[NodeView], OrderKey]:
    if order.by is OrderBy.OLDEST_FIRST:
        return _oldest_first
    if order.by is OrderBy.LABEL:
        return partial(_by_label, order.label)
    return _by_name


def _by_name(node: NodeView) -> OrderKey:
    return node.order


def _oldest_first(node: NodeView) -> OrderKey:
    created = node.facts.created
    # Fixed width in UTC, so the text sorts as the time does.
    stamp = created.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") if created is not None else _LAST
    return (node.zone, stamp, node.name)


def _by_label(label: str, node: NodeView) -> OrderKey:
    value = node.labels.get(label)
    if value is None:
        return (node.zone, _LAST, node.name)
    # A label value has at most 63 characters: zero-padded, numbers compare as numbers (rank 9 before 10).
    return (node.zone, value.zfill(63) if value.isdigit() else value, node.name)
