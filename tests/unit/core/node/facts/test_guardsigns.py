"""core.node.facts.guardsigns: the guard's detection, from real kubelet v1.36.4 lines and /metrics.

`kubelet-v1.36.4-wedge.log` is real: the rig's kubelet (v1.36.4, --v=4, containerd 2.2.9) at its start
(the start-up skips every kubelet logs), then wedged by `eventedpleg realnode wedge` (the discards, the
wedge lines at the back-off's intervals), then discards of a later start. The metrics are the real v1.36.4
scrape with the three values the guard reads set as the rig showed them healthy and wedged
(docs/compatibility.md kubelet-pleg-wedge: 110 discards, the gauge 43.7 s old).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from eventedpleg.core.guardincidents import Kind
from eventedpleg.core.node.facts import guardsigns
from eventedpleg.core.node.facts.guardsigns import Streak, detect, line_time
from eventedpleg.core.node.facts.promtext import Metrics, parse_metrics
from eventedpleg.core.node.facts.verify import CONN_ERROR

FIXTURES = Path(__file__).parents[4] / "realnode" / "fixtures"
LINES = tuple((FIXTURES / "kubelet-v1.36.4-wedge.log").read_text().splitlines())
SCRAPE = (FIXTURES / "kubelet-metrics-v1.36.4.txt").read_text()
NOW = datetime(2026, 11, 28, 13, 16, 0, tzinfo=UTC)
FIRST_WEDGE = datetime(2026, 11, 28, 13, 15, 54, 855580, tzinfo=UTC)


def scrape(*, discards: float, age: float, errors: float = 5, now: datetime = NOW) -> Metrics:
    """The real scrape with the guard's three metrics set."""
    text = SCRAPE
    for name, value in (
        (guardsigns.DISCARDS, discards),
        (guardsigns.LAST_SEEN, now.timestamp() - age),
        (CONN_ERROR, errors),
    ):
        text, n = re.subn(rf"^{name} \S+$", f"{name} {value!r}", text, flags=re.M)
        assert n == 1, name
    return parse_metrics(text)


def test_the_real_wedge_line_is_a_wedge_at_its_own_time() -> None:
    sign, _ = detect(LINES, scrape(discards=0, age=1), Streak(), NOW)
    assert sign is not None
    assert sign.kind is Kind.WEDGE
    assert sign.at == FIRST_WEDGE
    assert "pleg event channel capacity is full with 1000 events" in sign.seen


def test_start_up_skips_and_discards_alone_are_no_wedge() -> None:
    quiet = tuple(ln for ln in LINES if guardsigns.WEDGE_MATCH not in ln)
    assert any("Skipping pod synchronization" in ln for ln in quiet)  # the start-up skips are there
    assert any("Event channel is full" in ln for ln in quiet)
    sign, _ = detect(quiet, scrape(discards=0, age=1), Streak(), NOW)
    assert sign is None


def test_metrics_see_the_wedge_on_the_second_stale_look_dated_from_the_first() -> None:
    first, watch = detect((), scrape(discards=110, age=38.7), Streak(), NOW)
    assert first is None
    later = NOW + timedelta(seconds=5)
    sign, _ = detect((), scrape(discards=110, age=43.7, now=later), watch, later)
    assert sign is not None
    assert sign.kind is Kind.WEDGE
    assert sign.at == NOW
    assert "kubelet_pleg_discard_events 110" in sign.seen


def test_a_fresh_gauge_or_no_discards_breaks_the_run() -> None:
    _, watch = detect((), scrape(discards=110, age=40), Streak(), NOW)
    sign, watch = detect((), scrape(discards=110, age=0.6), watch, NOW + timedelta(seconds=5))
    assert sign is None
    assert watch.stale == 0
    # Kubelet 1.37 (no evented health check): discards and a gauge a slow relist left stale are no wedge.
    _, watch = detect((), scrape(discards=100, age=20), Streak(), NOW, stream_drives=False)
    sign, _ = detect((), scrape(discards=100, age=25), watch, NOW + timedelta(seconds=5), stream_drives=False)
    assert sign is None
    # Stale right after a start with nothing discarded: the first relist has not run, no wedge.
    _, watch = detect((), scrape(discards=0, age=40), Streak(), NOW)
    sign, _ = detect((), scrape(discards=0, age=45), watch, NOW + timedelta(seconds=5))
    assert sign is None


def test_a_rising_stream_error_counter_on_two_looks_is_the_stream_lost() -> None:
    _, watch = detect((), scrape(discards=0, age=1, errors=5), Streak(), NOW)
    sign, watch = detect((), scrape(discards=0, age=1, errors=6), watch, NOW + timedelta(seconds=5))
    assert sign is None
    sign, _ = detect((), scrape(discards=0, age=1, errors=7), watch, NOW + timedelta(seconds=10))
    assert sign is not None
    assert sign.kind is Kind.EVENTS_LOST
    assert sign.at == NOW + timedelta(seconds=5)
    # From kubelet 1.37 the generic PLEG relists at its normal period whatever the stream does: no sign.
    _, watch = detect((), scrape(discards=0, age=1, errors=5), Streak(), NOW, stream_drives=False)
    _, watch = detect(
        (), scrape(discards=0, age=1, errors=6), watch, NOW + timedelta(seconds=5), stream_drives=False
    )
    sign, _ = detect(
        (), scrape(discards=0, age=1, errors=7), watch, NOW + timedelta(seconds=10), stream_drives=False
    )
    assert sign is None
    # A counter that stays where it was (the 5 of the fixture's start) is no sign.
    _, watch = detect((), scrape(discards=0, age=1, errors=5), Streak(), NOW)
    _, watch = detect((), scrape(discards=0, age=1, errors=5), watch, NOW + timedelta(seconds=5))
    sign, _ = detect((), scrape(discards=0, age=1, errors=5), watch, NOW + timedelta(seconds=10))
    assert sign is None


