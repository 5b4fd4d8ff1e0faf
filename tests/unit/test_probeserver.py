"""The probe/metrics endpoint (eventedpleg.probeserver, the operator's and the agent's) against clients that
connect and send nothing or trickle (slowloris): idle connections are closed after the read timeout, a
trickling one at its deadline, the threads serving connections stay within the cap, and a normal request is
still answered. Bounds are generous: these assert what happens, not how fast."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest

from eventedpleg import probeserver
from eventedpleg.agent import health
from eventedpleg.agent.metrics import AgentMetrics
from eventedpleg.controller.metrics import OperatorMetrics
from eventedpleg.core.health import Heartbeats
from eventedpleg.probeserver import TEXT
from tests.healthprobe import healthz, until

ROUTES = {"/healthz": lambda: (200, b"ok", TEXT), "/big": lambda: (200, b"x" * 8_000_000, TEXT)}
GENEROUS = 60.0


@contextlib.contextmanager
def serving(**bounds: float) -> Iterator[ThreadingHTTPServer]:
    server = probeserver.start(ROUTES, 0, "127.0.0.1", thread="probe-test", **bounds)  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def port_of(server: ThreadingHTTPServer) -> int:
    return int(server.server_address[1])


def idle(server: ThreadingHTTPServer, count: int) -> list[socket.socket]:
    """`count` connections that send nothing; reads on them wait up to GENEROUS seconds."""
    return [socket.create_connection(("127.0.0.1", port_of(server)), timeout=GENEROUS) for _ in range(count)]


def closed_by_server(conn: socket.socket) -> bool:
    """True once the server closed its end (EOF or reset); raises if nothing happens within GENEROUS s."""
    try:
        return conn.recv(1) == b""
    except ConnectionResetError:
        return True


def serving_threads() -> int:
    return sum("process_request_thread" in t.name for t in threading.enumerate())


def test_idle_connections_are_closed_after_the_read_timeout() -> None:
    with serving(read_timeout=0.5, deadline=GENEROUS) as server:
        conns = idle(server, 3)
        try:
            assert all(closed_by_server(conn) for conn in conns)
        finally:
            for conn in conns:
                conn.close()


def test_a_trickling_connection_is_cut_at_its_deadline() -> None:
    """One byte every 0.2 s never trips a 30 s read timeout; the 1 s deadline closes it all the same."""
    with serving(read_timeout=30.0, deadline=1.0) as server:
        conn = socket.create_connection(("127.0.0.1", port_of(server)), timeout=GENEROUS)
        conn.settimeout(0.2)
        cut = False
        try:
            for byte in (b"GET /healthz HTTP/1.1\r\nX-Slow: " + b"a" * 500)[: int(GENEROUS / 0.2)]:
                try:
                    conn.send(bytes([byte]))
                    if conn.recv(1) == b"":
                        cut = True
                        break
                except TimeoutError:
                    continue  # nothing from the server yet: trickle on
                except (BrokenPipeError, ConnectionResetError):
                    cut = True
                    break
        finally:
            conn.close()
        assert cut, "a trickling client kept its connection past the deadline"


def test_idle_connections_below_the_cap_do_not_delay_a_request() -> None:
    """The read timeout is long here, so the answer cannot come from idle connections timing out."""
    with serving(read_timeout=GENEROUS, max_connections=4) as server:
        conns = idle(server, 3)
        try:
            assert healthz(port_of(server)) == (200, "ok")
        finally:
            for conn in conns:
                conn.close()


def test_a_slowloris_flood_cannot_exhaust_the_server() -> None:
    """Twenty idle connections against a cap of four: no more than four threads serve at once, the rest
    are closed at once, the idle ones go at the read timeout, and a normal request is answered."""
    cap = 4
    before = serving_threads()
    with serving(read_timeout=1.0, deadline=GENEROUS, max_connections=cap) as server:
        conns = idle(server, 20)
        try:
            time.sleep(0.3)  # let the server accept what it will
            assert serving_threads() - before <= cap

            def answered() -> bool:
                try:
                    return healthz(port_of(server)) == (200, "ok")
                except OSError:
                    return False  # closed while full: the idle ones have not timed out yet

            until(answered, "a normal request answered despite the idle connections", timeout=GENEROUS)
            assert all(closed_by_server(conn) for conn in conns)
        finally:
            for conn in conns:
                conn.close()


def test_a_client_that_leaves_mid_answer_prints_nothing_and_the_server_serves_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with serving() as server:
        for _ in range(5):
            conn = socket.create_connection(("127.0.0.1", port_of(server)), timeout=GENEROUS)
            conn.sendall(b"GET /big HTTP/1.0\r\n\r\n")
            conn.recv(1)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            conn.close()  # a reset while the server still writes its 8 MB answer
        assert healthz(port_of(server)) == (200, "ok")
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("server_of", ["agent", "agent-metrics", "operator"])
def test_the_agent_and_the_operator_serve_with_the_bounds(server_of: str) -> None:
    """Every endpoint comes from probeserver.start with its defaults: an idle connection is closed."""
    if server_of == "agent":
        server = health.serve(Heartbeats(time.monotonic), 60.0, 0)
        assert server.server_address[0] == "127.0.0.1"  # the agent's probes: the node's loopback only
    elif server_of == "agent-metrics":
        server = health.serve_metrics(AgentMetrics(), 0, host="127.0.0.1")
    else:
        server = OperatorMetrics().serve(0, host="127.0.0.1")
    try:
        assert getattr(server.RequestHandlerClass, "timeout", None) == probeserver.READ_TIMEOUT_SECONDS
        conn = socket.create_connection(("127.0.0.1", port_of(server)), timeout=GENEROUS)
        try:
            assert closed_by_server(conn)
        finally:
            conn.close()
    finally:
        server.shutdown()
        server.server_close()
