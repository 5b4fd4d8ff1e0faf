"""ServiceAccount-token kubeconfigs are subject to RBAC, and pod-bound tokens carry the pod's node."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from eventedpleg_lab.kube.fakenodes import KWOK_TOLERATION, FakeNode
from eventedpleg_lab.localcluster.cluster import LocalCluster

pytestmark = pytest.mark.cluster

NS = "rbac-test"


def apply(cluster: LocalCluster, *docs: dict[str, Any]) -> None:
    result = cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    assert result.returncode == 0, result.stderr


def whoami(cluster: LocalCluster, kubeconfig: Any) -> dict[str, Any]:
    out = cluster.kubectl("auth", "whoami", "-o", "json", kubeconfig=kubeconfig, check=True)
    info: dict[str, Any] = json.loads(out.stdout)["status"]["userInfo"]
    return info


@pytest.fixture(scope="module", autouse=True)
def cleanup(cluster: LocalCluster) -> Iterator[None]:
    """The cluster is shared with the operator's tests: leave no nodes or namespaces behind."""
    yield
    cluster.kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=false", check=True)
    cluster.delete_nodes(["bound-node"])


def test_service_account_token_is_subject_to_rbac(cluster: LocalCluster) -> None:
    kubeconfig = cluster.service_account_kubeconfig(NS, "reader")
    assert whoami(cluster, kubeconfig)["username"] == f"system:serviceaccount:{NS}:reader"

    # No RoleBinding yet: even listing pods is forbidden.
    denied = cluster.kubectl("get", "pods", "-n", NS, kubeconfig=kubeconfig)
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr.lower()

    apply(
        cluster,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "pod-reader", "namespace": NS},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "pod-reader", "namespace": NS},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": NS}],
        },
    )
    allowed = cluster.kubectl("get", "pods", "-n", NS, kubeconfig=kubeconfig)
    assert allowed.returncode == 0, allowed.stderr

    # The raw status code, through the API rather than kubectl's wording.
    secrets = cluster.kubectl("get", "--raw", f"/api/v1/namespaces/{NS}/secrets", kubeconfig=kubeconfig)
    assert secrets.returncode != 0
    assert "(Forbidden)" in secrets.stderr or "403" in secrets.stderr
    for verb, resource in (("list", "secrets"), ("delete", "pods"), ("list", "nodes")):
        can = cluster.kubectl("auth", "can-i", verb, resource, "-n", NS, kubeconfig=kubeconfig)
        assert can.stdout.strip() == "no", (verb, resource)
    assert (
        cluster.kubectl("auth", "can-i", "list", "pods", "-n", NS, kubeconfig=kubeconfig).stdout.strip()
        == "yes"
    )


def test_pod_bound_token_carries_the_node_name(cluster: LocalCluster) -> None:
    cluster.add_nodes([FakeNode("bound-node", labels={"pool": "bound"})])
    cluster.service_account_kubeconfig(NS, "agent")  # creates the ServiceAccount
    apply(
        cluster,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "agent-on-bound-node", "namespace": NS},
            "spec": {
                "serviceAccountName": "agent",
                "nodeSelector": {"pool": "bound"},
                "tolerations": [KWOK_TOLERATION],
                "containers": [{"name": "agent", "image": "registry.invalid/agent:1"}],
            },
        },
    )
    deadline = time.monotonic() + 60
    while not cluster.kubectl(
        "get", "pod", "-n", NS, "agent-on-bound-node", "-o", "jsonpath={.spec.nodeName}"
    ).stdout:
        assert time.monotonic() < deadline, "the scheduler did not place the pod"
        time.sleep(0.2)

    kubeconfig = cluster.service_account_kubeconfig(NS, "agent", bound_pod="agent-on-bound-node")
    info = whoami(cluster, kubeconfig)
    assert info["username"] == f"system:serviceaccount:{NS}:agent"
    assert info["extra"]["authentication.kubernetes.io/node-name"] == ["bound-node"]
    assert info["extra"]["authentication.kubernetes.io/pod-name"] == ["agent-on-bound-node"]

    # The token dies with its pod (the apiserver's check may lag its pod cache by a moment).
    cluster.kubectl(
        "delete", "pod", "-n", NS, "agent-on-bound-node", "--wait=true", "--timeout=60s", check=True
    )
    deadline = time.monotonic() + 30
    while (gone := cluster.kubectl("auth", "whoami", kubeconfig=kubeconfig)).returncode == 0:
        assert time.monotonic() < deadline, "a token bound to a deleted pod still authenticates"
        time.sleep(0.5)
    assert "Unauthorized" in gone.stderr
