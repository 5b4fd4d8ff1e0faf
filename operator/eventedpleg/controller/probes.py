"""The operator's liveness: its loops' heartbeats (eventedpleg.core.health) against thresholds.

The rollout loop of each NodeConfig passes at least every IDLE_RECHECK seconds (30), and a pass is
bounded by the API request timeouts; the node informer makes progress at least once a watch (300 s,
the server ends it) even on a cluster where no Node changes. The thresholds leave room for both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from eventedpleg.core.health import Heartbeats

ROLLOUT = "rollout"
INFORMER = "node-informer"


@dataclass(frozen=True)
class Thresholds:
    rollout_seconds: float = 120.0
    informer_seconds: float = 420.0

    def by_kind(self) -> dict[str, float]:
        return {ROLLOUT: self.rollout_seconds, INFORMER: self.informer_seconds}


def liveness(beats: Heartbeats, thresholds: Thresholds) -> Callable[[], tuple[bool, str]]:
    limits = thresholds.by_kind()

    def live() -> tuple[bool, str]:
        health = beats.health(limits)
        return health.ok, health.message

    return live
