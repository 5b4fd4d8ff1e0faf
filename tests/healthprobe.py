"""What the /healthz tests share (the operator's and the agent's): a monotonic clock the test moves, a GET of
/healthz, and waiting for a condition."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any


class FakeMonotonic:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def healthz(port: int) -> tuple[int, str]:
    """Status code and body of GET /healthz on the loopback."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


def until(predicate: Callable[[], Any], what: str, timeout: float = 10.0) -> Any:
    """The predicate's first true value, polled every 20 ms; fails the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := predicate():
            return result
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")
