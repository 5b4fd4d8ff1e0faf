"""The chart's conventions for people on a real API server with RBAC: with the aggregated ClusterRoles, a
person bound only to Kubernetes' own `view` ClusterRole runs `eventedpleg status` and is refused
`eventedpleg approve`; one bound to `edit` approves (each runs the real CLI with a ServiceAccount token of
its own, no impersonation). `helm test`'s agent check, as rendered, run with the test's own ServiceAccount
and Roles against the real DaemonSet (kwok runs no container, so the pod itself cannot run here)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg.cli.failures import EXIT_NONE, EXIT_OK, EXIT_PARTIAL
from eventedpleg_lab.kube.fakenodes import KWOK_TOLERATION, FakeNode
from eventedpleg_lab.localcluster.cluster import LocalCluster
from tests.chart.chartlib import parse
from tests.cluster.chartrelease import Release, install
from tests.cluster.rollout_harness import wait_for

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def release(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    suffix = uuid.uuid4().hex[:5]
    nodes = cluster.add_nodes([FakeNode(f"roles-{suffix}-a", labels={"roles-test": suffix})])
    values = {
        "operator.replicas": 1,
        "operator.tolerations": [KWOK_TOLERATION],
        "operator.nodeSelector": {"roles-test": suffix},
    }
    home = tmp_path_factory.mktemp("helm-home")
    with install(cluster, home, tag="roles", suffix=suffix, nodes=nodes, values=values) as rel:
        yield rel


def _person(release: Release, role: str) -> Path:
    """A ServiceAccount bound cluster-wide to Kubernetes' own ClusterRole `role`, and nothing else."""
    account = f"{role}er"
    kubeconfig = release.cluster.service_account_kubeconfig(release.namespace, account)
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"{release.prefix}-{account}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": release.namespace}],
    }
    release.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(binding))
    return kubeconfig


