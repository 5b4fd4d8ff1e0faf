"""The agent's /healthz: 200 while its loop moves (passes, watch events, retries), 503 once the loop is
stuck in a call for longer than the threshold, 200 again when it moves; and every probe answered while slow
clients flood /metrics. The real runner and HTTP servers, on the loopback."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator

from eventedpleg import probeserver
from eventedpleg.agent import health, runner
from eventedpleg.agent.metrics import AgentMetrics
from eventedpleg.core.health import Heartbeats
from eventedpleg.core.node.blocks.nodeapi import AgentNode
from eventedpleg_lab.sim.fakeapi import FakeApi
from eventedpleg_lab.sim.profiles import PROFILES
from tests.agent.conftest import RigFactory
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


FLOOD = 120  # trickling sockets, as many as left 2 of 20 probes answered when probes and /metrics shared one
PROBES = 20
FLOOD_LIMIT = 60.0  # the flood stops by itself after this long, whatever happens


def _trickle(port: int, stop: threading.Event, cut: list[int]) -> None:
    """One slow client: a request header one byte every 0.2 s (never finished, never idle past the read
    timeout); when the server closes it (full, or its deadline), connect again. Until `stop`."""
    end = time.monotonic() + FLOOD_LIMIT
    while not stop.is_set() and time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
                conn.sendall(b"GET /metrics HTTP/1.1\r\nX-Slow: ")
                while not stop.wait(0.2) and time.monotonic() < end:
                    conn.sendall(b"a")
                    conn.settimeout(0.0)
                    try:
                        if conn.recv(1) == b"":
                            break  # closed by the server
                    except BlockingIOError:
                        pass  # still held
                    finally:
                        conn.settimeout(0.5)
        except OSError:
            pass  # refused, reset or timed out: try again
        cut[0] += 1
        stop.wait(0.05)


def _answered(url: str) -> bool:
    """A 200 within the kubelet's probe timeout (timeoutSeconds: 5 in the DaemonSet)."""
    with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=5) as response:
        return bool(response.status == 200)
    return False


def test_every_probe_is_answered_while_slow_clients_flood_metrics() -> None:
    """120 slow clients on /metrics fill its listener (a normal scrape is turned away), and all 20 probes
    of /healthz are answered all the same: the probes have a listener, a connection cap and timeouts of
    their own, with the product's defaults (eventedpleg.probeserver)."""
    clock = FakeMonotonic(10.0)
    beats = Heartbeats(clock)
    beats.beat(health.LOOP)
    probes = health.serve(beats, 180.0, 0)
    metrics = health.serve_metrics(AgentMetrics(), 0, host="127.0.0.1")
    probe_url = f"http://127.0.0.1:{probes.server_address[1]}/healthz"
    metrics_url = f"http://127.0.0.1:{metrics.server_address[1]}/metrics"
    assert _answered(probe_url) and _answered(metrics_url)
    stop, cut = threading.Event(), [0]
    clients = [
        threading.Thread(target=_trickle, args=(int(metrics.server_address[1]), stop, cut), daemon=True)
        for _ in range(FLOOD)
    ]
    for client in clients:
        client.start()
    try:
        until(lambda: not _answered(metrics_url), "the flood to fill the metrics listener", timeout=30)
        answered = scrapes = held = 0
        for _ in range(PROBES):  # over ~5 s, past the read timeout: the flood keeps its slots
            answered += _answered(probe_url)
            scrapes += _answered(metrics_url)
            held = max(held, sum("process_request_thread" in t.name for t in threading.enumerate()))
            stop.wait(0.25)
        print(
            f"\n{answered}/{PROBES} probes answered with {FLOOD} slow clients on /metrics; meanwhile "
            f"{scrapes}/{PROBES} scrapes answered, up to {held} connections served at once (cap "
            f"{probeserver.MAX_CONNECTIONS} a listener), slow clients reconnected {cut[0]} times"
        )
        assert answered == PROBES
    finally:
        stop.set()
        for client in clients:
            client.join(5)
        for server in (probes, metrics):
            server.shutdown()
            server.server_close()
