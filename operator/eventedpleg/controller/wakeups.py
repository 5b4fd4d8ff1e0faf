"""When the controller's work runs again: calls deferred by a delay, all on one thread in time order (a
heap: a drain waiting for its next poll costs an entry, not a thread of its own), and the rollout loops'
wake-ups (one asyncio.Event per NodeConfig's loop, set on the event loop, and one way to set them all from
another thread, the informers and the step pools, that costs the loop one callback per burst)."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


class Later:
    def __init__(self, name: str) -> None:
        self.name = name
        self._due: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()  # equal times run in the order they were asked for
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def call(self, delay: float, fn: Callable[[], None]) -> None:
        """Run `fn` on the timer's thread once `delay` seconds have passed."""
        with self._changed:
            heapq.heappush(self._due, (time.monotonic() + delay, next(self._order), fn))
            if self._thread is None:  # started on first use
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._changed.notify()

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._due or self._due[0][0] > time.monotonic():
                    self._changed.wait(self._due[0][0] - time.monotonic() if self._due else None)
                _, _, fn = heapq.heappop(self._due)
            try:
                fn()
            except Exception:  # one failing call must not stop the others
                log.exception("deferred call on %s", self.name)


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
