"""The small HTTP endpoint the kubelet probes (and Prometheus scrapes): GET by path prefix, answered from a
table of routes on a daemon thread. The operator serves /metrics, /healthz and /readyz with it, the agent
/healthz and /readyz.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TEXT = "text/plain"
# status code, body, Content-Type
Reply = tuple[int, bytes, str]


class _SharedPortServer(ThreadingHTTPServer):
    """Binds with SO_REUSEPORT, so a second process can listen on the same port (the agent's old and new
    pods on one node's network while the DaemonSet surges: agent.hostlock)."""

    def server_bind(self) -> None:
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        super().server_bind()


def start(
    routes: Mapping[str, Callable[[], Reply]],
    port: int,
    host: str,
    *,
    thread: str,
    shared_port: bool = False,
) -> ThreadingHTTPServer:
    """Serve GET requests whose path starts with a route's prefix (404 otherwise) until shut down."""

    class Handler(BaseHTTPRequestHandler):
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

    server = (_SharedPortServer if shared_port else ThreadingHTTPServer)((host, port), Handler)
    threading.Thread(target=server.serve_forever, name=thread, daemon=True).start()
    return server
