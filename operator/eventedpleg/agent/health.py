"""The agent's health endpoint: GET /healthz answers 200 while its loop made progress recently (a pass,
a watch event, a retry after an API error, or a step waiting on purpose), 503 when it has been silent for
longer than the threshold (a hung call, a deadlock). The DaemonSet's liveness and readiness probes use it.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from eventedpleg.core.health import Heartbeats

LOOP = "agent"


def serve(beats: Heartbeats, stale_seconds: float, port: int, host: str = "0.0.0.0") -> ThreadingHTTPServer:  # noqa: S104 - the kubelet probes the node's address (hostNetwork)
    limits = {LOOP: stale_seconds}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if not self.path.startswith(("/healthz", "/readyz")):
                self._send(404, b"not found")
                return
            health = beats.health(limits)
            if LOOP not in beats.snapshot():
                self._send(503, b"starting: the loop has not run yet")
                return
            self._send(200 if health.ok else 503, health.message.encode())

        def _send(self, code: int, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            return  # probes every few seconds would flood the log

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    return server
