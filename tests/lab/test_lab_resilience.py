"""Failures on real nodes, with the product installed by the chart: the agent pod deleted while its node
is mid-apply resumes from its journal; a kubelet that will not start after the apply is rolled back and
the node is Ready again; the Lease-holding operator pod stays on its own node through that node's drain,
runtime and kubelet restarts, keeps the Lease and finishes the node. Each test uses its own NodeConfig on
one node and deletes it afterwards (onDelete: Revert), so the full rollout in test_lab_rollout.py starts
from clean nodes."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg_lab.demo.harness import NAMESPACE
from eventedpleg_lab.lab import chart
from eventedpleg_lab.lab.lab import Lab, node_ready
from eventedpleg_lab.lab.nodes import LabRuntime, NodeSpec

pytestmark = [pytest.mark.lab, pytest.mark.slow]

NAME = "resilience"
KUBELET_DROPIN = f"/etc/kubernetes/kubelet.conf.d/{c.KUBELET_DROPIN_NAME}"
# A site's pre-start check that refuses kubelet drop-ins it does not know (the kind of hook a
# configuration-management policy installs): the kubelet will not start while ours is there.
SITE_CHECK = "/etc/systemd/system/kubelet.service.d/50-site-check.conf"
SITE_CHECK_TEXT = f"[Service]\nExecStartPre=/bin/sh -c '! test -e {KUBELET_DROPIN}'\n"


@pytest.fixture
def node(installed: Lab, lab_specs: tuple[NodeSpec, ...]) -> Iterator[str]:
    """A Supported containerd node for one test; its NodeConfig is deleted (and the node reverted) after."""
    name = next(s.name for s in lab_specs if s.runtime is LabRuntime.CONTAINERD_22 and s.kubelet == "1.36")
    yield name
    _revert(installed, name)


@pytest.fixture
def leader_node(installed: Lab) -> Iterator[tuple[str, str]]:
    """(the Lease holder's pod, its node) for one test. chart.install keeps the operator's pods on nodes a
    rollout drains, so that node is Supported. Its NodeConfig is deleted (and the node reverted) after."""
    leader = chart.lease_holder(installed)
    assert leader is not None
    name = chart.pod_node(installed, NAMESPACE, leader)
    assert name is not None, leader
    yield leader, name
    _revert(installed, name)


def _revert(lab: Lab, node: str) -> None:
    chart.delete_nodeconfig(lab, name=NAME)
    assert chart.on_node(lab, node, "cat", KUBELET_DROPIN) == ""


def _apply(lab: Lab, node: str, verify_seconds: int = 180) -> None:
    body = json.loads(chart.nodeconfig(True, name=NAME))
    body["spec"]["nodeSelector"] = {"matchLabels": {"kubernetes.io/hostname": node}}
    body["spec"]["verification"] = {"timeoutSeconds": verify_seconds}
    chart.kubectl_ok(lab, "apply", "-f", "-", stdin=json.dumps(body))


def _annotations(lab: Lab, node: str) -> dict[str, Any]:
    annotations: dict[str, Any] = lab.nodes()[node]["metadata"].get("annotations", {})
    return annotations


def _state(lab: Lab, node: str) -> str | None:
    return _annotations(lab, node).get(protocol.ANN_STATE)


def _end(lab: Lab, node: str) -> str:
    """The node's state once the agent has ended its work: Done, Failed or RolledBack."""
    ends = {
        protocol.NodeState.DONE.value,
        protocol.NodeState.FAILED.value,
        protocol.NodeState.ROLLED_BACK.value,
    }
    return chart.wait_for("the node to end", lambda: ((state := _state(lab, node)) in ends and state) or "",
                          timeout=420)  # fmt: skip


def _agent_pod(lab: Lab, node: str) -> str:
    pods = chart.get_json(lab, "pods", "-n", chart.AGENT_NAMESPACE, f"--field-selector=spec.nodeName={node}")
    live = [str(p["metadata"]["name"]) for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]
    assert len(live) == 1, live
    return live[0]


def test_agent_pod_deleted_mid_apply_resumes_from_its_journal(installed: Lab, node: str) -> None:
    _apply(installed, node)
    chart.wait_for(
        "the agent to have written and restarted (Verifying)",
        lambda: _state(installed, node) == protocol.NodeState.VERIFYING.value,
        timeout=300,
        interval=0.5,
    )
    first = _agent_pod(installed, node)
    # A grace period of 1 s: the kubelet kills the agent in the middle of its ~12 s verification (with
    # the chart's 60 s the agent would finish the step first, as it should on a normal stop).
    chart.kubectl_ok(installed, "delete", "pod", first, "-n", chart.AGENT_NAMESPACE, "--grace-period=1",
        "--wait=false")  # fmt: skip
    end = _end(installed, node)
    annotations = _annotations(installed, node)
    assert end == protocol.NodeState.DONE.value, annotations.get(protocol.ANN_REASON)
    assert annotations[protocol.ANN_CURRENT] == annotations[protocol.ANN_DESIRED]
    assert _agent_pod(installed, node) != first  # the DaemonSet's new pod finished the apply
    assert "EventedPLEG" in chart.on_node(installed, node, "cat", KUBELET_DROPIN)


def test_kubelet_that_will_not_start_is_rolled_back(installed: Lab, node: str) -> None:
    site_check = installed.node_dir(node) / "rootfs" / SITE_CHECK.lstrip("/")  # the node's / on this host
    site_check.parent.mkdir(parents=True, exist_ok=True)
    site_check.write_text(SITE_CHECK_TEXT)
    chart.on_node(installed, node, "systemctl", "daemon-reload")
    try:
        _apply(installed, node, verify_seconds=60)
        end = _end(installed, node)
        annotations = _annotations(installed, node)
        assert end == protocol.NodeState.ROLLED_BACK.value, annotations.get(protocol.ANN_REASON)
        assert "kubelet" in annotations[protocol.ANN_REASON], annotations[protocol.ANN_REASON]
        assert chart.on_node(installed, node, "cat", KUBELET_DROPIN) == ""  # our file is gone again
        assert chart.on_node(installed, node, "systemctl", "is-active", "kubelet").strip() == "active"
        chart.wait_for("the node Ready again", lambda: node_ready(installed.nodes()[node]), timeout=120)
        degraded = chart.conditions(chart.get_json(installed, "nodeconfig", NAME)).get("Degraded")
        assert degraded == "True"
    finally:
        site_check.unlink(missing_ok=True)
        chart.on_node(installed, node, "systemctl", "daemon-reload")


def _pod(lab: Lab, name: str) -> dict[str, Any]:
    return chart.get_json(lab, "pod", name, "-n", NAMESPACE)


def _restarts(pod: dict[str, Any]) -> int:
    return sum(int(s.get("restartCount", 0)) for s in pod.get("status", {}).get("containerStatuses", []))


def test_the_leader_keeps_its_lease_and_finishes_its_own_node(
    installed: Lab, leader_node: tuple[str, str]
) -> None:
    """The rollout takes the node the leading operator runs on. Its drain leaves the operator's pods (they
    carry eventedpleg.io/drain: skip, as the chart writes them); they keep running through the node's
    runtime and kubelet restarts, as DaemonSet pods do, and the leader keeps the Lease, with no
    transition, and finishes the node itself. The kubelet's own restart is seen from its systemd unit."""
    leader, node = leader_node
    before = _pod(installed, leader)
    lease = chart.get_json(installed, "lease", c.LEASE_NAME, "-n", NAMESPACE)["spec"]
    kubelet_since = chart.on_node(installed, node, "systemctl", "show", "-P", "ActiveEnterTimestampMonotonic",
                                  "kubelet").strip()  # fmt: skip
    holders: set[str] = set()
    stop = threading.Event()

    def sample() -> None:  # the Lease's holder while the node goes through its steps
        while not stop.is_set():
            holders.add(str(chart.lease_holder(installed)))
            stop.wait(1.0)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    try:
        _apply(installed, node)
        end = _end(installed, node)
    finally:
        stop.set()
        watcher.join(timeout=10)
    annotations = _annotations(installed, node)
    assert end == protocol.NodeState.DONE.value, annotations.get(protocol.ANN_REASON)
    assert annotations[protocol.ANN_CURRENT] == annotations[protocol.ANN_DESIRED]
    assert "EventedPLEG" in chart.on_node(installed, node, "cat", KUBELET_DROPIN)
    restarted = chart.on_node(installed, node, "systemctl", "show", "-P", "ActiveEnterTimestampMonotonic",
                              "kubelet").strip()  # fmt: skip
    assert restarted != kubelet_since, "the node's kubelet was not restarted"
    after = _pod(installed, leader)  # raises when the pod is gone: it must never be evicted
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert not after["metadata"].get("deletionTimestamp")
    assert after["spec"]["nodeName"] == node
    assert _restarts(after) == _restarts(before), after.get("status", {}).get("containerStatuses")
    now = chart.get_json(installed, "lease", c.LEASE_NAME, "-n", NAMESPACE)["spec"]
    assert holders == {leader}, holders
    assert now["holderIdentity"] == leader
    assert now.get("leaseTransitions") == lease.get("leaseTransitions"), (lease, now)
    print(f"{node}: Done; leader {leader} kept the Lease, restarts {_restarts(after)}, kubelet restarted")
    chart.wait_for(
        "the node uncordoned", lambda: not chart.cordoned(installed, node), timeout=60
    )  # else raises
    body = chart.wait_for(
        "the NodeConfig to settle", lambda: chart.settled(installed, name=NAME), timeout=120
    )
    assert body is not None
    assert chart.conditions(body).get("Available") == "True", body.get("status")
