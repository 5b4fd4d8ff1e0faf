"""The agent's Prometheus metrics, served on its health port (agent.health) at /metrics: how long each phase
took, the failures it reported by reason, build_info and the process metrics (eventedpleg.buildinfo)."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

from eventedpleg import buildinfo
from eventedpleg.core import guardincidents
from eventedpleg.core.evidence import Evidence
from eventedpleg.protocol import NodeState

# Evidence results that mean the change did not hold (core.evidence.Evidence.result); any other failing
# report counts under its node state, so the label set stays small and known.
FAILING_RESULTS = ("fail", "rejected", "refused", "drift")
FAILING_STATES = (NodeState.FAILED, NodeState.ROLLED_BACK)
LOOP_ERROR = "loop_error"  # the agent's loop failed (an API outage, a bug) and retries after a pause


class AgentMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.phase_seconds = Histogram(
            "eventedpleg_agent_phase_seconds",
            "Time one agent phase took, by phase (apply includes the restarts and the verification window)",
            ["phase"],
            buckets=(0.05, 0.25, 1, 5, 15, 30, 60, 120, 300, 600, 1200),
            registry=self.registry,
        )
        self.failures = Counter(
            "eventedpleg_agent_failures_total",
            "Failures the agent reported or met, by reason: an evidence result (fail, rejected, refused, "
            "drift), a node state (Failed, RolledBack), or loop_error",
            ["reason"],
            registry=self.registry,
        )
        # Every reason from 0, so that an alert's increase() sees a node's first failure too (a series
        # that appears at 1 has no earlier sample to increase from).
        for reason in (*FAILING_RESULTS, *(state.value for state in FAILING_STATES), LOOP_ERROR):
            self.failures.labels(reason)
        # The guard (core.node.phases.guardphase); the alert on these is the guard's (prometheusrule).
        self.guard_incidents = Counter(
            "eventedpleg_agent_guard_incidents_total",
            "Incidents the guard met on a Done node, by kind (wedge: the kubelet stopped syncing pods; "
            "eventsLost: its event stream keeps failing without a fallback)",
            ["kind"],
            registry=self.registry,
        )
        for kind in guardincidents.Kind:
            self.guard_incidents.labels(kind.value)
        self.guard_heal_seconds = Histogram(
            "eventedpleg_agent_guard_heal_seconds",
            "Time from an incident's first sign to the kubelet proven syncing pods again after the guard's "
            "restart",
            buckets=(5, 10, 15, 20, 30, 45, 60, 90, 120, 300),
            registry=self.registry,
        )
        self.guard_rollbacks = Counter(
            "eventedpleg_agent_guard_rollbacks_total",
            "Nodes the guard took back to generic PLEG after too many incidents in its window",
            registry=self.registry,
        )
        buildinfo.register(self.registry, "agent")

    def phase(self, name: str, seconds: float) -> None:
        self.phase_seconds.labels(name).observe(max(seconds, 0.0))

    def reported(self, state: NodeState, evidence: Evidence | None) -> None:
        """Count a report of the agent's when it says the change failed."""
        result = evidence.result if evidence is not None else None
        if result in FAILING_RESULTS:
            self.failures.labels(result).inc()
        elif state in FAILING_STATES:
            self.failures.labels(state.value).inc()

    def guard(self, incident: str, heal_seconds: float | None, *, rolled_back: bool) -> None:
        if incident:
            self.guard_incidents.labels(incident).inc()
        if heal_seconds is not None:
            self.guard_heal_seconds.observe(max(heal_seconds, 0.0))
        if rolled_back:
            self.guard_rollbacks.inc()

    def loop_error(self) -> None:
        self.failures.labels(LOOP_ERROR).inc()

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
