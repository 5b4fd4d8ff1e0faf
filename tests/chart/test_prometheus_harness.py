"""eventedpleg_lab.prometheus, the means of the lab's alert test, without a cluster: the real Prometheus
(Debian's) over the chart's rules scrapes the operator's own /metrics endpoint (controller/metrics.py)
holding what an operator with a halted rollout and a Failed, cordoned node exports, and reports the
matching alerts firing with their runbook_url; the healthy NodeConfig beside it raises nothing.

The chart's `for:` values (degradedFor, failedCordonedFor) are set to 10s here, as a values override of
the chart, so the alerts fire within a minute instead of after 5 and 15."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest

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


FAKE_KUBECTL = """#!{python}
# kubectl as watching_operator calls it: `get pods` names two operator pods; `port-forward` serves the
# exposition file on the local port it is given (to the port named metrics). Each call is logged.
import http.server, json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_KUBECTL_LOG"], "a") as log:
    log.write(json.dumps({{"pid": os.getpid(), "args": args}}) + "\\n")
if "get" in args:
    print("epo-operator-0 epo-operator-1")
    sys.exit(0)
local, remote = args[-1].split(":")
if remote != "metrics":
    sys.exit(f"no port named {{remote}}")
body = open(os.environ["FAKE_EXPOSITION"], "rb").read()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(local)), Handler).serve_forever()
"""


def test_watching_operator_scrapes_each_operator_pod_through_port_forward(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lab's entry point with kubectl faked (no cluster here): one port-forward per Running operator
    pod to its port named metrics, each scraped with the labels namespace and pod, the chart's rules
    firing on them, every port-forward ended afterwards."""
    prometheus_binaries()
    metrics = OperatorMetrics()
    metrics.leader.set(1)
    metrics.failed_cordoned.labels("halted").set(2)
    (tmp_path / "exposition.txt").write_bytes(generate_latest(metrics.registry))
    kubectl = tmp_path / "kubectl"
    kubectl.write_text(FAKE_KUBECTL.format(python=sys.executable))
    kubectl.chmod(0o755)
    calls = tmp_path / "kubectl.log"
    monkeypatch.setenv("FAKE_KUBECTL_LOG", str(calls))
    monkeypatch.setenv("FAKE_EXPOSITION", str(tmp_path / "exposition.txt"))
    monkeypatch.setattr(prometheus, "kubectl_path", lambda: str(kubectl))
    kubeconfig = tmp_path / "kubeconfig"
    with prometheus.watching_operator(kubeconfig, "ops", tmp_path / "watch", values=FAST) as prom:
        cordoned = prom.wait_firing("EventedPlegNodeFailedAndCordoned", timeout=180)
        health = prom.targets_health()
    assert [a["labels"]["nodeconfig"] for a in cordoned] == ["halted"]
    assert cordoned[0]["annotations"]["summary"] == "NodeConfig halted: 2 node(s) Failed and still cordoned"
    assert len(health) == 2 and all(" up" in h for h in health), health
    logged = [json.loads(line) for line in calls.read_text().splitlines()]
    forwards = [c for c in logged if "port-forward" in c["args"]]
    assert sorted(c["args"][-2] for c in forwards) == ["pod/epo-operator-0", "pod/epo-operator-1"]
    for call in logged:
        assert call["args"][:3] == [f"--kubeconfig={kubeconfig}", "-n", "ops"], call
    for call in forwards:
        with pytest.raises(ProcessLookupError):
            os.kill(call["pid"], 0)  # ended (and reaped) when the block closed
