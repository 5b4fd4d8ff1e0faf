"""The agent's health endpoint, and its /metrics (agent.metrics). GET /healthz answers 200 while its loop
made progress recently (a pass, a watch event, a retry after an API error, or a step waiting on purpose),
503 when it has been silent for longer than the threshold (a hung call, a deadlock). The DaemonSet's
liveness and readiness probes use it.
"""

from __future__ import annotations

from http.server import ThreadingHTTPServer

from eventedpleg import probeserver
from eventedpleg.agent.metrics import AgentMetrics
from eventedpleg.core.health import Heartbeats
from eventedpleg.probeserver import TEXT, Reply

LOOP = "agent"


def serve(
    beats: Heartbeats,
    stale_seconds: float,
    port: int,
    host: str = "0.0.0.0",  # noqa: S104 - the kubelet probes the node's address (hostNetwork)
    metrics: AgentMetrics | None = None,
) -> ThreadingHTTPServer:
    """/healthz and /readyz; /metrics too when `metrics` is given."""
    limits = {LOOP: stale_seconds}

    def health() -> Reply:
        if LOOP not in beats.snapshot():
            return 503, b"starting: the loop has not run yet", TEXT
        result = beats.health(limits)
        return 200 if result.ok else 503, result.message.encode(), TEXT

    # Shared: while the DaemonSet surges, the old and the new agent both listen on the node's port, and
    # either may answer the kubelet's probe; each is healthy while its loop (or its wait) moves.
    routes = {"/healthz": health, "/readyz": health}
    if metrics is not None:
        routes["/metrics"] = lambda: (200, *metrics.exposition())
    return probeserver.start(routes, port, host, thread="health", shared_port=True)
