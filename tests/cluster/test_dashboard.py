"""The chart's Grafana dashboard asks only for metrics a live operator serves: the operator runs against the
real API server, rolls a NodeConfig out over two nodes (stand-in agents), and every metric name in the
dashboard's queries is checked against its /metrics."""

from __future__ import annotations

import json
import urllib.request
import uuid
from pathlib import Path

import pytest

from eventedpleg import constants as c
from eventedpleg_lab.kube.fakenodes import FakeNode
from eventedpleg_lab.localcluster.cluster import LocalCluster
from tests.cluster.rollout_harness import ProtocolAgents, nodeconfig, operator_running, wait_for
from tests.dashboard import dashboard_exprs, exported_names, metric_names

pytestmark = pytest.mark.cluster
NS = "evented-pleg-system"
REPO = Path(__file__).resolve().parents[2]


def scrape(port: int) -> str:
    """The operator's /metrics; "" while it is not listening yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            return str(response.read().decode())
    except OSError:
        return ""


def test_every_dashboard_metric_is_served_by_a_live_operator(cluster: LocalCluster, tmp_path: Path) -> None:
    prefix = f"dash{uuid.uuid4().hex[:5]}"
    nodes = [
        FakeNode(f"{prefix}-{i}", "v1.36.4", "containerd://2.2.9", labels={"rollout-test": prefix})
        for i in range(2)
    ]
    cluster.add_nodes(nodes)
    cluster.apply_crd(path=REPO / "crds", name=c.CRD_NAME)
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(nodeconfig(prefix, prefix)), check=True)
    try:
        with cluster.api() as api, operator_running(cluster, NS, tmp_path) as op, ProtocolAgents(api, prefix):
            wait_for(
                lambda: 'eventedpleg_step_seconds_count{action="Cordon"}' in scrape(op.port),
                what="a step measured",
            )
            text = scrape(op.port)
    finally:
        cluster.kubectl("delete", "nodeconfig", prefix, "--wait=false")
    used = set().union(*(metric_names(expr) for expr in dashboard_exprs()))
    served = exported_names(text)
    assert used, "no metric in the dashboard"
    assert used <= served, (
        f"the dashboard asks for metrics the operator does not serve: {sorted(used - served)}"
    )
    # The rollout's own series are there with their labels, not only declared.
    for sample in (
        f'eventedpleg_nodes{{bucket="total",nodeconfig="{prefix}"}}',
        "eventedpleg_build_info{",
        "process_cpu_seconds_total ",
    ):
        assert sample in text, sample
