"""`eventedpleg release-nodes` as the chart's cleanup.onUninstall hook runs it, on a real API server with
the chart's admission policies: nodes left as a halted rollout leaves them (cordoned and tainted by us,
annotated, labelled, one autoscaler key ours and one the user's) and a node the user cordoned themselves.

kwok marks a Job's pod Succeeded without running it, so the hook's own ServiceAccount, ClusterRole and
binding are created from `helm get hooks` and the Job's command runs here with that account's token. While
the release is installed the node-keys policy refuses it (the policy admits the operator's account alone);
after `helm uninstall` (its hooks left out, they are run by hand) the command waits for the agent pods to go,
rides out the policy cache, and leaves no eventedpleg.io key: our cordon undone, the user's kept."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg.cli.failures import EXIT_API, EXIT_OK, EXIT_USAGE
from eventedpleg_lab.kube.fakenodes import KWOK_TOLERATION, FakeNode
from eventedpleg_lab.localcluster.cluster import LocalCluster
from tests.chart.chartlib import parse
from tests.cluster.chartrelease import Release, install

pytestmark = pytest.mark.cluster

OUR_TAINT = "example.com/rollout"  # a drain.taintBeforeCordon key
USERS_TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
KARPENTER, CLUSTER_AUTOSCALER = protocol.AUTOSCALER_ANNOTATIONS


def _halted(state: str) -> dict[str, Any]:
    """What a halted rollout leaves on a node it cordoned and tainted."""
    return {
        "metadata": {
            "labels": {protocol.LABEL_STATE: state},
            "annotations": {
                protocol.ANN_OWNER: "cluster",
                protocol.ANN_STATE: state,
                protocol.ANN_STATE_SINCE: "2026-01-01T00:00:00+00:00",
                protocol.ANN_REASON: "halted: maxFailedNodes",
                protocol.ANN_HOST_CHECK: "{}",
                protocol.ANN_CORDONED_BY_US: "true",
                protocol.ANN_TAINT: OUR_TAINT,
                protocol.ANN_TAINTED_SINCE: "2026-01-01T00:00:00+00:00",
                protocol.ANN_AUTOSCALER_HOLD: KARPENTER,
                KARPENTER: "true",
                CLUSTER_AUTOSCALER: "true",  # the user's: not in autoscaler-hold
                "example.com/users": "keep",
            },
        },
        "spec": {
            "unschedulable": True,
            "taints": [USERS_TAINT, {"key": OUR_TAINT, "effect": "PreferNoSchedule"}],
        },
    }


USERS_CORDON = {
    "metadata": {
        "labels": {protocol.LABEL_STATE: "Skipped"},
        "annotations": {
            protocol.ANN_STATE: "Skipped",
            protocol.ANN_HOST_CHECK: "{}",
            protocol.ANN_OWNER: "cluster",
        },
    },
    "spec": {"unschedulable": True},
}


@pytest.fixture(scope="module")
def release(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    """The chart with cleanup.onUninstall, installed over nodes already marked (the node-keys policy,
    once installed, refuses our operator's keys to this test's admin account too)."""
    suffix = uuid.uuid4().hex[:5]
    nodes = cluster.add_nodes(
        [FakeNode(f"rn-{suffix}-{x}", labels={"rn-test": suffix}) for x in ("failed", "draining", "users")]
    )
    for name, patch in zip(nodes, (_halted("Failed"), _halted("Draining"), USERS_CORDON), strict=True):
        done = cluster.kubectl("patch", "node", name, "--type=merge", "-p", json.dumps(patch))
        assert done.returncode == 0, done.stderr
    values = {
        "agent.nodeSelector": {"rn-test": suffix},
        "operator.replicas": 1,
        "operator.tolerations": [KWOK_TOLERATION],
        "operator.nodeSelector": {"rn-test": suffix},
        "cleanup.onUninstall": True,
    }
    home = tmp_path_factory.mktemp("helm-home")
    try:
        with install(
            cluster, home, tag="rn", suffix=suffix, nodes=nodes, values=values, uninstall=("--no-hooks",)
        ) as rel:
            yield rel
    finally:
        for kind in ("clusterrolebinding", "clusterrole"):
            cluster.kubectl("delete", kind, f"rn-{suffix}-operator-cleanup", "--ignore-not-found")


def _hook(release: Release) -> tuple[Path, list[str]]:
    """The post-delete hook's account and rights created as helm creates them; its kubeconfig and the
    Job's command line."""
    hooks = parse(release.helm("get", "hooks", release.name, "-n", release.namespace))
    mine = [h for h in hooks if h["metadata"]["annotations"].get("helm.sh/hook") == "post-delete"]
    (job,) = [h for h in mine if h["kind"] == "Job"]
    for doc in mine:
        if doc["kind"] != "Job":
            release.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(doc))
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    account = pod["serviceAccountName"]
    kubeconfig = release.cluster.service_account_kubeconfig(release.namespace, account, create=False)
    return kubeconfig, [*container["command"], *container["args"]]


