"""Call a function every so often in a thread of its own while a block runs."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def every(seconds: float, call: Callable[[], None]) -> Iterator[None]:
    """`call()` every `seconds` while the block runs; never again once it is left."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(seconds):
            call()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
