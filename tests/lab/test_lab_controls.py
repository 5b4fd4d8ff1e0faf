"""Rollout controls on a real node, with the product installed by the chart: `rollout.approval: Manual`
holds the node in service until `eventedpleg approve`, then `rollout.healthGate` holds it until the
guarded pod on it is Ready; it is then taken, Done and given back, and the gate's after-check finds the pod
Ready again, so nothing halts. The guarded pod is a DaemonSet's (a drain leaves it on the node, as kubectl
drain does), whose readiness a test file decides. The NodeConfig is deleted after (onDelete: Revert)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from eventedpleg import constants as c
from eventedpleg_lab.kube import workloads
from eventedpleg_lab.lab import chart
from eventedpleg_lab.lab.lab import Lab
from eventedpleg_lab.lab.nodefiles import BUSYBOX_IMAGE
from eventedpleg_lab.lab.nodes import LabRuntime, NodeSpec

pytestmark = [pytest.mark.lab, pytest.mark.slow]

NAME = "controls"
GUARDED = {"app.kubernetes.io/name": "guarded"}
READY_FILE = "/tmp/ready"  # inside the guarded pod's container
AFTER_SECONDS = 10


def _guarded(node: str) -> str:
    """A DaemonSet on `node` alone whose pod is Ready only once READY_FILE exists."""
    pod_spec = {
        "nodeSelector": {"kubernetes.io/hostname": node},
        "terminationGracePeriodSeconds": 5,
        "containers": [
            {
                "name": "guarded",
                "image": BUSYBOX_IMAGE,
                "imagePullPolicy": "Never",
                "command": ["sh", "-c", 'trap "exit 0" TERM; while true; do sleep 1; done'],
                "readinessProbe": {"exec": {"command": ["test", "-f", READY_FILE]}, "periodSeconds": 2},
            }
        ],
    }
    return json.dumps(
        workloads.daemonset("guarded", chart.WORKLOAD_NAMESPACE, pod_spec=pod_spec, labels=GUARDED)
    )


def _guarded_pod(lab: Lab) -> str:
    pods = chart.get_json(lab, "pods", "-n", chart.WORKLOAD_NAMESPACE, "-l", "app.kubernetes.io/name=guarded")
    live = [p["metadata"]["name"] for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]
    return str(live[0]) if len(live) == 1 else ""


@pytest.fixture
def node(installed: Lab, lab_specs: tuple[NodeSpec, ...]) -> Iterator[str]:
    name = next(s.name for s in lab_specs if s.runtime is LabRuntime.CONTAINERD_22 and s.kubelet == "1.36")
    yield name
    chart.delete_nodeconfig(installed, name=NAME, timeout=300)
    chart.kubectl_ok(installed, "delete", "daemonset", "guarded", "-n", chart.WORKLOAD_NAMESPACE,
        "--ignore-not-found", "--wait=true")  # fmt: skip


def test_manual_approval_then_the_health_gate_then_done_with_the_pod_ready_again(
    installed: Lab, node: str
) -> None:
    chart.kubectl_ok(installed, "apply", "-f", "-", stdin=_guarded(node))
    pod = chart.wait_for("the guarded pod", lambda: _guarded_pod(installed), timeout=120)
    body = json.loads(chart.nodeconfig(True, name=NAME))
    body["spec"]["nodeSelector"] = {"matchLabels": {"kubernetes.io/hostname": node}}
    body["spec"]["rollout"] = {
        "approval": "Manual",
        "canary": {"nodes": 0},
        "healthGate": {
            "podSelector": {"matchLabels": GUARDED},
            "namespaces": [chart.WORKLOAD_NAMESPACE],
            "afterSeconds": AFTER_SECONDS,
        },
    }
    chart.kubectl_ok(installed, "apply", "-f", "-", stdin=json.dumps(body))
    cordoned: list[bool] = []

    def state_is(state: str) -> dict[str, Any]:
        cordoned.append(chart.cordoned(installed, node))
        entry = chart.node_status(installed, NAME, node)
        return entry if entry.get("state") == state else {}

    waiting = chart.wait_for("the node awaiting approval", lambda: state_is("AwaitingApproval"), timeout=120)
    print(f"{node}: {waiting['state']}: {waiting['reason']}")
    approve = [sys.executable, "-m", "eventedpleg", "approve", node, "--nodeconfig", NAME,
               "--kubeconfig", str(installed.kubeconfig)]  # fmt: skip
    approved = subprocess.run(approve, capture_output=True, text=True, check=False, timeout=120)
    print(approved.stdout.strip())
    assert approved.returncode == 0, approved.stderr
    assert f"node {node} approved" in approved.stdout

    def gated() -> str:
        entry = state_is("Pending")
        reason = str(entry.get("reason", ""))  # after "reading its pods' readiness", a pass before
        return reason if "pods not Ready (rollout.healthGate)" in reason else ""

    reason = chart.wait_for("the health gate holding the node", gated, timeout=120)
    print(f"{node}: Pending: {reason}")
    assert f"{chart.WORKLOAD_NAMESPACE}/{pod}" in reason, reason
    assert not any(cordoned), "taken before approval or with its guarded pod not Ready"

    chart.kubectl_ok(installed, "exec", "-n", chart.WORKLOAD_NAMESPACE, pod, "--", "touch", READY_FILE)
    chart.wait_for("the node Done and given back", lambda: _done(installed, node), timeout=420)
    assert _guarded_pod(installed) == pod  # the drain left the DaemonSet's pod where it was
    # The after-check runs from AFTER_SECONDS after Done: the pod is Ready, so nothing halts.
    deadline = time.monotonic() + AFTER_SECONDS + 40
    while time.monotonic() < deadline:
        now = chart.get_json(installed, "nodeconfig", NAME)
        assert chart.conditions(now).get("Degraded") != "True", now.get("status")
        time.sleep(2.0)
    assert chart.conditions(now).get("Available") == "True", now.get("status")


def _done(lab: Lab, node: str) -> bool:
    annotations = lab.nodes()[node]["metadata"].get("annotations", {})
    return annotations.get(c.ANN_STATE) == c.NodeState.DONE.value and not chart.cordoned(lab, node)
