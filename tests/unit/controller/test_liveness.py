"""Liveness that means something: the check over heartbeats, and the operator's /healthz turning 503 while
its rollout loop is stuck and 200 again once it moves (the real rollout loop and the real HTTP server)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any, cast

import pytest

from eventedpleg.controller.engine import RolloutEngine
from eventedpleg.controller.metrics import OperatorMetrics
from eventedpleg.controller.probes import Thresholds, liveness
from eventedpleg.controller.wiring import build_engine
from eventedpleg.core.health import Heartbeats, assess
from tests.healthprobe import FakeMonotonic, healthz, until

LIMITS = {"rollout": 120.0, "node-informer": 420.0}


@pytest.mark.parametrize(
    ("case", "beats", "now", "ok", "stale"),
    [
        ("nothing running", {}, 1000.0, True, ()),
        ("fresh", {"rollout/a": 990.0, "node-informer": 700.0}, 1000.0, True, ()),
        ("at the limit", {"rollout/a": 880.0}, 1000.0, True, ()),
        ("rollout stuck", {"rollout/a": 879.0, "rollout/b": 999.0}, 1000.0, False, ("rollout/a",)),
        ("informer stuck", {"rollout/a": 999.0, "node-informer": 500.0}, 1000.0, False, ("node-informer",)),
        ("both", {"rollout/a": 0.0, "node-informer": 0.0}, 1000.0, False, ("node-informer", "rollout/a")),
        ("unknown kind is not judged", {"other": 0.0}, 1000.0, True, ()),
    ],
)  # fmt: skip
def test_assess(case: str, beats: dict[str, float], now: float, ok: bool, stale: tuple[str, ...]) -> None:
    health = assess(beats, LIMITS, now)
    assert health.ok is ok, case
    assert tuple(entry.split(" ")[0] for entry in health.stale) == stale, case
    if not ok:
        assert "no progress" in health.message


class Stopped:
    def __init__(self) -> None:
        self.flag = threading.Event()

    def __bool__(self) -> bool:
        return self.flag.is_set()


@pytest.fixture
def operator_probe() -> Iterator[tuple[RolloutEngine, FakeMonotonic, int, threading.Event, threading.Event]]:
    clock = FakeMonotonic(1000.0)
    beats = Heartbeats(clock)
    metrics = OperatorMetrics(live=liveness(beats, Thresholds(rollout_seconds=120, informer_seconds=420)))
    server = metrics.serve(0, host="127.0.0.1")
    engine = build_engine(None, "ns", cast(Any, None), metrics, beats=beats)
    engine.nodes_synced.set()
    frozen, stuck = threading.Event(), threading.Event()

    def reconcile_once(inputs: object) -> float:
        while frozen.is_set():  # a pass that never returns (a hang without a timeout)
            stuck.set()
            time.sleep(0.01)
        return 0.05

    engine.reconciler.reconcile_once = reconcile_once  # type: ignore[method-assign]
    stopped = Stopped()
    thread = threading.Thread(target=asyncio.run, args=(engine.run_rollout("cluster", stopped),))
    thread.start()
    try:
        yield engine, clock, int(server.server_address[1]), frozen, stuck
    finally:
        frozen.clear()
        stopped.flag.set()
        thread.join(10)
        server.shutdown()
        engine.steps.pool.shutdown()
        engine.steps.giveback_pool.shutdown()


def test_operator_healthz_fails_while_the_rollout_loop_is_stuck_and_recovers(
    operator_probe: tuple[RolloutEngine, FakeMonotonic, int, threading.Event, threading.Event],
) -> None:
    engine, clock, port, frozen, stuck = operator_probe
    beats = engine.beats
    assert beats is not None
    until(lambda: "rollout/cluster" in beats.snapshot(), "the first pass")
    assert healthz(port)[0] == 200

    # Time passes while the loop keeps passing: still healthy.
    clock.now += 300
    until(lambda: healthz(port)[0] == 200, "a pass after the jump")

    frozen.set()
    until(stuck.is_set, "the loop to be stuck in a pass")
    assert healthz(port)[0] == 200  # within the threshold
    clock.now += 121
    code, body = healthz(port)
    assert code == 503
    assert "rollout/cluster silent for 121s" in body

    frozen.clear()
    until(lambda: healthz(port)[0] == 200, "recovery once the loop moves again")
