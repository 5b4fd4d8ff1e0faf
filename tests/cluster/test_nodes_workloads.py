"""kwok fake nodes on the real control plane: Ready with the nodeInfo we chose, Deployments scheduled onto
them, PodDisruptionBudgets computed by the controller-manager and enforced by the eviction API."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client import ApiException

from eventedpleg_lab.kube.fakenodes import FakeNode
from eventedpleg_lab.localcluster.cluster import LocalCluster, fake_nodes
from tests.cluster.workloads import guarded_deployment, kget

pytestmark = pytest.mark.cluster


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


@pytest.fixture(scope="module", autouse=True)
def cleanup(cluster: LocalCluster) -> Iterator[None]:
    """The cluster is shared with the operator's tests: leave no nodes or workloads behind."""
    yield
    cluster.kubectl("delete", "namespace", "workloads", "--ignore-not-found", "--wait=false", check=True)
    cluster.delete_nodes(["info-crio", "info-cp", "wl-0", "wl-1", "wl-2"])


def test_fake_nodes_are_ready_and_keep_our_node_info(cluster: LocalCluster) -> None:
    nodes = [
        FakeNode(
            "info-crio",
            kubelet_version="v1.32.7",
            container_runtime_version="cri-o://1.32.6",
            os_image="Red Hat Enterprise Linux CoreOS 9.6",
            zone="zone-b",
            labels={"pool": "info"},
            taints=[{"key": "dedicated", "value": "infra", "effect": "NoExecute"}],
        ),
        FakeNode(
            "info-cp",
            kubelet_version="v1.31.11",
            container_runtime_version="containerd://1.7.27",
            control_plane=True,
        ),
    ]
    # add_nodes returns once the nodes are Ready, and only kwok's node-initialize stage makes them Ready
    # (we create them without conditions): by now that stage has rewritten status.nodeInfo from its
    # template. Its next write is the heartbeat stage's, minutes later (stages/01-node-heartbeat-*.yaml).
    assert cluster.add_nodes(nodes) == ["info-crio", "info-cp"]

    crio = kget(cluster, "node", "info-crio")
    info = crio["status"]["nodeInfo"]
    assert info["kubeletVersion"] == "v1.32.7"
    assert info["containerRuntimeVersion"] == "cri-o://1.32.6"
    assert info["osImage"] == "Red Hat Enterprise Linux CoreOS 9.6"
    assert info["operatingSystem"] == "linux"
    assert crio["status"]["capacity"]["cpu"] == "32"
    assert crio["status"]["allocatable"]["pods"] == "110"
    assert {"type": "Hostname", "address": "info-crio"} in crio["status"]["addresses"]
    assert crio["metadata"]["labels"]["topology.kubernetes.io/zone"] == "zone-b"
    assert crio["metadata"]["labels"]["pool"] == "info"
    assert "node-role.kubernetes.io/control-plane" not in crio["metadata"]["labels"]
    taints = {(t["key"], t["effect"]) for t in crio["spec"]["taints"]}
    assert taints == {("dedicated", "NoExecute"), ("kwok.x-k8s.io/node", "NoSchedule")}
    ready = next(c for c in crio["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"

    cp = kget(cluster, "node", "info-cp")
    assert cp["status"]["nodeInfo"]["kubeletVersion"] == "v1.31.11"
    assert "node-role.kubernetes.io/control-plane" in cp["metadata"]["labels"]
    assert {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"} in cp["spec"]["taints"]
    table = cluster.kubectl("get", "node", "info-cp", "--no-headers", check=True).stdout.split()
    assert table[1:3] == ["Ready", "control-plane"]
    assert table[-1] == "v1.31.11"

    # kwok renews a Lease per node (heartbeat-with-lease), which keeps the node-lifecycle controller happy.
    lease = wait_for(
        "the node lease",
        lambda: cluster.kubectl("get", "lease", "-n", "kube-node-lease", "info-crio", "-o", "json").stdout,
    )
    spec = json.loads(lease)["spec"]
    assert spec["leaseDurationSeconds"] == 40
    assert spec["renewTime"]


def test_deployment_pods_run_and_pdb_blocks_eviction(cluster: LocalCluster) -> None:
    ns = "workloads"
    names = cluster.add_nodes(fake_nodes(3, prefix="wl", labels={"pool": "workloads"}))
    assert len(names) == 3
    manifests = guarded_deployment(ns, "web", replicas=3, node_selector={"pool": "workloads"})
    applied = cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(manifests))
    assert applied.returncode == 0, applied.stderr
    rolled = cluster.kubectl("rollout", "status", "-n", ns, "deployment/web", "--timeout=90s")
    assert rolled.returncode == 0, rolled.stderr

    pods = kget(cluster, "pods", "-n", ns)["items"]
    assert len(pods) == 3
    assert all(p["status"]["phase"] == "Running" for p in pods)
    assert {p["spec"]["nodeName"] for p in pods} <= set(names)
    assert all(p["status"]["podIP"].startswith("10.244.") for p in pods)

    def pdb_status(generation: int) -> dict[str, Any] | None:
        pdb = kget(cluster, "pdb", "-n", ns, "web-pdb")
        status: dict[str, Any] = pdb.get("status", {})
        fresh = status.get("observedGeneration") == generation and status.get("currentHealthy") == 3
        return status if fresh else None

    status = wait_for("the PDB status from kube-controller-manager", lambda: pdb_status(1))
    assert (status["expectedPods"], status["desiredHealthy"], status["disruptionsAllowed"]) == (3, 3, 0)

    core = client.CoreV1Api(cluster.api())
    victim = pods[0]["metadata"]["name"]
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=victim, namespace=ns))
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod_eviction(victim, ns, eviction)
    assert refused.value.status == 429
    assert "disruption budget" in str(refused.value.body)

    # Loosen the budget: the controller-manager recomputes disruptionsAllowed, and one eviction goes through.
    cluster.kubectl(
        "patch", "pdb", "-n", ns, "web-pdb", "--type=merge", "-p", '{"spec":{"minAvailable":2}}', check=True
    )
    status = wait_for("the PDB to allow one disruption", lambda: pdb_status(2))
    assert status["disruptionsAllowed"] == 1
    core.create_namespaced_pod_eviction(victim, ns, eviction)
    wait_for(
        "the evicted pod to go",
        lambda: victim not in {p["metadata"]["name"] for p in kget(cluster, "pods", "-n", ns)["items"]},
    )
