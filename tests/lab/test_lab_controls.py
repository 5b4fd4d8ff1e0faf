"""Rollout controls on real nodes, with the product installed by the chart.

- `rollout.approval: Manual` holds a node in service until `eventedpleg approve`, then `rollout.healthGate`
  holds it until the guarded pod on it is Ready; it is then taken, Done and given back, and the gate's
  after-check finds the pod Ready again, so nothing halts.
- `rollout.steps` over three approved nodes: the first step takes one node although `maxUnavailable`
  allows two; in the next step a node running a pod annotated `karpenter.sh/do-not-disrupt: "true"` is
  named and Skipped before any cordon, the third node is taken, and its guarded pod failing after it was
  given back halts the rollout (Degraded WorkloadNotReady).
- `eventedpleg preflight` gives each lab node the matrix's verdict for its runtime.

The guarded pods are a DaemonSet's (a drain leaves them on the node, as kubectl drain does), whose
readiness a test file decides. Each NodeConfig is deleted after (onDelete: Revert)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from eventedpleg import protocol
from eventedpleg.core.compat import Level
from eventedpleg.reasons import ConditionReason
from eventedpleg_lab import periodic
from eventedpleg_lab.kube import workloads
from eventedpleg_lab.lab import chart
from eventedpleg_lab.lab.lab import Lab
from eventedpleg_lab.lab.nodes import LabRuntime, NodeSpec

pytestmark = [pytest.mark.lab, pytest.mark.slow]

NAME = "controls"
GUARDED = {"app.kubernetes.io/name": "guarded"}
READY_FILE = "/tmp/ready"  # inside the guarded pod's container
AFTER_SECONDS = 10


def _guarded(node: str) -> str:
    """A DaemonSet on `node` alone whose pod is Ready only once READY_FILE exists."""
    pod_spec = chart.idle_pod_spec("guarded", [node], readiness=["test", "-f", READY_FILE])
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
    approved = _approve(installed, node, NAME)
    print(approved)
    assert f"node {node} approved" in approved

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
    return annotations.get(protocol.ANN_STATE) == protocol.NodeState.DONE.value and not chart.cordoned(
        lab, node
    )


# --- steps, a do-not-disrupt pod and the health gate halting ------------------------------------------------

STEPS = "steps"
NOT_READY_FILE = "/tmp/notready"  # inside a watched pod's container: Ready while it is absent
WATCHED = {"app.kubernetes.io/name": "watched"}
STEPS_AFTER_SECONDS = 20
SOAK_SECONDS = 10


def _watched(nodes: list[str]) -> str:
    """A DaemonSet on `nodes` whose pods are Ready until NOT_READY_FILE exists in them."""
    pod_spec = chart.idle_pod_spec("watched", nodes, readiness=["sh", "-c", f"! test -f {NOT_READY_FILE}"])
    return json.dumps(
        workloads.daemonset("watched", chart.WORKLOAD_NAMESPACE, pod_spec=pod_spec, labels=WATCHED)
    )


def _kept(node: str) -> str:
    """A Deployment's pod on `node` that asks the autoscalers never to disrupt it."""
    body = workloads.deployment(
        "batch", chart.WORKLOAD_NAMESPACE, replicas=1, pod_spec=chart.idle_pod_spec("batch", [node])
    )
    body["spec"]["template"]["metadata"]["annotations"] = {"karpenter.sh/do-not-disrupt": "true"}
    return json.dumps(body)


def _pods(lab: Lab, selector: str) -> dict[str, dict[str, Any]]:
    """Live pods matching `selector` in the workload namespace, by node."""
    pods = chart.get_json(lab, "pods", "-n", chart.WORKLOAD_NAMESPACE, "-l", selector)["items"]
    return {
        p["spec"].get("nodeName", ""): p
        for p in pods
        if not p["metadata"].get("deletionTimestamp") and p["status"].get("phase") == "Running"
    }


def _ready(pod: dict[str, Any]) -> bool:
    return any(x["type"] == "Ready" and x["status"] == "True" for x in pod["status"].get("conditions", []))


