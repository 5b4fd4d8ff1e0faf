"""The product on real nodes, installed as an administrator installs it: the image built from the
Dockerfile and imported into each node's runtime, the CRD applied, the chart installed with helm. The
operator and agent pods run on the lab's nodes and the agent uses the production host path (nsenter into
the node's systemd, systemctl, journalctl, the kubelet's /metrics). Then a NodeConfig rolls out to
Available while a Deployment guarded by a PodDisruptionBudget keeps serving, the leading operator pod is
evicted by the drain of its own node, CRI-O gets its drop-in; every node ends as docs/compatibility.md
says; `eventedPleg: false` takes every drop-in away again.

The tests in this module run in order and share the installed product (the `installed` fixture);
test_lab_teardown.py uninstalls it."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import pytest

from eventedpleg import constants as c
from eventedpleg_lab import image
from eventedpleg_lab.demo.harness import NAMESPACE
from eventedpleg_lab.lab import chart
from eventedpleg_lab.lab.lab import Lab
from eventedpleg_lab.lab.nodes import NodeSpec

pytestmark = [pytest.mark.lab, pytest.mark.slow]

ROLLOUT_TIMEOUT = 900.0
KUBELET_DROPIN = f"/etc/kubernetes/kubelet.conf.d/{c.KUBELET_DROPIN_NAME}"
CRIO_DROPIN = f"/{c.CRIO_DROPIN_DIR}/{c.CRIO_DROPIN_NAME}"


@dataclass
class Watch:
    """Samples taken every second while a rollout runs: Ready web pods, and who holds the Lease."""

    lab: Lab
    min_ready: int = 1_000
    holders: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.wait(1.0):
            try:
                self.min_ready = min(self.min_ready, len(chart.ready_workload_pods(self.lab)))
                holder = chart.lease_holder(self.lab)
            except Exception:  # an API hiccup is not a sample
                continue
            if holder and (not self.holders or self.holders[-1] != holder):
                self.holders.append(holder)


def _rollout(lab: Lab, evented_pleg: bool) -> tuple[dict[str, Any], Watch]:
    watch = Watch(lab)
    sampler = threading.Thread(target=watch.run, daemon=True)
    sampler.start()
    try:
        chart.apply_nodeconfig(lab, evented_pleg)
        body = chart.wait_for("the NodeConfig to settle", lambda: chart.settled(lab), timeout=ROLLOUT_TIMEOUT)
    finally:
        watch.stop.set()
        sampler.join()
    assert body is not None
    return body, watch


def test_the_chart_runs_on_the_real_nodes(installed: Lab, lab_specs: tuple[NodeSpec, ...]) -> None:
    agents = chart.get_json(installed, "pods", "-n", chart.AGENT_NAMESPACE)["items"]
    assert sorted(p["spec"]["nodeName"] for p in agents) == sorted(s.name for s in lab_specs)
    operators = chart.get_json(installed, "pods", "-n", NAMESPACE)["items"]
    assert len(operators) == 2
    for pod in (*agents, *operators):
        assert pod["status"]["phase"] == "Running", pod["metadata"]["name"]
        assert pod["spec"]["containers"][0]["image"] == image.TAG
    holder = chart.lease_holder(installed)
    assert holder in {p["metadata"]["name"] for p in operators}


def test_rollout_reaches_available_on_real_nodes(installed: Lab, lab_specs: tuple[NodeSpec, ...]) -> None:
    before = chart.ready_workload_pods(installed)
    leader = chart.lease_holder(installed)
    assert leader is not None
    body, watch = _rollout(installed, evented_pleg=True)
    conditions = chart.conditions(body)
    assert conditions.get("Available") == "True", body.get("status")
    assert chart.outcome_problems(lab_specs, installed.nodes()) == []
    # Drains evicted through the PodDisruptionBudget: never fewer Ready web pods than it allows, and the
    # pods on drained nodes were replaced by pods elsewhere.
    assert watch.min_ready >= chart.WORKLOAD_MIN_AVAILABLE, watch.min_ready
    after = chart.ready_workload_pods(installed)
    assert len(after) == chart.WORKLOAD_REPLICAS
    done = {s.name for s in lab_specs if chart.expected_outcome(s).state == c.NodeState.DONE.value}
    moved = {pod for pod, node in before.items() if node in done}
    assert moved and not moved & set(after), (before, after)
    # The leading operator pod ran on a node the rollout drained: it was evicted, the other replica took
    # the Lease over, and the rollout still completed.
    assert watch.holders[0] == leader and len(watch.holders) >= 2, watch.holders
    # Nothing of ours is left cordoned.
    for name, node in installed.nodes().items():
        assert not node["spec"].get("unschedulable"), name


def test_the_crio_node_runs_with_pod_events(installed: Lab, lab_specs: tuple[NodeSpec, ...]) -> None:
    for spec in lab_specs:
        if not spec.runtime.is_crio:
            continue
        dropin = chart.on_node(installed, spec.name, "cat", CRIO_DROPIN)
        running = chart.on_node(installed, spec.name, "crio", "status", "config")
        if spec.admin_pod_events_off:  # refused before anything was written
            assert dropin == "" and "enable_pod_events = false" in running, spec.name
            continue
        assert "enable_pod_events = true" in dropin, spec.name
        assert "enable_pod_events = true" in running, spec.name  # the restarted daemon's own config
        evidence = installed.nodes()[spec.name]["metadata"]["annotations"][c.ANN_EVIDENCE]
        assert "kubelet_evented_pleg_connection_success_count" in evidence, evidence


def test_eventedpleg_false_reverts_every_node(installed: Lab, lab_specs: tuple[NodeSpec, ...]) -> None:
    body, watch = _rollout(installed, evented_pleg=False)
    assert chart.conditions(body).get("Available") == "True", body.get("status")
    assert watch.min_ready >= chart.WORKLOAD_MIN_AVAILABLE, watch.min_ready
    for spec in lab_specs:
        assert chart.on_node(installed, spec.name, "cat", KUBELET_DROPIN) == "", spec.name
        if spec.runtime.is_crio:
            assert chart.on_node(installed, spec.name, "cat", CRIO_DROPIN) == "", spec.name
            running = chart.on_node(installed, spec.name, "crio", "status", "config")
            assert "enable_pod_events = true" not in running, spec.name
    for name, node in installed.nodes().items():
        assert not node["spec"].get("unschedulable"), name
