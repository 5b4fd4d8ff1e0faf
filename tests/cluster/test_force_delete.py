"""onTimeout: ForceDelete without drain.allowForceDelete: the executor, against the real API server, fails
the node with a reason that names the chart value, gives the node back, and deletes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import yaml

from eventedpleg import protocol
from eventedpleg.controller.executor import Executor
from eventedpleg.core.rollout.actions import Drain
from eventedpleg.core.rollout.drain.policy import DrainPolicy
from eventedpleg.core.rollout.drain.takeverdict import FORCE_DELETE_DISABLED
from eventedpleg.k8s.events import EventRecorder
from eventedpleg.models.nodeconfig import DrainSpec, OnDrainTimeout
from eventedpleg_lab.kube.fakenodes import FakeNode
from eventedpleg_lab.localcluster.cluster import LocalCluster
from tests.cluster.rollout_harness import wait_for
from tests.cluster.workloads import guarded_deployment, kget

pytestmark = pytest.mark.cluster

NS, NODE = "force-delete", "force-delete-0"


@pytest.fixture(scope="module", autouse=True)
def cleanup(cluster: LocalCluster) -> Iterator[None]:
    yield
    cluster.kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=false", check=True)
    cluster.delete_nodes([NODE])


def test_force_delete_not_allowed_fails_the_node_and_deletes_nothing(cluster: LocalCluster) -> None:
    cluster.add_nodes([FakeNode(NODE, labels={"pool": NS})])
    # no eviction is ever allowed: only a delete could empty the node
    manifests = guarded_deployment(NS, "pinned", replicas=1, node_selector={"pool": NS})
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(manifests), check=True)
    cluster.kubectl("rollout", "status", "-n", NS, "deployment/pinned", "--timeout=90s", check=True)
    (pod,) = kget(cluster, "pods", "-n", NS)["items"]
    cluster.kubectl("cordon", NODE, check=True)
    node = kget(cluster, "node", NODE)

    executor = Executor(  # allow_force_delete defaults off
        cluster.api(),
        EventRecorder(cluster.api(), "eventedpleg-operator"),
        clock=lambda: datetime.now(UTC),
    )
    policy = DrainPolicy.of(
        DrainSpec(
            timeout_seconds=60, on_timeout=OnDrainTimeout.FORCE_DELETE, grace_period_seconds=30,
            delete_empty_dir_data=False,
        )
    )  # fmt: skip
    drain = Drain(
        NODE, node["metadata"]["resourceVersion"], "h1", "{}", include_control_plane=False,
        deadline_reached=True, drain=policy, was_unschedulable=False, reason="",
    )  # fmt: skip
    outcome = executor.apply(drain, nodeconfig="cluster")

    assert outcome.applied and outcome.transition == protocol.NodeState.FAILED, outcome
    after = kget(cluster, "node", NODE)
    annotations = after["metadata"]["annotations"]
    assert annotations[protocol.ANN_STATE] == protocol.NodeState.FAILED
    assert annotations[protocol.ANN_REASON].startswith("drain did not finish within 60s")
    assert FORCE_DELETE_DISABLED in annotations[protocol.ANN_REASON]
    assert "drain.allowForceDelete=true" in annotations[protocol.ANN_REASON]
    assert not after["spec"].get("unschedulable", False)  # given back, as for onTimeout: Fail
    (still,) = kget(cluster, "pods", "-n", NS)["items"]
    assert still["metadata"]["uid"] == pod["metadata"]["uid"]  # the pod was neither evicted nor deleted
    event = wait_for(
        lambda: [
            e
            for e in kget(
                cluster, "events", "-n", "default", "--field-selector", f"involvedObject.name={NODE}"
            )["items"]
            if e["reason"] == "DrainTimeout"
        ],
        what="the DrainTimeout Event",
    )
    assert FORCE_DELETE_DISABLED in event[0]["message"]