@pytest.fixture
def three(installed: Lab, lab_specs: tuple[NodeSpec, ...]) -> Iterator[list[str]]:
    """The lab's three Supported containerd 2.2 nodes, by name (the rollout's order)."""
    names = sorted(s.name for s in lab_specs if s.runtime is LabRuntime.CONTAINERD_22)
    assert len(names) == 3, names
    yield names
    chart.delete_nodeconfig(installed, name=STEPS, timeout=420)
    for kind, name in (("daemonset", "watched"), ("deployment", "batch")):
        chart.kubectl_ok(
            installed,
            "delete",
            kind,
            name,
            "-n",
            chart.WORKLOAD_NAMESPACE,
            "--ignore-not-found",
            "--wait=true",
        )


def _progressing(lab: Lab, name: str) -> str:
    body = chart.get_json(lab, "nodeconfig", name)
    cond = next(x for x in body["status"]["conditions"] if x["type"] == "Progressing")
    return f"Progressing {cond['status']} {cond['reason']}: {cond['message']}"


def _approve(lab: Lab, node: str, nodeconfig: str) -> str:
    approve = [
        sys.executable,
        "-m",
        "eventedpleg",
        "approve",
        node,
        "--nodeconfig",
        nodeconfig,
        "--kubeconfig",
        str(lab.kubeconfig),
    ]
    done = subprocess.run(approve, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_steps_after_approval_skip_a_do_not_disrupt_node_before_its_cordon_and_the_health_gate_halts(
    installed: Lab, three: list[str]
) -> None:
    first, kept, last = three
    chart.kubectl_ok(installed, "apply", "-f", "-", stdin=_watched(three))
    chart.kubectl_ok(installed, "apply", "-f", "-", stdin=_kept(kept))
    chart.wait_for(
        "the watched pods Ready",
        lambda: (
            len([p for p in _pods(installed, "app.kubernetes.io/name=watched").values() if _ready(p)]) == 3
        ),
        timeout=180,
    )
    batch = chart.wait_for(
        "the do-not-disrupt pod", lambda: _pods(installed, "app=batch").get(kept) or {}, timeout=180
    )
    body = json.loads(chart.nodeconfig(True, name=STEPS))
    body["spec"]["nodeSelector"] = {
        "matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": three}]
    }
    body["spec"]["rollout"] = {
        "approval": "Manual",
        "maxUnavailable": 2,  # the steps, not the budget, keep the first batch to one node
        "canary": {"nodes": 0, "soakSeconds": SOAK_SECONDS},
        "steps": [1, 2],
        "healthGate": {
            "podSelector": {"matchLabels": WATCHED},
            "namespaces": [chart.WORKLOAD_NAMESPACE],
            "afterSeconds": STEPS_AFTER_SECONDS,
        },
        "maxFailedNodes": 3,  # the health gate halts whatever this says
    }
    chart.kubectl_ok(installed, "apply", "-f", "-", stdin=json.dumps(body))
    taken: list[tuple[float, frozenset[str]]] = []  # (monotonic time, the three's cordoned nodes)

    def sample() -> None:
        with contextlib.suppress(Exception):  # an API hiccup is not a sample
            nodes = installed.nodes()
            taken.append(
                (time.monotonic(), frozenset(n for n in three if nodes[n]["spec"].get("unschedulable")))
            )

    with periodic.every(0.5, sample):
        awaiting = chart.wait_for(
            "the three nodes awaiting approval",
            lambda: all(
                chart.node_status(installed, STEPS, n).get("state") == "AwaitingApproval" for n in three
            ),
            timeout=180,
        )
        assert awaiting and not any(cordoned for _, cordoned in taken), taken
        print(_progressing(installed, STEPS))
        for node in three:
            print(_approve(installed, node, STEPS))

        chart.wait_for("the first node Done", lambda: _done(installed, first), timeout=420)
        first_done = time.monotonic()
        print(_progressing(installed, STEPS))
        assert all(cordoned <= {first} for _, cordoned in taken), f"step 1 took more than {first}: {taken}"

        def skipped() -> dict[str, Any]:
            entry = chart.node_status(installed, STEPS, kept)
            return entry if entry.get("state") == "Skipped" else {}

        entry = chart.wait_for("the do-not-disrupt node Skipped", skipped, timeout=300)
        print(f"{kept}: {entry['state']}: {entry['reason']}")
        assert f"{chart.WORKLOAD_NAMESPACE}/{batch['metadata']['name']}" in entry["reason"], entry
        assert "karpenter.sh/do-not-disrupt" in entry["reason"], entry

        chart.wait_for("the last node Done", lambda: _done(installed, last), timeout=420)
        last_taken = min(t for t, cordoned in taken if last in cordoned)
        assert last_taken - first_done >= SOAK_SECONDS - 1, "step 2 started before the soak was over"
        watched = _pods(installed, "app.kubernetes.io/name=watched")[last]["metadata"]["name"]
        chart.kubectl_ok(
            installed, "exec", "-n", chart.WORKLOAD_NAMESPACE, watched, "--", "touch", NOT_READY_FILE
        )

        def halted() -> dict[str, Any]:
            now = chart.get_json(installed, "nodeconfig", STEPS)
            return now if chart.conditions(now).get("Degraded") == "True" else {}

        now = chart.wait_for("the health gate halting the rollout", halted, timeout=STEPS_AFTER_SECONDS + 180)
    degraded = next(x for x in now["status"]["conditions"] if x["type"] == "Degraded")
    print(f"Degraded {degraded['reason']}: {degraded['message']}")
    assert degraded["reason"] == ConditionReason.WORKLOAD_NOT_READY, degraded
    failed = chart.node_status(installed, STEPS, last)
    print(f"{last}: {failed.get('state')}: {failed.get('reason')}")
    assert failed.get("state") == "Failed" and f"{chart.WORKLOAD_NAMESPACE}/{watched}" in failed["reason"], (
        failed
    )
    assert not any(kept in cordoned for _, cordoned in taken), "the do-not-disrupt node was cordoned"
    assert not any(len(cordoned) > 1 for _, cordoned in taken), taken
    assert _done(installed, first)


