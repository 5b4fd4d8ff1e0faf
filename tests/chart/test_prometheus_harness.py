"""eventedpleg_lab.prometheus, the means of the lab's alert test, without a cluster: the real Prometheus
(Debian's) over the chart's rules scrapes the operator's own /metrics endpoint (controller/metrics.py)
holding what an operator with a halted rollout and a Failed, cordoned node exports, and reports the
matching alerts firing with their runbook_url; the healthy NodeConfig beside it raises nothing.

The chart's `for:` values (degradedFor, failedCordonedFor) are set to 10s here, as a values override of
the chart, so the alerts fire within a minute instead of after 5 and 15."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from eventedpleg.controller.metrics import OperatorMetrics
from eventedpleg_lab import prometheus
from tests.chart.chartlib import NAMESPACE, prometheus_binaries

RUNBOOKS = "https://github.com/eventedpleg/evented-pleg-operator/blob/main/docs/runbooks.md"
FAST = {"prometheusRule.degradedFor": "10s", "prometheusRule.failedCordonedFor": "10s"}


@pytest.fixture
def operator_endpoint() -> Iterator[str]:
    """The operator's metrics server on a free loopback port: leader, NodeConfig `halted` Degraded and
    Stalled with one node Failed and cordoned, NodeConfig `fine` healthy."""
    metrics = OperatorMetrics()
    metrics.leader.set(1)
    for name, bad in (("halted", 1), ("fine", 0)):
        metrics.condition.labels(name, "Degraded").set(bad)
        metrics.condition.labels(name, "Stalled").set(bad)
        metrics.failed_cordoned.labels(name).set(bad)
        metrics.held_seconds.labels(name).set(0)
    server = metrics.serve(0, host="127.0.0.1")
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_real_prometheus_fires_the_charts_alerts_on_the_operators_metrics(
    tmp_path: Path, operator_endpoint: str
) -> None:
    prometheus_binaries()  # skips when Debian's package cannot be fetched
    groups = prometheus.chart_rules(NAMESPACE, FAST)
    target = prometheus.ScrapeTarget(operator_endpoint, {"namespace": NAMESPACE, "pod": "op-0"})
    with prometheus.running(tmp_path, [target], groups) as prom:
        cordoned = prom.wait_firing("EventedPlegNodeFailedAndCordoned", timeout=180)
        degraded = prom.wait_firing("EventedPlegRolloutDegraded", timeout=60)
        alerts = prom.alerts()
    assert [a["labels"] for a in cordoned] == [
        {"alertname": "EventedPlegNodeFailedAndCordoned", "nodeconfig": "halted", "severity": "warning"}
    ]
    assert cordoned[0]["annotations"]["runbook_url"] == f"{RUNBOOKS}#eventedplegnodefailedandcordoned"
    assert cordoned[0]["annotations"]["summary"] == "NodeConfig halted: 1 node(s) Failed and still cordoned"
    assert [a["labels"]["nodeconfig"] for a in degraded] == ["halted"]
    assert degraded[0]["annotations"]["runbook_url"] == f"{RUNBOOKS}#eventedplegrolloutdegraded"
    # Stalled keeps the chart's 15m: pending at most. Nothing about the healthy NodeConfig, no leader or
    # absence alert while the leader is scraped.
    states = {(a["labels"]["alertname"], a["labels"].get("nodeconfig"), a["state"]) for a in alerts}
    assert states <= {
        ("EventedPlegNodeFailedAndCordoned", "halted", "firing"),
        ("EventedPlegRolloutDegraded", "halted", "firing"),
        ("EventedPlegRolloutStalled", "halted", "pending"),
    }, alerts