@pytest.fixture(scope="module")
def nodeconfig(release: Release) -> Iterator[str]:
    """A NodeConfig with manual approval and a status as the operator would write it (none runs on kwok)."""
    name = f"{release.prefix}-manual"
    body = {
        "apiVersion": f"{protocol.GROUP}/{c.VERSION}",
        "kind": "NodeConfig",
        "metadata": {"name": name},
        "spec": {
            "eventedPleg": True,
            "nodeSelector": {"matchLabels": {"roles-test": "no-node"}},
            "rollout": {"approval": "Manual"},
        },
    }
    release.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(body))
    generation = release.get("nodeconfig", name)["metadata"]["generation"]
    ready = {
        "type": "Ready",
        "status": "True",
        "observedGeneration": generation,
        "reason": "RolloutComplete",
        "message": "no node selected",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    status = {"status": {"observedGeneration": generation, "renderedHash": "h1", "conditions": [ready]}}
    release.kubectl(
        "patch", "nodeconfig", name, "--subresource=status", "--type=merge", "-p", json.dumps(status)
    )
    try:
        yield name
    finally:
        release.kubectl("delete", "nodeconfig", name, "--ignore-not-found", "--wait=false")
        for account in ("viewer", "editer"):
            release.cluster.kubectl(
                "delete", "clusterrolebinding", f"{release.prefix}-{account}", "--ignore-not-found"
            )


def _cli(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "eventedpleg", *args, f"--kubeconfig={kubeconfig}"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def _can(release: Release, kubeconfig: Path, verb: str) -> bool:
    done = release.cluster.kubectl(
        "auth", "can-i", verb, f"nodeconfigs.{protocol.GROUP}", kubeconfig=kubeconfig
    )
    return done.stdout.strip() == "yes"


def test_view_runs_status_and_may_not_approve(release: Release, nodeconfig: str) -> None:
    viewer = _person(release, "view")
    # The aggregation controller folds <name>-view into `view` shortly after the install.
    wait_for(lambda: _can(release, viewer, "list"), what="view aggregates the chart's view role")
    status = _cli(viewer, "status", nodeconfig)
    assert status.returncode == EXIT_OK, status.stdout + status.stderr
    assert nodeconfig in status.stdout
    # preflight reads every Node, Pod, PodDisruptionBudget and NodeMaintenance: its verdicts (kwok nodes
    # run no runtime it knows), never a refusal.
    preflight = _cli(viewer, "preflight")
    assert preflight.returncode in {EXIT_OK, EXIT_PARTIAL, EXIT_NONE}, preflight.stdout + preflight.stderr
    assert "forbidden" not in preflight.stderr.lower()
    node = release.nodes[0]
    refused = _cli(viewer, "approve", node, "--nodeconfig", nodeconfig)
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused.stderr
    annotations = release.get("nodeconfig", nodeconfig)["metadata"].get("annotations", {})
    assert protocol.ANN_APPROVED not in annotations
    assert not _can(release, viewer, "patch")


def test_edit_approves(release: Release, nodeconfig: str) -> None:
    editor = _person(release, "edit")
    wait_for(lambda: _can(release, editor, "patch"), what="edit aggregates the chart's edit role")
    node = release.nodes[0]
    approved = _cli(editor, "approve", node, "--nodeconfig", nodeconfig)
    assert approved.returncode == 0, approved.stderr
    assert f"node {node} approved for config h1 of NodeConfig {nodeconfig}" in approved.stdout
    annotations = release.get("nodeconfig", nodeconfig)["metadata"]["annotations"]
    assert json.loads(annotations[protocol.ANN_APPROVED]) == {node: "h1"}


# --- helm test: every agent Ready ----------------------------------------------------------------------


def _helm_test_agent_check(release: Release, tmp: Path) -> subprocess.CompletedProcess[str]:
    """The test pod's script without its operator part (kwok pods have no address to ask /healthz on),
    run here with the test ServiceAccount's token, after the test's own ServiceAccount, Roles and
    RoleBindings are created as `helm test` creates them."""
    hooks = parse(release.helm("get", "hooks", release.name, "-n", release.namespace))
    tests = [h for h in hooks if h["metadata"]["annotations"].get("helm.sh/hook") == "test"]
    (pod,) = [h for h in tests if h["kind"] == "Pod"]
    for doc in tests:
        if doc["kind"] != "Pod":
            release.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(doc))
    (script,) = pod["spec"]["containers"][0]["args"]
    prelude, rest = script.split("try:\n", 1)
    agents = rest[rest.index("agents = ") :]
    account = pod["spec"]["serviceAccountName"]
    config = yaml.safe_load(
        release.cluster.service_account_kubeconfig(release.namespace, account, create=False).read_text()
    )
    (tmp / "token").write_text(config["users"][0]["user"]["token"])
    (tmp / "ca.crt").write_bytes(Path(release.cluster.pki.ca_crt).read_bytes())
    sa = "/var/run/secrets/kubernetes.io/serviceaccount"
    assert f'sa = "{sa}"' in prelude
    code = prelude.replace(f'sa = "{sa}"', f"sa = {str(tmp)!r}") + agents
    host, port = release.cluster.server.removeprefix("https://").rsplit(":", 1)
    env = {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port, "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False, env=env
    )


def test_helm_test_passes_only_with_every_agent_ready(release: Release, tmp_path: Path) -> None:
    ds = ["daemonset", "-n", release.agent_ns, release.agent]

    def all_ready() -> bool:
        status = release.get(*ds).get("status", {})
        desired, ready = int(status.get("desiredNumberScheduled", 0)), int(status.get("numberReady", 0))
        return 0 < desired == ready

    wait_for(all_ready, what="every agent Ready")
    desired = release.get(*ds)["status"]["desiredNumberScheduled"]
    passed = _helm_test_agent_check(release, tmp_path)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert f"ok: all {desired} agents of {release.agent_ns}/{release.agent} are Ready" in passed.stdout
    # An agent DaemonSet that runs on no node fails the test, saying where to look.
    patch = json.dumps({"spec": {"template": {"spec": {"nodeSelector": {"roles-test": "no-node"}}}}})
    release.kubectl("patch", *ds, "--type=merge", "-p", patch)
    wait_for(lambda: release.get(*ds).get("status", {}).get("desiredNumberScheduled") == 0, what="no agent")
    failed = _helm_test_agent_check(release, tmp_path)
    assert failed.returncode != 0
    assert f"FAIL: the agent DaemonSet {release.agent_ns}/{release.agent} runs on no node" in failed.stderr
