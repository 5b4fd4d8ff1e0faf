"""docs/runbooks.md "Break glass", run as written against the real API server: the bash blocks are taken
from the page itself and run with bash and the real kubectl, over a NodeConfig and nodes left as a gone
operator leaves them. The finalizer's removal lets the NodeConfig go; giving a node back leaves it clean
(our cordon, taint, autoscaler keys, annotations and label gone; a cordon from before the rollout, the
user's autoscaler key, label, annotation and taint kept)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg_lab.kube.fakenodes import FakeNode
from eventedpleg_lab.localcluster.cluster import LocalCluster, kubectl_path

pytestmark = pytest.mark.cluster

RUNBOOKS = Path(__file__).resolve().parents[2] / "docs" / "runbooks.md"
OUR_TAINT = "example.com/rollout"  # a drain.taintBeforeCordon key
USERS_TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
KARPENTER, CLUSTER_AUTOSCALER = protocol.AUTOSCALER_ANNOTATIONS


def runbook_blocks(subsection: str) -> list[str]:
    """The ```bash blocks under `### subsection` of the runbooks' Break glass section, in order."""
    text = RUNBOOKS.read_text().split("## Break glass", 1)[1]
    part = text.split(f"### {subsection}\n", 1)[1].split("\n### ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", part, flags=re.DOTALL)
    assert blocks, subsection
    return blocks


def run(cluster: LocalCluster, script: str, **env: str) -> str:
    """The block with bash (errexit, pipefail), the real kubectl first on PATH, the cluster's kubeconfig."""
    path = f"{Path(kubectl_path()).parent}{os.pathsep}{os.environ['PATH']}"
    environ = {**os.environ, "PATH": path, "KUBECONFIG": str(cluster.kubeconfig), **env}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        check=False,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"{script}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def node(cluster: LocalCluster, name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(cluster.kubectl("get", "node", name, "-o", "json", check=True).stdout)
    return doc


@pytest.fixture
def prefix() -> str:
    return f"bg{uuid.uuid4().hex[:5]}"


def test_removing_the_finalizer_lets_a_nodeconfig_go(cluster: LocalCluster, crd: None, prefix: str) -> None:
    """With no operator, a deleted NodeConfig stays for ever behind our finalizer; the runbook's patch
    ends that."""
    name = f"{prefix}-gone"
    manifest = {
        "apiVersion": f"{protocol.GROUP}/{c.VERSION}",
        "kind": c.KIND,
        "metadata": {"name": name, "finalizers": [c.FINALIZER]},
        "spec": {"eventedPleg": True, "nodeSelector": {"matchLabels": {"breakglass": prefix}}},
    }
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(manifest), check=True)
    cluster.kubectl("delete", "nodeconfig", name, "--wait=false", check=True)
    (block,) = runbook_blocks("A NodeConfig stays in deletion")
    shown = run(cluster, block, NODECONFIG=name)
    assert c.FINALIZER in shown  # the first command shows what holds it
    gone = cluster.kubectl("get", "nodeconfig", name)
    assert gone.returncode != 0 and "NotFound" in gone.stderr, gone.stdout


@pytest.fixture
def left_nodes(cluster: LocalCluster, prefix: str) -> Iterator[tuple[str, str]]:
    """Two nodes as a gone operator leaves them: one it cordoned and tainted (Draining), one that was
    cordoned before the rollout (Failed); each with the user's own label, annotation and taint."""
    taken, kept = cluster.add_nodes(
        [
            FakeNode(f"{prefix}-{x}", labels={"breakglass": prefix}, taints=[USERS_TAINT])
            for x in ("taken", "kept")
        ]
    )
    marks = {
        protocol.ANN_OWNER: "cluster",
        protocol.ANN_STATE_SINCE: "2026-01-01T00:00:00+00:00",
        protocol.ANN_HOST_CHECK: "{}",
    }
    taken_patch = {
        "metadata": {
            "labels": {protocol.LABEL_STATE: "Draining"},
            "annotations": {
                **marks,
                protocol.ANN_STATE: "Draining",
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
            "taints": [USERS_TAINT, {"key": OUR_TAINT, "value": "x", "effect": "PreferNoSchedule"}],
        },
    }
    kept_patch = {
        "metadata": {
            "labels": {protocol.LABEL_STATE: "Failed"},
            "annotations": {
                **marks,
                protocol.ANN_STATE: "Failed",
                protocol.ANN_CORDONED_BY_US: "true",
                protocol.ANN_WAS_UNSCHEDULABLE: "true",
                protocol.ANN_CURRENT: "abc123",
                "example.com/users": "keep",
            },
        },
        "spec": {"unschedulable": True},
    }
    for name, patch in ((taken, taken_patch), (kept, kept_patch)):
        cluster.kubectl("patch", "node", name, "--type=merge", "-p", json.dumps(patch), check=True)
    try:
        yield taken, kept
    finally:
        cluster.delete_nodes([taken, kept])


def test_giving_nodes_back_leaves_them_clean(cluster: LocalCluster, left_nodes: tuple[str, str]) -> None:
    taken, kept = left_nodes
    cli, listing, give_back = runbook_blocks("Nodes left cordoned, tainted or marked")
    # The CLI's block is tested as the command itself (tests/cluster/test_release_nodes.py); here the
    # kubectl steps that stand in for it.
    assert [line.split()[:2] for line in cli.strip().splitlines()] == [["eventedpleg", "release-nodes"]] * 2
    rows = {line.split()[0]: line.split() for line in run(cluster, listing).splitlines()[1:]}
    assert rows[taken][1:] == ["Draining", "true", "<none>", OUR_TAINT, KARPENTER], rows[taken]
    assert rows[kept][1:4] == ["Failed", "true", "true"], rows[kept]
    for name in (taken, kept):
        run(cluster, give_back, NODE=name)
    for name, cordoned_before in ((taken, False), (kept, True)):
        after = node(cluster, name)
        meta, spec = after["metadata"], after["spec"]
        assert bool(spec.get("unschedulable")) is cordoned_before, name
        assert not [k for k in meta["annotations"] if k.startswith(f"{protocol.GROUP}/")], meta["annotations"]
        assert protocol.LABEL_STATE not in meta["labels"], meta["labels"]
        assert meta["labels"]["breakglass"] and meta["annotations"]["example.com/users"] == "keep"
        assert USERS_TAINT in spec["taints"]
        assert not [t for t in spec["taints"] if t["key"] == OUR_TAINT], spec["taints"]
    annotations = node(cluster, taken)["metadata"]["annotations"]
    assert KARPENTER not in annotations and annotations[CLUSTER_AUTOSCALER] == "true"
    shown = cluster.kubectl("get", "nodes", "-l", "breakglass", "-L", protocol.LABEL_STATE, check=True).stdout
    assert "Draining" not in shown and "Failed" not in shown, shown
