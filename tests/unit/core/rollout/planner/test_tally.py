"""A pass's counters are one Tally: summed field by field, and every counter NodeCounts publishes reaches
status.nodes and the eventedpleg_nodes series by its name, with no list of counters anywhere else."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime

from prometheus_client import generate_latest

from eventedpleg.controller.metrics import OperatorMetrics
from eventedpleg.core.node.facts.promtext import parse_metrics
from eventedpleg.core.rollout.planner import Summary, Tally
from eventedpleg.core.rollout.planner.tally import Count, tally_of
from eventedpleg.core.rollout.status import build_status
from eventedpleg.models.nodeconfig import NodeCounts

NAMES = [f.name for f in fields(Tally)]


def _distinct(start: int) -> Tally:
    """A Tally whose counters all differ, so a counter read in place of another shows."""
    return Tally(**{name: start + i for i, name in enumerate(NAMES)})


def _summary(tally: Tally) -> Summary:
    return Summary(
        tally=tally, want_hash="h", complete=False, halted=False, canary_failed=False, paused=False,
        window_closed=False, waiting="", conflicts=(), attention=(), attention_truncated=0, failures=(),
        finalized=False, next_wake=None,
    )  # fmt: skip


def test_each_counter_has_its_count_and_each_count_its_counter() -> None:
    assert [c.value for c in Count] == NAMES
    assert tally_of((Count.IN_FLIGHT, Count.UPDATING, Count.IN_FLIGHT)) == Tally(in_flight=2, updating=1)


def test_tallies_add_and_subtract_every_counter() -> None:
    a, b = _distinct(1), _distinct(100)
    assert [getattr(a + b, n) for n in NAMES] == [getattr(a, n) + getattr(b, n) for n in NAMES]
    assert (a + b) - b == a
    assert a - a == Tally()


def test_every_published_counter_is_a_tally_counter() -> None:
    assert set(NodeCounts.model_fields) <= set(NAMES)


def test_status_and_metrics_take_every_published_counter_by_name() -> None:
    tally = _distinct(3)
    summary = _summary(tally)
    new = build_status(
        summary, enabled=True, deleting=False, generation=1, previous=[], now=datetime.now(UTC)
    )
    published = {name: getattr(tally, name) for name in NodeCounts.model_fields}
    assert new.nodes.model_dump() == published

    metrics = OperatorMetrics()
    metrics.record_pass("cluster", summary, {})
    exported = parse_metrics(generate_latest(metrics.registry).decode())
    buckets = {s.label("bucket"): s.value for s in exported.find("eventedpleg_nodes", nodeconfig="cluster")}
    assert buckets == published
