"""spec.drain.rules against the real API server: the executor's drain passes evict the stateless
pods first, leave the database (order 10) until they are gone and a report pod (WaitCompleted, order 0)
has completed, never evict that pod, and name what waits in the node's note. The report pod is a
Deployment's, not a Job's: kwok's default stages complete a Job's pod at once (its `pod-complete` stage), so
the test completes the pod itself, when it chooses. A rule's namespaceSelector places the pods of a labelled
namespace by the labels the executor reads from the Namespace."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from eventedpleg import protocol
from eventedpleg.controller.executor import Executor
from eventedpleg.core.rollout.actions import Drain
from eventedpleg.core.rollout.drain.policy import DrainPolicy
from eventedpleg.k8s.events import EventRecorder
from eventedpleg.models.nodeconfig import DrainBehavior, DrainRule, DrainSpec, LabelSelector
from eventedpleg_lab.kube import workloads
from eventedpleg_lab.kube.fakenodes import KWOK_TOLERATION, FakeNode
from eventedpleg_lab.localcluster.cluster import LocalCluster
from tests.cluster.rollout_harness import wait_for
from tests.cluster.workloads import kget

pytestmark = pytest.mark.cluster

NS, NODE = "drain-rules", "drain-rules-0"
OPS, OPS_NODE = "drain-rules-ops", "drain-rules-1"  # a namespace labelled team=ops, and its own node
POD_SPEC = {
    "nodeSelector": {"pool": NS},
    "tolerations": [KWOK_TOLERATION],
    "containers": [{"name": "c", "image": "registry.invalid/c:1"}],
}
RULES = (
    DrainRule(pod_selector=LabelSelector(match_labels={"app": "db"}), behavior=DrainBehavior.DRAIN, order=10),
    DrainRule(
        pod_selector=LabelSelector(match_labels={"app": "report"}), behavior=DrainBehavior.WAIT_COMPLETED
    ),
)


@pytest.fixture(scope="module", autouse=True)
def cleanup(cluster: LocalCluster) -> Iterator[None]:
    yield
    cluster.kubectl("delete", "namespace", NS, OPS, "--ignore-not-found", "--wait=false", check=True)
    cluster.delete_nodes([NODE, OPS_NODE])


def on_node(cluster: LocalCluster, app: str, ns: str = NS, node: str = NODE) -> list[dict[str, Any]]:
    pods = kget(cluster, "pods", "-n", ns, "-l", f"app={app}", "--field-selector", f"spec.nodeName={node}")
    return list(pods["items"])


def drain_pass(cluster: LocalCluster, node_name: str, policy: DrainPolicy) -> tuple[str, str]:
    """One Drain step by the executor: the node state it wrote, and the node's note after it."""
    executor = Executor(
        cluster.api(), EventRecorder(cluster.api(), "eventedpleg-operator"), clock=lambda: datetime.now(UTC)
    )
    node = kget(cluster, "node", node_name)
    annotations = node["metadata"].get("annotations") or {}
    action = Drain(
        node_name, node["metadata"]["resourceVersion"], "h1", "{}", include_control_plane=False,
        deadline_reached=False, drain=policy, was_unschedulable=False,
        reason=annotations.get(protocol.ANN_REASON, ""),
    )  # fmt: skip
    outcome = executor.apply(action, nodeconfig="cluster")
    assert outcome.applied, outcome
    after = kget(cluster, "node", node_name)["metadata"].get("annotations") or {}
    return outcome.transition, after.get(protocol.ANN_REASON, "")


