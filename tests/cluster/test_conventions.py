"""Kubernetes conventions a user's tools rely on, on the real API server with the operator running:
node Events that `kubectl describe node` shows (it matches involvedObject.uid to the Node's uid or name)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from eventedpleg import constants as c
from eventedpleg_lab.kube.fakenodes import FakeNode
from eventedpleg_lab.localcluster.cluster import LocalCluster
from tests.cluster.rollout_harness import ProtocolAgents, nodeconfig, operator_running, wait_for
from tests.cluster.workloads import guarded_deployment

pytestmark = pytest.mark.cluster
NS = "evented-pleg-system"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def prefix(cluster: LocalCluster) -> Iterator[str]:
    cluster.kubectl("apply", "-f", str(REPO / "crds"), check=True)
    cluster.kubectl("wait", "--for=condition=Established", f"crd/{c.CRD_NAME}", "--timeout=60s", check=True)
    name = f"v{uuid.uuid4().hex[:5]}"
    yield name
    cluster.kubectl("patch", "nodeconfig", name, "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
    cluster.kubectl("delete", "nodeconfig", name, "--ignore-not-found", "--wait=false")
    cluster.kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=false")


def node_events(cluster: LocalCluster, node: str) -> str:
    """The Events section of `kubectl describe node`."""
    described = cluster.kubectl("describe", "node", node, check=True).stdout
    return described.split("\nEvents:", 1)[1] if "\nEvents:" in described else ""


def test_kubectl_describe_node_shows_the_operators_node_events(
    cluster: LocalCluster, prefix: str, tmp_path: Path
) -> None:
    empty, guarded = cluster.add_nodes(
        FakeNode(name=f"{prefix}-{i}", labels={"rollout-test": prefix}, zone="z0") for i in range(2)
    )
    # A pod no eviction may remove (minAvailable = replicas) keeps `guarded` Draining until the timeout.
    workload = guarded_deployment(
        prefix, "web", replicas=1, node_selector={"kubernetes.io/hostname": guarded}
    )
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(workload), check=True)
    wait_for(
        lambda: "Running" in cluster.kubectl("get", "pods", "-n", prefix, "--no-headers").stdout,
        what="web pod running",
    )
    spec = nodeconfig(
        prefix,
        prefix,
        rollout={"maxUnavailable": 2, "canary": {"nodes": 0}},
        drain={"timeoutSeconds": 5, "onTimeout": "Skip"},
    )
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(spec), check=True)
    with (
        cluster.api() as api,
        operator_running(cluster, NS, tmp_path) as op,
        ProtocolAgents(api, prefix),
    ):
        wait_for(lambda: "Uncordoned" in node_events(cluster, empty), what=f"Uncordoned on {empty}")
        wait_for(lambda: "DrainTimeout" in node_events(cluster, guarded), what=f"DrainTimeout on {guarded}")
        log = op.log()
    for node, reasons in ((empty, ["Uncordoned"]), (guarded, ["Draining", "DrainTimeout"])):
        events = node_events(cluster, node)
        for reason in reasons:
            line = next((row for row in events.splitlines() if f" {reason} " in row), "")
            assert "eventedpleg" in line, (node, reason, events, log[-2000:])
    uid = json.loads(cluster.kubectl("get", "node", guarded, "-o", "json", check=True).stdout)["metadata"][
        "uid"
    ]
    listed = cluster.kubectl(
        "get",
        "events",
        "-A",
        "--field-selector",
        f"involvedObject.uid={uid},reason=DrainTimeout",
        "-o",
        "name",
    )
    assert listed.stdout.strip(), listed.stderr
