"""A node's taints and ours among them (spec.drain.taintBeforeCordon), pure.

A write of spec.taints replaces the whole list (merge patch), so a step writes the node's list as it saw
it, with ours added or taken out; the write is conditional on the resourceVersion it saw, so nobody's
taint added meanwhile is lost. Ours is only a taint we added (its key in ANN_TAINT): one with the same key
that was there before us belongs to someone else and is never removed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "PreferNoSchedule"
    time_added: str = ""  # set by the API server for NoExecute taints only; written back unchanged

    @classmethod
    def parse(cls, body: Mapping[str, Any]) -> Taint:
        return cls(
            str(body.get("key", "")),
            str(body.get("value") or ""),
            str(body.get("effect", "")),
            str(body.get("timeAdded") or ""),
        )

    def to_api(self) -> dict[str, str]:
        out = {"key": self.key, "effect": self.effect}
        if self.value:
            out["value"] = self.value
        if self.time_added:
            out["timeAdded"] = self.time_added
        return out

    def __str__(self) -> str:
        return f"{self.key}{'=' + self.value if self.value else ''}:{self.effect}"


@dataclass(frozen=True)
class NodeTaints:
    """What a step needs to put our taint on or take it off: the node's taints as planned, the key we
    added (ANN_TAINT, "" when none) and since when the node waits for its cordon (ANN_TAINTED_SINCE)."""

    on_node: tuple[Taint, ...] = ()
    ours: str = ""
    since: datetime | None = None

    @property
    def marked(self) -> bool:
        return bool(self.ours) or self.since is not None

    def with_taint(self, taint: Taint) -> tuple[Taint, ...] | None:
        """The list with `taint` added; None when a taint with its key is already there (someone else's)."""
        if any(t.key == taint.key for t in self.on_node):
            return None
        return (*self.on_node, taint)

    def without_ours(self) -> tuple[Taint, ...] | None:
        """The list without the taint we added; None when there is nothing of ours to take off."""
        if not self.ours or not any(t.key == self.ours for t in self.on_node):
            return None
        return tuple(t for t in self.on_node if t.key != self.ours)


NO_TAINTS = NodeTaints()  # nothing of ours: the default of the actions that carry it


def taints_of(items: Sequence[Mapping[str, Any]] | None) -> tuple[Taint, ...]:
    return tuple(Taint.parse(item) for item in items or ())
