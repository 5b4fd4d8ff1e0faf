"""A clock that moves only when told to, so agent tests and simulated hosts never wait in real time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

EPOCH = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


class FakeClock:
    """`sleep` advances the time instantly; share one instance between the agent and its simulated host."""

    def __init__(self, start: datetime = EPOCH) -> None:
        self._now = start

    def now(self) -> datetime:
        return self._now

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=max(0.0, seconds))
