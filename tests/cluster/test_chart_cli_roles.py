"""The chart's aggregated ClusterRoles on a real API server with RBAC: a person bound only to Kubernetes' own
`view` ClusterRole runs `eventedpleg status` and is refused `eventedpleg approve`; one bound to `edit`
approves. Each runs the real CLI with a ServiceAccount token of its own (no impersonation)."""

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
from eventedpleg.cli.failures import EXIT_NONE, EXIT_OK, EXIT_PARTIAL
from eventedpleg_lab.kube.fakenodes import KWOK_TOLERATION, FakeNode
from eventedpleg_lab.localcluster.cluster import LocalCluster
from tests.chart.chartlib import CHART, REPO, helm, helm_env, set_json_args
from tests.cluster.rollout_harness import wait_for
from tests.cluster.test_chart_install import Release

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def release(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    suffix = uuid.uuid4().hex[:5]
    namespace, agent_ns, prefix = f"roles-{suffix}", f"roles-{suffix}-agent", f"roles-{suffix}"
    nodes = cluster.add_nodes([FakeNode(f"roles-{suffix}-a", labels={"roles-test": suffix})])
    env = helm_env(tmp_path_factory.mktemp("helm-home"))
    cluster.kubectl("apply", "--server-side", "-f", str(REPO / "crds"), check=True)
    values = {
        "crds": {"enabled": False, "keep": True},
        "nameOverride": prefix,
        "agent.namespace": agent_ns,
        "operator.replicas": 1,
        "operator.tolerations": [KWOK_TOLERATION],
        "operator.nodeSelector": {"roles-test": suffix},
    }
    name = f"epo-{suffix}"
    done = helm(
        "install", name, str(CHART), "-n", namespace, "--create-namespace",
        f"--kubeconfig={cluster.kubeconfig}", *set_json_args(values), env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    try:
        yield Release(cluster, name, namespace, agent_ns, prefix, nodes, env, done.stdout)
    finally:
        helm("uninstall", name, "-n", namespace, f"--kubeconfig={cluster.kubeconfig}", env=env)
        for ns in (namespace, agent_ns):
            cluster.kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=false")
        cluster.delete_nodes(nodes)


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
        "apiVersion": f"{c.GROUP}/{c.VERSION}",
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
    done = release.cluster.kubectl("auth", "can-i", verb, f"nodeconfigs.{c.GROUP}", kubeconfig=kubeconfig)
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
    assert c.ANN_APPROVED not in annotations
    assert not _can(release, viewer, "patch")


def test_edit_approves(release: Release, nodeconfig: str) -> None:
    editor = _person(release, "edit")
    wait_for(lambda: _can(release, editor, "patch"), what="edit aggregates the chart's edit role")
    node = release.nodes[0]
    approved = _cli(editor, "approve", node, "--nodeconfig", nodeconfig)
    assert approved.returncode == 0, approved.stderr
    assert f"node {node} approved for config h1 of NodeConfig {nodeconfig}" in approved.stdout
    annotations = release.get("nodeconfig", nodeconfig)["metadata"]["annotations"]
    assert json.loads(annotations[c.ANN_APPROVED]) == {node: "h1"}
