"""The step runner's timer: deferred calls run in time order, all on one thread (not a thread each)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from eventedpleg.controller import wakeups
from eventedpleg.controller.wakeups import Later


def test_deferred_calls_run_in_time_order_on_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    # The clock stands still while the four are asked for, so their due times are exactly the delays
    # apart however long a loaded machine takes between two calls; then it runs on in real time.
    real, start, frozen = time.monotonic, time.monotonic(), threading.Event()
    frozen.set()
    clock = SimpleNamespace(monotonic=lambda: start if frozen.is_set() else real())
    monkeypatch.setattr(wakeups, "time", clock)
    later = Later("test-later")
    ran: list[tuple[str, str]] = []
    all_ran = threading.Event()

    def record(name: str) -> None:
        ran.append((name, threading.current_thread().name))
        if len(ran) == 4:
            all_ran.set()

    before = threading.active_count()
    for name, delay in (("c", 0.06), ("a", 0.0), ("b", 0.03), ("d", 0.06)):
        later.call(delay, lambda name=name: record(name))  # type: ignore[misc]
    frozen.clear()
    assert threading.active_count() <= before + 1  # four waits, one thread
    assert all_ran.wait(10)
    assert ran == [(name, "test-later") for name in "abcd"]  # "d" after "c": asked for later


def test_a_failing_call_does_not_stop_the_others() -> None:
    later = Later("test-later-2")
    done = threading.Event()

    def boom() -> None:
        raise RuntimeError("boom")

    later.call(0.0, boom)
    later.call(0.01, done.set)
    assert done.wait(10)