# --- preflight's verdicts ----------------------------------------------------------------------------------


def _verdict(spec: NodeSpec) -> tuple[Level, str]:
    """The matrix's verdict for a lab node (docs/compatibility.md) and a source its reasons must cite."""
    if spec.runtime is LabRuntime.CONTAINERD_16:
        return Level.UNSUPPORTED, "GetContainerEvents"
    if spec.runtime is LabRuntime.CONTAINERD_17:
        return Level.RISKY, "containerd#7318"
    if spec.runtime is LabRuntime.CRIO_134 and spec.kubelet == "1.36":
        return Level.RISKY, "cri-o#9663"
    return Level.SUPPORTED, ""


def test_preflight_gives_each_runtime_of_the_lab_its_verdict(
    installed: Lab, lab_specs: tuple[NodeSpec, ...]
) -> None:
    env = {**os.environ, "KUBECONFIG": str(installed.kubeconfig)}
    preflight = [sys.executable, "-m", "eventedpleg", "preflight"]
    wide = subprocess.run(
        [*preflight, "-o", "wide"], capture_output=True, text=True, timeout=120, check=False, env=env
    )
    print(wide.stdout)
    assert wide.returncode == 3, wide.stderr  # some nodes will not be taken
    rows = {
        r["node"]: r
        for r in json.loads(
            subprocess.run(
                [*preflight, "-o", "json"], capture_output=True, text=True, timeout=120, check=False, env=env
            ).stdout
        )
    }
    for spec in lab_specs:
        level, source = _verdict(spec)
        row = rows[spec.name]
        assert row["verdict"] == level, (spec.name, row["verdict"], row["reasons"])
        assert source in " ".join(row["reasons"]), (spec.name, row["reasons"])
        assert row["writes"]["crioDropIn"] == (spec.runtime.is_crio and level is not Level.UNSUPPORTED), row
