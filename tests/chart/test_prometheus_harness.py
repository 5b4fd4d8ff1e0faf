"""eventedpleg_lab.prometheus, the means of the lab's alert test, without a cluster: the real Prometheus
(Debian's) over the chart's rules scrapes the operator's own /metrics endpoint (controller/metrics.py)
holding what an operator with a halted rollout and a Failed, cordoned node exports, and reports the
matching alerts firing with their runbook_url; the healthy NodeConfig beside it raises nothing. Likewise a
live agent's /metrics (agent/metrics.py, on a simulated host) fires the agents' alert after a rollback and
answers every query of the dashboard's Agents row.

The chart's `for:` values (degradedFor, failedCordonedFor) are set to 10s here, as a values override of
the chart, so the alerts fire within a minute instead of after 5 and 15."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from eventedpleg import __version__
from eventedpleg.agent import health
from eventedpleg.agent.agent import Agent, AgentSettings
from eventedpleg.agent.metrics import AgentMetrics
from eventedpleg.controller.metrics import OperatorMetrics
from eventedpleg.protocol import NodeState
from eventedpleg_lab import prometheus
from eventedpleg_lab.sim import profiles
from eventedpleg_lab.sim.clock import FakeClock
from eventedpleg_lab.sim.fakeapi import FakeApi
from eventedpleg_lab.sim.host import SimHost
from tests.agent.conftest import NAMESPACE as AGENT_SETTINGS_NS
from tests.agent.conftest import NODE, Rig
from tests.chart.chartlib import NAMESPACE, prometheus_binaries
from tests.dashboard import dashboard_exprs

# The chart's default: the runbooks of the installed version's tag.
RUNBOOKS = f"https://github.com/eventedpleg/evented-pleg-operator/blob/v{__version__}/docs/runbooks.md"
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


AGENT_NS = "evented-pleg-agent"


@pytest.fixture
def agent_rig(tmp_path: Path) -> Iterator[tuple[Rig, str]]:
    """A real agent on a simulated host whose kubelet will not start with Evented PLEG on, with its
    /metrics served on a free loopback port (agent.health, as on its node)."""
    clock = FakeClock()
    host = SimHost(tmp_path / "root", profiles.kubeadm_containerd(), clock)
    api = FakeApi()
    api.add_node(NODE, host.profile.kubelet_version, host.profile.runtime, ready=host.node_ready)
    metrics = AgentMetrics()
    agent = Agent(NODE, host, api, AgentSettings(namespace=AGENT_SETTINGS_NS), trace=[], metrics=metrics)
    host.faults.kubelet.fails_when_evented = True
    server = health.serve_metrics(metrics, 0, host="127.0.0.1")
    try:
        yield Rig(host, api, agent, clock), f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_real_prometheus_fires_the_agent_alert_and_answers_the_agent_panels(
    tmp_path: Path, agent_rig: tuple[Rig, str]
) -> None:
    """A live agent rolls an apply back: EventedPlegAgentFailures fires for its node and reason, and every
    query of the dashboard's Agents row answers from its series (the PodMonitor's labels: namespace, pod,
    node)."""
    prometheus_binaries()
    rig, endpoint = agent_rig
    groups = prometheus.chart_rules(NAMESPACE)
    target = prometheus.ScrapeTarget(endpoint, {"namespace": AGENT_NS, "pod": "agent-0", "node": NODE})
    with prometheus.running(tmp_path / "prom", [target], groups) as prom:
        prom.wait_scraped(timeout=60)  # every reason at 0 first: increase() then sees the rollback
        rig.apply()
        assert rig.state == NodeState.ROLLED_BACK
        firing = prom.wait_firing("EventedPlegAgentFailures", timeout=120)
        # A rate() needs two scrapes of a series the apply began: each query is asked until it answers.
        answers = {expr: _answer(prom, expr) for expr in dashboard_exprs(agents=True)}
    assert [a["labels"] for a in firing] == [
        {"alertname": "EventedPlegAgentFailures", "node": NODE, "reason": "RolledBack", "severity": "info"}
    ]
    assert firing[0]["annotations"]["runbook_url"] == f"{RUNBOOKS}#eventedplegagentfailures"
    assert firing[0]["annotations"]["summary"] == (
        f"Node {NODE}: its agent met failures (RolledBack) in the last hour"
    )
    assert len(answers) >= 7
    for expr, series in answers.items():
        assert series, f"no series for {expr}"
        assert all(s["metric"].get("node") == NODE for s in series if "node" in s["metric"]), expr
    # The node variable lists the agent's node.
    (variable,) = (series for expr, series in answers.items() if expr.startswith("label_values("))
    assert {s["metric"]["node"] for s in variable} == {NODE}


def _answer(prom: prometheus.Prometheus, expr: str, timeout: float = 60.0) -> list[dict[str, Any]]:
    """What Prometheus answers to `expr` once it answers with a series (else its last answer, empty)."""
    deadline = time.monotonic() + timeout
    while not (series := prom.query(_promql(expr))) and time.monotonic() < deadline:
        time.sleep(2)
    return series


def _promql(expr: str) -> str:
    """A dashboard expression as Prometheus' query API takes it: every node selected ($node's All), and a
    variable's label_values(SELECTOR, LABEL) as its SELECTOR (Grafana asks for the label's values)."""
    expr = expr.replace("$node", ".+")
    variable = re.fullmatch(r"label_values\((.*),\s*\w+\)", expr)
    return variable.group(1) if variable else expr


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
