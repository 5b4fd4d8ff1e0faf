"""Drive many agents' steps from one thread on one clock (demo, benchmarks): no thread per node.

Each step is a `Work` generator that yields the seconds it wants to wait; the fleet keeps them in a heap by
wake-up time and resumes whichever is due. With a FakeClock, `run_until_idle` jumps the clock to the next
wake-up, so a thousand simulated nodes verifying "for 30 s" take 30 simulated seconds, not 30 000.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from eventedpleg.agent.agent import Work
from eventedpleg.core.host import Clock


@dataclass(order=True)
class _Entry:
    due: datetime
    seq: int
    key: str = field(compare=False)
    work: Work[Any] = field(compare=False)


class Fleet:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._heap: list[_Entry] = []
        self._seq = itertools.count()
        self._running: set[str] = set()
        self.finished: dict[str, Any] = {}  # key -> the step's return value

    def busy(self, key: str) -> bool:
        return key in self._running

    def submit(self, key: str, work: Work[Any]) -> bool:
        """Start a step for `key` unless one is already running for it (one step per node at a time)."""
        if key in self._running:
            work.close()
            return False
        self._running.add(key)
        heapq.heappush(self._heap, _Entry(self.clock.now(), next(self._seq), key, work))
        return True

    def run_due(self) -> datetime | None:
        """Resume every step that is due now; returns the next wake-up time, None when all are finished."""
        now = self.clock.now()
        while self._heap and self._heap[0].due <= now:
            entry = heapq.heappop(self._heap)
            try:
                wait = entry.work.send(None)
            except StopIteration as stop:
                self._running.discard(entry.key)
                self.finished[entry.key] = stop.value
                continue
            entry.due = now + timedelta(seconds=max(0.0, wait))
            entry.seq = next(self._seq)
            heapq.heappush(self._heap, entry)
        return self._heap[0].due if self._heap else None

    def run_until_idle(self) -> None:
        """Run everything to completion, sleeping on the clock between wake-ups."""
        while (due := self.run_due()) is not None:
            self.clock.sleep(max(0.0, (due - self.clock.now()).total_seconds()))
