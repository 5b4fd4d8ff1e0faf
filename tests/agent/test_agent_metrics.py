"""The agent's /metrics: phase durations by phase and failures by reason, measured where
the phases run (agent.interpreter) on the simulated host's clock; build_info and the process metrics."""

from __future__ import annotations

import urllib.request

from eventedpleg.agent import health
from eventedpleg.agent.agent import Agent
from eventedpleg.agent.metrics import AgentMetrics
from eventedpleg.protocol import NodeState
from eventedpleg_lab.sim import profiles
from tests.agent.conftest import NODE, Rig, RigFactory
from tests.dashboard import dashboard_exprs, exported_names, metric_names


def _with_metrics(rig: Rig) -> AgentMetrics:
    metrics = AgentMetrics()
    rig.agent = Agent(NODE, rig.host, rig.api, rig.agent.settings, trace=[], metrics=metrics)
    return metrics


def _value(metrics: AgentMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_an_apply_is_one_apply_phase_as_long_as_it_took_and_no_failure(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_containerd())
    metrics = _with_metrics(rig)
    started = rig.clock.now()
    rig.apply()
    took = (rig.clock.now() - started).total_seconds()
    assert rig.state == NodeState.DONE
    assert _value(metrics, "eventedpleg_agent_phase_seconds_count", phase="apply") == 1
    apply_seconds = _value(metrics, "eventedpleg_agent_phase_seconds_sum", phase="apply")
    assert 0 < apply_seconds <= took  # the verification window at least, on the simulated clock
    assert _value(metrics, "eventedpleg_agent_phase_seconds_count", phase="service") >= 2
    # Every reason is exported from 0 (an alert's increase() needs the sample before the first failure).
    failures = {
        s.labels["reason"]: s.value
        for f in metrics.registry.collect()
        if f.name == "eventedpleg_agent_failures"
        for s in f.samples
        if s.name == "eventedpleg_agent_failures_total"
    }
    assert failures == dict.fromkeys(
        ("fail", "rejected", "refused", "drift", "Failed", "RolledBack", "loop_error"), 0.0
    )

    rig.check()
    assert _value(metrics, "eventedpleg_agent_phase_seconds_count", phase="after_done") == 1


def test_a_rolled_back_apply_counts_one_failure_by_its_reason(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_containerd())
    metrics = _with_metrics(rig)
    rig.host.faults.kubelet.fails_when_evented = True
    rig.apply()
    assert rig.state == NodeState.ROLLED_BACK
    assert _value(metrics, "eventedpleg_agent_failures_total", reason="RolledBack") == 1
    assert _value(metrics, "eventedpleg_agent_failures_total", reason="Failed") == 0


def test_metrics_are_served_with_build_info_and_process_metrics() -> None:
    metrics = AgentMetrics()
    metrics.phase("apply", 12.5)
    metrics.loop_error()
    server = health.serve_metrics(metrics, 0, host="127.0.0.1")
    try:
        port = int(server.server_address[1])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    finally:
        server.shutdown()
    assert 'eventedpleg_agent_phase_seconds_count{phase="apply"} 1.0' in text
    assert 'eventedpleg_agent_failures_total{reason="loop_error"} 1.0' in text
    assert 'eventedpleg_build_info{component="agent"' in text
    assert "process_cpu_seconds_total" in text and "python_info" in text


def test_every_agent_panel_of_the_dashboard_reads_what_a_live_agent_serves(make_rig: RigFactory) -> None:
    """The dashboard's Agents row against the /metrics of an agent that applied (and rolled back) on a
    simulated host, as the operator's panels are checked against a live operator (tests/cluster)."""
    rig = make_rig(profiles.kubeadm_containerd())
    metrics = _with_metrics(rig)
    rig.host.faults.kubelet.fails_when_evented = True
    rig.apply()
    server = health.serve_metrics(metrics, 0, host="127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/metrics", timeout=5) as r:
            text = r.read().decode()
    finally:
        server.shutdown()
    used = set().union(*(metric_names(expr) for expr in dashboard_exprs(agents=True)))
    assert {"eventedpleg_agent_failures_total", "eventedpleg_agent_phase_seconds_bucket"} <= used
    served = exported_names(text)
    assert used <= served, (
        f"the Agents row asks for metrics the agent does not serve: {sorted(used - served)}"
    )
    # The series the panels select are there with their labels, not only declared.
    for sample in (
        'eventedpleg_agent_failures_total{reason="RolledBack"} 1.0',
        'eventedpleg_agent_phase_seconds_count{phase="apply"} 1.0',
        'eventedpleg_build_info{component="agent"',
        "process_resident_memory_bytes ",
    ):
        assert sample in text, sample
