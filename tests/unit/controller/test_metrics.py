"""The operator's registry: a deleted NodeConfig leaves no series behind; Failed-and-cordoned is counted."""

from __future__ import annotations

from prometheus_client import generate_latest

from eventedpleg.controller.metrics import OperatorMetrics
from eventedpleg.core.node.facts.promtext import parse_metrics
from eventedpleg.core.rollout.planner import NodeNote, Summary, Tally
from eventedpleg.protocol import NodeState


def _summary(*failures: NodeNote) -> Summary:
    return Summary(
        tally=Tally(total=3, eligible=3, failed=len(failures)), want_hash="h", complete=False,
        halted=True,
        canary_failed=False, paused=False, window_closed=False, waiting="", conflicts=(), attention=failures,
        attention_truncated=0, failures=failures, finalized=False, next_wake=None,
    )  # fmt: skip


def _series(metrics: OperatorMetrics, nodeconfig: str) -> set[str]:
    """Names of the exported metric families that have a series for this NodeConfig."""
    exported = parse_metrics(generate_latest(metrics.registry).decode())
    names = {s.name for s in exported.samples if s.label("nodeconfig") == nodeconfig}
    return {n for n in names if not n.endswith("_created")}


def test_forget_drops_every_series_of_a_deleted_nodeconfig() -> None:
    metrics = OperatorMetrics()
    failed = NodeNote("n1", NodeState.FAILED, "verify failed", unschedulable=True)
    for name in ("gone", "kept"):
        metrics.record_pass(name, _summary(failed), {"Degraded": True, "Available": False})
        metrics.failures.labels(name).inc()
        metrics.drain_retries.labels(name).inc()
    before = _series(metrics, "gone")
    assert before == {
        "eventedpleg_nodes", "eventedpleg_condition", "eventedpleg_node_failures_total",
        "eventedpleg_drain_retries_total", "eventedpleg_failed_cordoned_nodes",
    }  # fmt: skip

    metrics.forget("gone")

    assert _series(metrics, "gone") == set()
    assert _series(metrics, "kept") == before  # the other NodeConfig's series are untouched
    metrics.forget("never-seen")  # no error for a NodeConfig without series


def test_failed_and_cordoned_nodes_are_counted() -> None:
    metrics = OperatorMetrics()
    notes = (
        NodeNote("a", NodeState.FAILED, "rollback failed", unschedulable=True),
        NodeNote("b", NodeState.FAILED, "drain timed out", unschedulable=False),  # given back
        NodeNote("c", NodeState.ROLLED_BACK, "verify failed", unschedulable=True),  # not Failed
    )
    metrics.record_pass("cluster", _summary(*notes), {})
    exported = parse_metrics(generate_latest(metrics.registry).decode())
    assert exported.find("eventedpleg_failed_cordoned_nodes", nodeconfig="cluster")[0].value == 1
    metrics.record_pass("cluster", _summary(), {})
    exported = parse_metrics(generate_latest(metrics.registry).decode())
    assert exported.find("eventedpleg_failed_cordoned_nodes", nodeconfig="cluster")[0].value == 0
