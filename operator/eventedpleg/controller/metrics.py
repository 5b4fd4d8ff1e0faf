"""The operator's Prometheus metrics and its small HTTP endpoint (/metrics, /healthz, /readyz).

Served by our own thread rather than kopf's liveness endpoint because a standby replica (waiting for
the Lease) must answer probes too, before kopf runs. /healthz is `live()` (controller/probes.py: the
loops made progress recently); /readyz is `ready` (the node cache is synced, on leader and standby).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from http.server import ThreadingHTTPServer

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from eventedpleg import buildinfo, probeserver
from eventedpleg.core.rollout.planner import Summary
from eventedpleg.core.rollout.snapshot import NodeView
from eventedpleg.probeserver import TEXT, Reply
from eventedpleg.protocol import NodeState


class OperatorMetrics:
    """The operator's own /metrics (its registry and series); kubelet metrics: core.node.facts.promtext."""

    def __init__(self, live: Callable[[], tuple[bool, str]] = lambda: (True, "ok")) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.nodes = Gauge(
            "eventedpleg_nodes",
            "Nodes per NodeConfig by rollout bucket",
            ["nodeconfig", "bucket"],
            registry=r,
        )
        self.condition = Gauge(
            "eventedpleg_condition",
            "NodeConfig condition status (1 True, 0 False)",
            ["nodeconfig", "type"],
            registry=r,
        )
        self.steps = Histogram(
            "eventedpleg_step_seconds",
            "Time to carry out one rollout step against the API",
            ["action"],
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        self.reconcile = Histogram(
            "eventedpleg_reconcile_seconds",
            "Time for one plan-and-execute pass",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=r,
        )
        self.drain_retries = Counter(
            "eventedpleg_drain_retries_total",
            "Drain attempts that left pods behind",
            ["nodeconfig"],
            registry=r,
        )
        self.failures = Counter(
            "eventedpleg_node_failures_total",
            "Node steps that ended Failed or RolledBack",
            ["nodeconfig"],
            registry=r,
        )
        self.failed_cordoned = Gauge(
            "eventedpleg_failed_cordoned_nodes",
            "Nodes left Failed and still cordoned (their capacity is lost until someone acts)",
            ["nodeconfig"],
            registry=r,
        )
        self.conflicts = Counter(
            "eventedpleg_write_conflicts_total", "Steps dropped because the node changed (409)", registry=r
        )
        self.held_seconds = Gauge(
            "eventedpleg_held_node_seconds",
            "How long the longest-held node of a NodeConfig has been cordoned by it (at least: since its "
            "current state or since this replica first saw it cordoned, whichever is earlier); 0 when none",
            ["nodeconfig"],
            registry=r,
        )
        self.leader = Gauge("eventedpleg_leader", "1 when this replica holds the leader Lease", registry=r)
        buildinfo.register(r, "operator")
        self._held: dict[str, dict[str, datetime]] = {}  # nodeconfig -> node -> held since (lower bound)
        self.ready = threading.Event()
        self.live = live  # /healthz (controller/probes.py)

    def record_pass(self, nodeconfig: str, summary: Summary, conditions: dict[str, bool]) -> None:
        """A pass's gauges: the nodes by bucket, the conditions, the failed nodes still cordoned."""
        for bucket, value in summary.counts:  # every published counter (planner/tally.py), by name
            self.nodes.labels(nodeconfig, bucket).set(value)
        for kind, ok in conditions.items():
            self.condition.labels(nodeconfig, kind).set(1 if ok else 0)
        stuck = [n for n in summary.failures if n.state == NodeState.FAILED and n.unschedulable]
        self.failed_cordoned.labels(nodeconfig).set(len(stuck))

    def record_held(
        self,
        nodeconfig: str,
        views: Iterable[NodeView],
        changed: Mapping[str, NodeView | None] | None,
        now: datetime,
    ) -> None:
        """Track the nodes `nodeconfig` holds cordoned: from every view (`changed` None), else from the
        changed ones only (a pass stays proportional to what changed)."""
        held = self._held.setdefault(nodeconfig, {})
        if changed is None:
            changed = {view.name: view for view in views}
            for gone in set(held) - set(changed):
                del held[gone]
        for name, view in changed.items():
            if view is None or view.marks.owner != nodeconfig or not view.marks.cordoned_by_us:
                held.pop(name, None)
                continue
            since = min(held.get(name, now), view.marks.since or now)
            held[name] = since
        longest = max(((now - since).total_seconds() for since in held.values()), default=0.0)
        self.held_seconds.labels(nodeconfig).set(max(longest, 0.0))

    def forget(self, nodeconfig: str) -> None:
        """Drop every series of a deleted NodeConfig, so its alerts stop firing at once."""
        self._held.pop(nodeconfig, None)
        by_config = ("nodeconfig",)
        for metric, names in (
            (self.nodes, ("nodeconfig", "bucket")),
            (self.condition, ("nodeconfig", "type")),
            (self.drain_retries, by_config),
            (self.failures, by_config),
            (self.failed_cordoned, by_config),
            (self.held_seconds, by_config),
        ):
            for labels in _label_sets(metric, nodeconfig, names):
                with contextlib.suppress(KeyError):
                    metric.remove(*labels)

    def serve(self, port: int, host: str = "0.0.0.0") -> ThreadingHTTPServer:  # noqa: S104 - probes come from the kubelet
        def metrics() -> Reply:
            return 200, generate_latest(self.registry), CONTENT_TYPE_LATEST

        def healthz() -> Reply:
            ok, message = self.live()
            return 200 if ok else 503, message.encode(), TEXT

        def readyz() -> Reply:
            ok = self.ready.is_set()
            return 200 if ok else 503, b"ok" if ok else b"caches not synced", TEXT

        routes = {"/metrics": metrics, "/healthz": healthz, "/readyz": readyz}
        return probeserver.start(routes, port, host, thread="metrics")


def _label_sets(metric: Gauge | Counter, nodeconfig: str, names: tuple[str, ...]) -> set[tuple[str, ...]]:
    """The label values, in `names` order, of every series of `metric` for this NodeConfig."""
    return {
        tuple(sample.labels[n] for n in names)
        for family in metric.collect()
        for sample in family.samples
        if sample.labels.get("nodeconfig") == nodeconfig
    }
