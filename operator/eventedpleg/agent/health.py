"""The agent's endpoints: probes and metrics on two listeners, so that neither can starve the other.

GET /healthz (and /readyz) answers 200 while its loop made progress recently (a pass, a watch event, a retry
after an API error, or a step waiting on purpose), 503 when it has been silent for longer than the threshold
(a hung call, a deadlock). It listens on the node's loopback (the pod uses hostNetwork, and the kubelet
probes a hostNetwork pod from the node's own network namespace: `httpGet.host: 127.0.0.1`), so nothing off
the node reaches it. /metrics (agent.metrics) listens on its own port on the node's network for Prometheus:
each listener has its own connection cap and timeouts (eventedpleg.probeserver), so a flood of slow clients
on /metrics fills only the metrics listener's slots, never the probes'.
"""

from __future__ import annotations

from http.server import ThreadingHTTPServer

from eventedpleg import probeserver
from eventedpleg.agent.metrics import AgentMetrics
from eventedpleg.core.health import Heartbeats
from eventedpleg.probeserver import TEXT, Reply

LOOP = "agent"
PROBE_HOST = "127.0.0.1"  # the kubelet probes a hostNetwork pod from the node's network namespace
METRICS_HOST = "0.0.0.0"  # noqa: S104 - Prometheus scrapes the node's address (hostNetwork)


def serve(beats: Heartbeats, stale_seconds: float, port: int, host: str = PROBE_HOST) -> ThreadingHTTPServer:
    """/healthz and /readyz."""
    limits = {LOOP: stale_seconds}

    def health() -> Reply:
        if LOOP not in beats.snapshot():
            return 503, b"starting: the loop has not run yet", TEXT
        result = beats.health(limits)
        return 200 if result.ok else 503, result.message.encode(), TEXT

    # Shared: while the DaemonSet surges, the old and the new agent both listen on the node's port, and
    # either may answer the kubelet's probe; each is healthy while its loop (or its wait) moves.
    routes = {"/healthz": health, "/readyz": health}
    return probeserver.start(routes, port, host, thread="health", shared_port=True)


def serve_metrics(metrics: AgentMetrics, port: int, host: str = METRICS_HOST) -> ThreadingHTTPServer:
    """/metrics on a listener of its own (shared with a surging agent, as the probes' port is)."""
    routes = {"/metrics": lambda: (200, *metrics.exposition())}
    return probeserver.start(routes, port, host, thread="metrics", shared_port=True)