def _run(kubeconfig: Path, argv: list[str], *extra: str) -> subprocess.CompletedProcess[str]:
    assert argv[0] == "eventedpleg"
    command = [sys.executable, "-m", "eventedpleg", *argv[1:], *extra, f"--kubeconfig={kubeconfig}"]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


def _node(release: Release, name: str) -> dict[str, Any]:
    return release.get("node", name)


def test_release_nodes_gives_every_node_back_after_uninstall(release: Release) -> None:
    failed, draining, users = release.nodes
    kubeconfig, argv = _hook(release)
    assert argv[:2] == ["eventedpleg", "release-nodes"] and "--wait-for-agents" in argv

    # Without --force it refuses while a NodeConfig exists (with the person's rights: the hook's account
    # may not list NodeConfigs, and always runs with --force).
    nodeconfig = {
        "apiVersion": f"{protocol.GROUP}/{c.VERSION}",
        "kind": c.KIND,
        "metadata": {"name": f"{release.prefix}-left"},
        "spec": {"eventedPleg": True, "nodeSelector": {"matchLabels": {"rn-test": "no-node"}}},
    }
    release.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(nodeconfig))
    refused = _run(release.cluster.kubeconfig, ["eventedpleg", "release-nodes"])
    assert refused.returncode == EXIT_USAGE and f"{release.prefix}-left" in refused.stderr, refused.stderr
    release.kubectl("delete", "nodeconfig", f"{release.prefix}-left")

    # The dry run names what it would change and changes nothing.
    dry = _run(kubeconfig, argv, "--dry-run")
    assert dry.returncode == EXIT_OK, dry.stderr
    assert f"node {failed} (dry run): uncordon; remove taint {OUR_TAINT}" in dry.stdout
    assert f"node {users} (dry run): remove annotations" in dry.stdout
    assert _node(release, failed)["metadata"]["annotations"][protocol.ANN_CORDONED_BY_US] == "true"

    # While installed, the node-keys policy refuses the hook's account: it admits the operator alone, so
    # the cleanup relies on the policy being gone (uninstall deletes it before post-delete hooks run).
    while_installed = _run(
        kubeconfig,
        [a for a in argv if a != "--wait-for-agents" and a != release.agent_ns],
        "--retry-seconds=0",
    )
    assert while_installed.returncode == EXIT_API, while_installed.stdout + while_installed.stderr
    assert "only the eventedpleg operator may" in while_installed.stderr, while_installed.stderr

    release.helm("uninstall", release.name, "-n", release.namespace, "--no-hooks")
    done = _run(kubeconfig, argv)
    assert done.returncode == EXIT_OK, done.stdout + done.stderr
    assert not release.pods(release.agent_ns, "agent")  # it waited for the agents to go
    for name, cordoned in ((failed, False), (draining, False), (users, True)):
        after = _node(release, name)
        meta, spec = after["metadata"], after["spec"]
        assert bool(spec.get("unschedulable")) is cordoned, name
        assert not [k for k in meta.get("annotations", {}) if k.startswith(f"{protocol.GROUP}/")], meta
        assert not [k for k in meta["labels"] if k.startswith(f"{protocol.GROUP}/")], meta["labels"]
    for name in (failed, draining):
        after = _node(release, name)
        annotations, taints = after["metadata"]["annotations"], after["spec"]["taints"]
        assert KARPENTER not in annotations and annotations[CLUSTER_AUTOSCALER] == "true"
        assert annotations["example.com/users"] == "keep"
        assert USERS_TAINT in taints and not [t for t in taints if t["key"] == OUR_TAINT], taints
    # Run again: nothing of ours is left to change on these nodes.
    again = _run(kubeconfig, argv)
    assert again.returncode == EXIT_OK, again.stderr
    assert not [n for n in release.nodes if f"node {n}" in again.stdout], again.stdout
