"""The small HTTP endpoint the kubelet probes (and Prometheus scrapes): GET by path prefix, answered from a
table of routes on a daemon thread. The operator serves /metrics, /healthz and /readyz with it, the agent
/healthz and /readyz.

Bounded against clients that connect and then send nothing or trickle (slowloris): every read times out
(the standard library's StreamRequestHandler.timeout), a connection gets a whole deadline however slowly it
trickles, and at most `max_connections` are served at once (one thread each); one more is closed at once.
The standard library's servers have no connection cap or per-connection deadline, and prometheus_client's
start_http_server is the same ThreadingHTTPServer without either, so both are the few lines below.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TEXT = "text/plain"
# status code, body, Content-Type
Reply = tuple[int, bytes, str]

READ_TIMEOUT_SECONDS = 5.0  # one read; a probe or a scrape sends its request at once
DEADLINE_SECONDS = 15.0  # a whole connection (the operator's /metrics answer included)
MAX_CONNECTIONS = 32  # the kubelet's probes and a few scrapers need a handful


class _BoundedServer(ThreadingHTTPServer):
    """ThreadingHTTPServer with a cap on connections served at once; binds with SO_REUSEPORT when
    `shared_port`, so a second process can listen on the same port (the agent's old and new pods on one
    node's network while the DaemonSet surges: agent.hostlock)."""

    def __init__(self, address: tuple[str, int], handler: Any, *, max_connections: int, shared_port: bool):
        self._slots = threading.BoundedSemaphore(max_connections)
        self._shared_port = shared_port
        super().__init__(address, handler)

    def server_bind(self) -> None:
        if self._shared_port:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        super().server_bind()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # full: closed now, no thread; the client may try again
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # the client went away or was cut off: not the server's fault, no traceback on stderr
        super().handle_error(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def start(
    routes: Mapping[str, Callable[[], Reply]],
    port: int,
    host: str,
    *,
    thread: str,
    shared_port: bool = False,
    read_timeout: float = READ_TIMEOUT_SECONDS,
    deadline: float = DEADLINE_SECONDS,
    max_connections: int = MAX_CONNECTIONS,
) -> ThreadingHTTPServer:
    """Serve GET requests whose path starts with a route's prefix (404 otherwise) until shut down."""

    class Handler(BaseHTTPRequestHandler):
        timeout = read_timeout  # StreamRequestHandler sets it on the socket: a read that waits longer fails

        def setup(self) -> None:
            super().setup()
            # A client trickling a byte per read never trips the read timeout: cut it at the deadline.
            self._cut = threading.Timer(deadline, self._close)
            self._cut.daemon = True
            self._cut.start()

        def _close(self) -> None:
            with contextlib.suppress(OSError):  # already closed
                self.connection.shutdown(socket.SHUT_RDWR)

        def finish(self) -> None:
            self._cut.cancel()
            super().finish()

        def do_GET(self) -> None:
            answer = next((reply for prefix, reply in routes.items() if self.path.startswith(prefix)), None)
            code, body, kind = answer() if answer else (404, b"not found", TEXT)
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            return  # probes every few seconds would flood the log

    server = _BoundedServer((host, port), Handler, max_connections=max_connections, shared_port=shared_port)
    threading.Thread(target=server.serve_forever, name=thread, daemon=True).start()
    return server
