"""The agent's /healthz: 200 while its loop moves (passes, watch events, retries), 503 once the loop is
stuck in a call for longer than the threshold, 200 again when it moves. The real runner and HTTP server."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

from eventedpleg.agent import health, runner
from eventedpleg.core.health import Heartbeats
from eventedpleg.core.node.phases.nodeapi import AgentNode
from eventedpleg_lab.sim.profiles import PROFILES
from tests.agent.conftest import RigFactory
from tests.agent.fakeapi import FakeApi
from tests.healthprobe import FakeMonotonic, healthz, until


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


def test_agent_healthz_follows_its_loop(make_rig: RigFactory) -> None:
    rig = make_rig(PROFILES["kubeadm-containerd"])
    api = FreezableWatchApi()
    api.nodes = rig.api.nodes
    rig.agent.api = api
    clock = FakeMonotonic(50.0)
    beats = Heartbeats(clock)
    server = health.serve(beats, 180.0, 0, host="127.0.0.1")
    port = int(server.server_address[1])
    assert healthz(port) == (503, "starting: the loop has not run yet")
    stop = threading.Event()
    thread = threading.Thread(
        target=runner.run, args=(rig.agent,), kwargs={"stop": stop.is_set, "beats": beats}
    )
    thread.start()
    try:
        until(lambda: healthz(port)[0] == 200, "the first pass")
        clock.now += 1000  # time passes while the loop keeps moving: healthy again at once
        until(lambda: healthz(port)[0] == 200, "a pass after the jump")

        api.frozen.set()
        until(api.stuck.is_set, "the loop to hang in its watch")
        clock.now += 181
        code, body = healthz(port)
        assert code == 503
        assert "agent silent for 181s (limit 180s)" in body

        api.frozen.clear()
        until(lambda: healthz(port)[0] == 200, "recovery")
    finally:
        api.frozen.clear()
        stop.set()
        thread.join(10)
        server.shutdown()
