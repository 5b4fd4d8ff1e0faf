"""Kubernetes conventions a user's tools rely on, on the real API server with the operator running: what
kstatus (sigs.k8s.io/cli-utils, compiled into a small reader; Flux computes health with it), `kubectl wait`
and the README's Argo CD health script make of a NodeConfig from creation on, an invalid spec included;
node Events that `kubectl describe node` shows (it matches involvedObject.uid to the Node's uid or name)."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from eventedpleg import constants as c
from eventedpleg_lab.kube.fakenodes import FakeNode
from eventedpleg_lab.localcluster import build
from eventedpleg_lab.localcluster.cluster import LocalCluster
from tests.cluster.rollout_harness import ProtocolAgents, nodeconfig, operator_running, wait_for
from tests.cluster.workloads import guarded_deployment
from tests.unit.test_gitops_health import health

pytestmark = pytest.mark.cluster
NS = "evented-pleg-system"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def prefix(cluster: LocalCluster) -> Iterator[str]:
    cluster.apply_crd(path=REPO / "crds", name=c.CRD_NAME)
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
    # A pod no eviction may remove for now keeps `guarded` Draining until the timeout.
    workload = guarded_deployment(
        prefix, "web", replicas=1, node_selector={"kubernetes.io/hostname": guarded}, may_allow_later=True
    )
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(workload), check=True)
    wait_for(
        lambda: "Running" in cluster.kubectl("get", "pods", "-n", prefix, "--no-headers").stdout,
        what="web pod running",
    )
    wait_for(  # the standby counted: refused for now, not provably forever (else it is never cordoned)
        lambda: (
            '"expectedPods":2'
            in cluster.kubectl("get", "pdb", "-n", prefix, "web-pdb", "-o", "json").stdout.replace(" ", "")
        ),
        what="the PDB judged with its standby pod",
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


KStatus = Callable[[dict[str, Any]], tuple[str, str]]


@pytest.fixture(scope="module")
def kstatus() -> KStatus:
    """(status, message) as sigs.k8s.io/cli-utils/pkg/kstatus/status.Compute gives them."""
    binary = build.ensure_component(build.KSTATUS)["kstatus"]

    def compute(obj: dict[str, Any]) -> tuple[str, str]:
        out = subprocess.run(
            [str(binary)], input=json.dumps(obj), capture_output=True, text=True, check=True, timeout=60
        )
        result = json.loads(out.stdout)
        return str(result["status"]), str(result["message"])

    return compute


def get(cluster: LocalCluster, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(
        cluster.kubectl("get", "nodeconfig", name, "-o", "json", check=True).stdout
    )
    return obj


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    found = [cond for cond in obj["status"].get("conditions", []) if cond["type"] == kind]
    return found[0] if found else {}


def test_kstatus_kubectl_wait_and_argocd_read_a_nodeconfig_truthfully_from_creation(
    cluster: LocalCluster, prefix: str, tmp_path: Path, kstatus: KStatus
) -> None:
    cluster.add_nodes([FakeNode(name=f"{prefix}-0", labels={"rollout-test": prefix}, zone="z0")])
    spec = nodeconfig(prefix, prefix, rollout={"canary": {"nodes": 0}})
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(spec), check=True)
    wait = ("wait", f"nodeconfig/{prefix}")

    # No operator yet: the CRD's status default (observedGeneration 0) is behind generation 1.
    fresh = get(cluster, prefix)
    assert fresh["status"]["observedGeneration"] == 0
    assert kstatus(fresh) == ("InProgress", "NodeConfig generation is 1, but latest observed generation is 0")
    assert health(fresh) == ("Progressing", "the operator has not yet seen this generation")
    assert cluster.kubectl(*wait, "--for=condition=Ready", "--timeout=2s").returncode != 0

    with cluster.api() as api, operator_running(cluster, NS, tmp_path) as op:
        # No agent answers yet: the rollout cannot finish, and says so from its first write.
        wait_for(
            lambda: condition(get(cluster, prefix), "Reconciling").get("status") == "True", what="Reconciling"
        )
        rolling = get(cluster, prefix)
        assert rolling["status"]["observedGeneration"] == 1
        assert condition(rolling, "Reconciling")["observedGeneration"] == 1
        assert kstatus(rolling)[0] == "InProgress"
        assert health(rolling)[0] == "Progressing"

        with ProtocolAgents(api, prefix):
            done = cluster.kubectl(*wait, "--for=condition=Ready", "--timeout=90s")
            assert done.returncode == 0, (done.stderr, op.log()[-3000:])
        ready = get(cluster, prefix)
        assert kstatus(ready) == ("Current", "Resource is Ready")
        assert health(ready)[0] == "Healthy"

        # An alert pattern that is no regular expression: no CEL function can check that at admission,
        # so it is admitted and the operator must say so.
        patched = cluster.kubectl(
            "patch",
            "nodeconfig",
            prefix,
            "--type=merge",
            "-p",
            '{"spec":{"rollout":{"alertGate":{"alertNameRegexp":"("}}}}',
        )
        assert patched.returncode == 0, patched.stderr
        stalled = cluster.kubectl(*wait, "--for=condition=Stalled", "--timeout=60s")
        assert stalled.returncode == 0, (stalled.stderr, op.log()[-3000:])
        invalid = get(cluster, prefix)
    problem = condition(invalid, "Stalled")["message"]
    assert "spec.rollout.alertGate.alertNameRegexp" in problem and "\n" not in problem
    assert condition(invalid, "Stalled")["observedGeneration"] == invalid["metadata"]["generation"] == 2
    assert condition(invalid, "Ready")["status"] == "False"
    assert condition(invalid, "Reconciling")["status"] == "False"
    assert kstatus(invalid) == ("Failed", problem)
    assert health(invalid) == ("Degraded", problem)
