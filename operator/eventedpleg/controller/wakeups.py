"""The rollout loops' wake-ups: one asyncio.Event per NodeConfig's loop, set on the event loop, and one way
to set them all from another thread (the informers, the step pools) that costs the loop one callback per
burst."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field


@dataclass
class WakeUps:
    events: dict[str, asyncio.Event] = field(default_factory=dict)  # event-loop thread only
    loop: asyncio.AbstractEventLoop | None = None  # known once the first rollout loop runs
    pending: bool = False

    def register(self, name: str) -> asyncio.Event:
        """On the event loop: the event the rollout loop of `name` waits on."""
        self.loop = asyncio.get_running_loop()
        return self.events.setdefault(name, asyncio.Event())

    def forget(self, name: str) -> None:
        self.events.pop(name, None)

    def wake_all(self) -> None:
        """On the event loop."""
        for event in self.events.values():
            event.set()

    def wake_from_thread(self) -> None:
        """From any thread. One pending wake-up at a time: a burst of node events costs the loop one
        callback."""
        if self.loop is not None and not self.loop.is_closed() and not self.pending:
            self.pending = True
            self.loop.call_soon_threadsafe(self._woken)

    def _woken(self) -> None:
        self.pending = False
        self.wake_all()
