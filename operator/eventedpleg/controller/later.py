"""Calls deferred by a delay, all on one thread in time order (a heap): a drain waiting for its next poll
costs an entry, not a thread of its own."""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

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
