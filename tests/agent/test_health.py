"""The agent's /healthz: 200 while its loop moves (passes, watch events, retries), 503 once the loop is
stuck in a call for longer than the threshold, 200 again when it moves. The real runner and HTTP server."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

from eventedpleg.agent import health, runner
from eventedpleg.core.health import Heartbeats
from eventedpleg.core.nodeapi import AgentNode
from eventedpleg_lab.sim.profiles import PROFILES
from tests.agent.conftest import RigFactory
from tests.agent.fakeapi import FakeApi


class FreezableWatchApi(FakeApi):
    """A watch that ends after a short real wait (the server's timeoutSeconds), or hangs while frozen."""

    def __init__(self) -> None:
        super().__init__()
        self.frozen, self.stuck = threading.Event(), threading.Event()

    def watch_node(self, name: str, *, resource_version: str, timeout_seconds: int) -> Iterator[AgentNode]:
        while self.frozen.is_set():
            self.stuck.set()
            time.sleep(0.01)
        time.sleep(0.02)
        yield from ()


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def _status(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


def _until(predicate: Any, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_agent_healthz_follows_its_loop(make_rig: RigFactory) -> None:
    rig = make_rig(PROFILES["kubeadm-containerd"])
    api = FreezableWatchApi()
    api.nodes = rig.api.nodes
    rig.agent.api = api
    clock = FakeMonotonic()
    beats = Heartbeats(clock)
    server = health.serve(beats, 180.0, 0, host="127.0.0.1")
    port = int(server.server_address[1])
    assert _status(port) == (503, "starting: the loop has not run yet")
    stop = threading.Event()
    thread = threading.Thread(
        target=runner.run, args=(rig.agent,), kwargs={"stop": stop.is_set, "beats": beats}
    )
    thread.start()
    try:
        _until(lambda: _status(port)[0] == 200, "the first pass")
        clock.now += 1000  # time passes while the loop keeps moving: healthy again at once
        _until(lambda: _status(port)[0] == 200, "a pass after the jump")

        api.frozen.set()
        _until(api.stuck.is_set, "the loop to hang in its watch")
        clock.now += 181
        code, body = _status(port)
        assert code == 503
        assert "agent silent for 181s (limit 180s)" in body

        api.frozen.clear()
        _until(lambda: _status(port)[0] == 200, "recovery")
    finally:
        api.frozen.clear()
        stop.set()
        thread.join(10)
        server.shutdown()