def test_a_klog_time_far_from_the_clock_is_not_believed() -> None:
    wedge = next(ln for ln in LINES if guardsigns.WEDGE_MATCH in ln)
    assert line_time(wedge, NOW) == FIRST_WEDGE
    assert line_time(wedge, NOW + timedelta(hours=2)) is None  # another time zone
    assert line_time("no header here", NOW) is None
    sign, _ = detect((wedge,), None, Streak(), NOW + timedelta(hours=2))
    assert sign is not None
    assert sign.at == NOW + timedelta(hours=2)


@given(st.lists(st.text(max_size=200), max_size=20))
def test_no_line_without_the_wedge_message_is_a_wedge(lines: list[str]) -> None:
    kept = tuple(ln for ln in lines if guardsigns.WEDGE_MATCH not in ln)
    sign, _ = detect(kept, None, Streak(), NOW)
    assert sign is None


# `kubelet-v1.36.4-status-lost.log` is real: the rig's kubelet (v1.36.4, --v=4, gate on) 2026-11-28
# 15:59-16:04, one static pod given an old sandbox that was then removed (docs/compatibility.md
# kubelet-136-missed-restarts): its lines naming a sandbox failure, a missing sandbox or a skipped sync.
LOST = tuple((FIXTURES / "kubelet-v1.36.4-status-lost.log").read_text().splitlines())
LOST_NOW = datetime(2026, 11, 28, 16, 4, 0, tzinfo=UTC)
POD = "default/idle-000-realnode"


def _looks(lines: tuple[str, ...], every: timedelta) -> list[tuple[datetime, tuple[str, ...]]]:
    """The lines as looks every `every` would have read them: (the look's time, what it read)."""
    timed = [(line_time(ln, LOST_NOW), ln) for ln in lines]
    assert all(t is not None for t, _ in timed)
    start = min(t for t, _ in timed if t is not None)
    looks, at = [], start + every
    while timed:
        looks.append((at, tuple(ln for t, ln in timed if t is not None and t < at)))
        timed = [(t, ln) for t, ln in timed if t is not None and t >= at]
        at += every
    return looks


def test_the_real_lost_status_is_seen_at_its_second_refusal_dated_from_the_first() -> None:
    refusals = [ln for ln in LOST if guardsigns.refused_first(ln) == POD]
    assert len(refusals) == 19  # one per kuberuntime_sandbox line; the pod workers' re-quote never counts
    assert all("kuberuntime_sandbox.go" in ln for ln in refusals)
    watch, found = Streak(), None
    for at, lines in _looks(LOST, timedelta(seconds=5)):
        sign, watch = detect(lines, None, watch, at)
        if sign is not None:
            found = (at, sign)
            break
    assert found is not None
    at, sign = found
    assert sign.kind is Kind.STATUS_LOST
    assert sign.at == line_time(refusals[0], LOST_NOW)
    assert at - sign.at <= timedelta(seconds=20)  # the second refusal came 15.6 s after the first
    assert sign.seen.startswith(f"{POD}: the runtime refused its first sandbox 2 times in 60s")


def test_a_sandbox_that_failed_otherwise_first_excuses_its_refusals() -> None:
    """A hanging CNI plugin: the first request times out, then each retry is refused while it runs."""
    first = next(ln for ln in LOST if guardsigns.refused_first(ln) == POD)
    timeout = re.sub(
        r'err=".*"(\s+pod=)',
        r'err="rpc error: code = DeadlineExceeded desc = context deadline exceeded"\1',
        first,
    )
    assert guardsigns.sandbox_failure(timeout) == (POD, False)
    refusals = tuple(ln for ln in LOST if guardsigns.refused_first(ln) == POD)
    sign, _ = detect((timeout, *refusals), None, Streak(), LOST_NOW)
    assert sign is None
    sign, _ = detect(refusals, None, Streak(), LOST_NOW)
    assert sign is not None and sign.kind is Kind.STATUS_LOST


def test_refusals_further_apart_than_the_window_are_no_sign() -> None:
    refusals = [ln for ln in LOST if guardsigns.refused_first(ln) == POD]
    watch = Streak()
    for line in refusals[::6]:  # 70-80 s apart
        at = line_time(line, LOST_NOW)
        assert at is not None
        sign, watch = detect((line,), None, watch, at)
        assert sign is None, sign


def test_kubelet_137_lost_status_lines_raise_nothing() -> None:
    """From 1.37 the evented PLEG writes no cache: whatever refuses a sandbox there is not the gate's."""
    sign, watch = detect(LOST, None, Streak(), LOST_NOW, stream_drives=False)
    assert sign is None
    assert watch.refused == ()