def test_orders_go_one_after_the_other_and_a_waitcompleted_pod_is_let_finish(cluster: LocalCluster) -> None:
    cluster.add_nodes([FakeNode(NODE, labels={"pool": NS})])
    manifests = [
        workloads.namespace(NS),
        workloads.deployment("web", NS, replicas=2, pod_spec=POD_SPEC),
        workloads.deployment("db", NS, replicas=1, pod_spec=POD_SPEC),
        workloads.deployment("report", NS, replicas=1, pod_spec=POD_SPEC),
    ]
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(manifests), check=True)
    for name in ("web", "db", "report"):
        cluster.kubectl("rollout", "status", "-n", NS, f"deployment/{name}", "--timeout=90s", check=True)
    (db,) = on_node(cluster, "db")
    (report,) = on_node(cluster, "report")
    cluster.kubectl("cordon", NODE, check=True)  # as the Cordon step leaves it: replacements stay Pending
    policy = DrainPolicy.of(DrainSpec(timeout_seconds=600, rules=RULES))
    # Order 0: the web pods are evicted; the database waits for them and for the report pod.
    _, note = drain_pass(cluster, NODE, policy)
    assert note.startswith("evicting 2 pod(s) of order 0"), note
    assert f"order 10 waits for order 0: {NS}/{db['metadata']['name']}" in note
    assert f"waits for {NS}/{report['metadata']['name']} to complete (drain.rules: WaitCompleted)" in note
    wait_for(lambda: not on_node(cluster, "web"), what="the web pods gone from the node")

    # The web pods are gone, the report pod still runs: the database stays, the report pod is not evicted.
    _, note = drain_pass(cluster, NODE, policy)
    assert note == (
        f"order 10 waits for order 0: {NS}/{db['metadata']['name']}; "
        f"waits for {NS}/{report['metadata']['name']} to complete (drain.rules: WaitCompleted)"
    )
    assert [p["metadata"]["uid"] for p in on_node(cluster, "db")] == [db["metadata"]["uid"]]
    (still,) = on_node(cluster, "report")
    assert still["metadata"]["uid"] == report["metadata"]["uid"] and not still["metadata"].get(
        "deletionTimestamp"
    )

    # The report pod completes: now the database goes, then the node is drained.
    done = '{"status": {"phase": "Succeeded"}}'
    name = report["metadata"]["name"]
    cluster.kubectl(
        "patch", "pod", name, "-n", NS, "--subresource=status", "--type=merge", "-p", done, check=True
    )
    _, note = drain_pass(cluster, NODE, policy)
    assert note == "evicting 1 pod(s) of order 10", note
    wait_for(lambda: not on_node(cluster, "db"), what="the db pod gone from the node")
    transition, _ = drain_pass(cluster, NODE, policy)
    assert transition == protocol.NodeState.APPLYING
    (finished,) = on_node(cluster, "report")  # completed, never evicted: still there
    assert finished["metadata"]["uid"] == report["metadata"]["uid"]


def test_a_namespace_selector_places_pods_by_their_namespaces_labels(cluster: LocalCluster) -> None:
    """Cluster API's pods[].namespaceSelector: the pods of the namespace labelled team=ops go in order 5,
    after the other pods of the node, whatever their own labels."""
    cluster.add_nodes([FakeNode(OPS_NODE, labels={"pool": OPS})])
    pod_spec = {**POD_SPEC, "nodeSelector": {"pool": OPS}}
    ops = {**workloads.namespace(OPS), "metadata": {"name": OPS, "labels": {"team": "ops"}}}
    manifests = [
        workloads.namespace(NS),
        ops,
        workloads.deployment("edge", NS, replicas=1, pod_spec=pod_spec),
        workloads.deployment("web", OPS, replicas=1, pod_spec=pod_spec),
    ]
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(manifests), check=True)
    for ns, name in ((NS, "edge"), (OPS, "web")):
        cluster.kubectl("rollout", "status", "-n", ns, f"deployment/{name}", "--timeout=90s", check=True)
    (mine,) = on_node(cluster, "edge", NS, OPS_NODE)
    (theirs,) = on_node(cluster, "web", OPS, OPS_NODE)
    cluster.kubectl("cordon", OPS_NODE, check=True)
    ops_last = DrainRule(
        behavior=DrainBehavior.DRAIN, order=5, namespace_selector=LabelSelector(match_labels={"team": "ops"})
    )
    policy = DrainPolicy.of(DrainSpec(timeout_seconds=600, rules=(ops_last,)))

    _, note = drain_pass(cluster, OPS_NODE, policy)
    assert (
        note == f"evicting 1 pod(s) of order 0; order 5 waits for order 0: {OPS}/{theirs['metadata']['name']}"
    )
    wait_for(
        lambda: not on_node(cluster, "edge", NS, OPS_NODE),
        what=f"{NS}/{mine['metadata']['name']} gone",
    )
    assert [p["metadata"]["uid"] for p in on_node(cluster, "web", OPS, OPS_NODE)] == [
        theirs["metadata"]["uid"]
    ]

    _, note = drain_pass(cluster, OPS_NODE, policy)
    assert note == "evicting 1 pod(s) of order 5", note
    wait_for(
        lambda: not on_node(cluster, "web", OPS, OPS_NODE), what=f"{OPS}/{theirs['metadata']['name']} gone"
    )
    transition, _ = drain_pass(cluster, OPS_NODE, policy)
    assert transition == protocol.NodeState.APPLYING
