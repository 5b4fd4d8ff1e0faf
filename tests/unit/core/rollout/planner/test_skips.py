"""Why a node was skipped, read from typed marks only (core.rollout.planner.skips)."""

from __future__ import annotations

from eventedpleg import protocol
from eventedpleg.core.evidence import Evidence
from eventedpleg.core.rollout.planner import skips
from eventedpleg.core.rollout.planner.skips import SkippedFor
from eventedpleg.core.rollout.planner.tally import Tally
from eventedpleg.core.rollout.snapshot import NodeMarks


def marks(cause: str = "", result: str | None = None, reason: str = "") -> NodeMarks:
    annotations = {protocol.ANN_STATE: "Skipped", protocol.ANN_REASON: reason}
    if cause:
        annotations[protocol.ANN_CAUSE] = cause
    if result is not None:
        annotations[protocol.ANN_EVIDENCE] = Evidence(result=result).to_json()
    return NodeMarks.parse(annotations)


def test_every_operator_cause_maps_to_a_skip_cause_and_the_agents_evidence_says_its_own() -> None:
    # A failed node's cause (the health gate's, the guard's rollback) is no reason to skip it.
    failing = {protocol.Cause.WORKLOAD_NOT_READY, protocol.Cause.GUARD_ROLLBACK}
    assert {skips.skip_cause(marks(cause.value)) for cause in failing} == {None}
    skipping = set(protocol.Cause) - failing
    assert {skips.skip_cause(marks(cause.value)) for cause in skipping} == {
        SkippedFor.DRAIN_BLOCKED,
        SkippedFor.DRAIN_TIMEOUT,
        SkippedFor.HOST_REFUSED,
        SkippedFor.STATIC_PODS,
        SkippedFor.NOT_IN_PLACE,
        SkippedFor.NO_AGENT,
    }
    assert skips.skip_cause(marks(result="fault")) is SkippedFor.HOST_FAULT
    assert skips.skip_cause(marks(result="refused")) is SkippedFor.HOST_REFUSED
    # the operator's cause is its newest word: an older evidence of the agent's does not count
    assert skips.skip_cause(marks("StaticPods", result="fault")) is SkippedFor.STATIC_PODS


def test_the_reason_text_is_never_read() -> None:
    assert skips.skip_cause(marks(reason="host fault: EROFS")) is None
    assert skips.skip_cause(marks(cause="SomethingNew")) is None  # another version's kind: unknown
    assert skips.skip_cause(marks(result="pass")) is None


def test_the_text_counts_by_cause_and_what_has_none() -> None:
    assert skips.skipped_text(Tally()) == ""
    assert skips.skipped_text(Tally(skipped=1, skipped_host_fault=1)) == ", 1 skipped: host fault"
    both = Tally(skipped=2, skipped_host_fault=1, skipped_drain_blocked=1, no_agent=1)
    assert skips.skipped_text(both) == ", 3 skipped: 1 host fault, 1 blocked drain, 1 no agent"
    assert (
        skips.skipped_text(Tally(skipped=2, skipped_static_pods=1)) == ", 2 skipped: 1 static pods, 1 other"
    )
    assert skips.faulted(both) == 3
    assert skips.faulted(Tally(skipped=1, skipped_static_pods=1, skipped_not_eligible=3)) == 0
