"""Liveness that means something: each long-running loop records a heartbeat when it makes progress, and
the probe fails when a loop has been silent for longer than its threshold.

A loop that is not running (no NodeConfig, so no rollout loop) has no heartbeat and is not judged; a
loop that ended on purpose forgets its heartbeat. Times are floats from an injected monotonic clock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Health:
    ok: bool
    stale: tuple[str, ...]  # loops past their threshold, with how long they have been silent
    message: str


def kind_of(loop: str) -> str:
    """'rollout/cluster' -> 'rollout': thresholds are per kind of loop, heartbeats per instance."""
    return loop.split("/", 1)[0]


def assess(beats: Mapping[str, float], thresholds: Mapping[str, float], now: float) -> Health:
    """Every loop whose kind has a threshold must have beaten within it."""
    stale = tuple(
        f"{loop} silent for {now - last:.0f}s (limit {limit:.0f}s)"
        for loop, last in sorted(beats.items())
        if (limit := thresholds.get(kind_of(loop))) is not None and now - last > limit
    )
    if stale:
        return Health(False, stale, "no progress: " + "; ".join(stale))
    return Health(True, (), "ok: " + (", ".join(sorted(beats)) or "no loops running"))


class Heartbeats:
    """Last progress per loop, written by the loops' threads and read by the probe handler."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def beat(self, loop: str) -> None:
        now = self.clock()
        with self._lock:
            self._last[loop] = now

    def forget(self, loop: str) -> None:
        with self._lock:
            self._last.pop(loop, None)

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            return dict(self._last)

    def health(self, thresholds: Mapping[str, float]) -> Health:
        return assess(self.snapshot(), thresholds, self.clock())
