"""Leader election decisions with client-go's rules: expiry by when *we* saw the record change, never by
the holder's renewTime; the leader's own deadline is shorter than any standby's wait."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from eventedpleg.core import leaderelection as le
from eventedpleg.core.leaderelection import (
    ElectionConfigError,
    ElectionTimings,
    LeaseDecision,
    LeaseObservation,
    LeaseRecord,
)

T = ElectionTimings(lease_duration=15, renew_deadline=10, retry_period=2, request_timeout=5)
WALL = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
HOUR, MS = timedelta(hours=1), timedelta(milliseconds=1)


def held(holder: str, renewed: datetime, duration: int = 15, transitions: int = 3) -> LeaseRecord:
    return LeaseRecord(holder, duration, WALL - HOUR, renewed, transitions)


def seen(holder: str, at: float, renewed: datetime = WALL, duration: int = 15) -> LeaseObservation:
    return LeaseObservation(held(holder, renewed, duration), at)


RELEASED = LeaseObservation(LeaseRecord(transitions=4, lease_duration_seconds=1), 50.0)


@pytest.mark.parametrize(
    ("case", "observation", "now", "expected"),
    [
        ("no lease", None, 0.0, LeaseDecision.CREATE),
        ("ours", seen("me", 0.0), 100.0, LeaseDecision.RENEW),
        ("released", RELEASED, 50.0, LeaseDecision.ACQUIRE),
        ("other, just seen", seen("other", 100.0), 100.0, LeaseDecision.WAIT),
        ("other, seen 14.9 s ago", seen("other", 100.0), 114.9, LeaseDecision.WAIT),
        ("other, unchanged 15 s", seen("other", 100.0), 115.0, LeaseDecision.ACQUIRE),
        # The record's own duration counts (client-go), not ours.
        ("other, 30 s lease, 20 s", seen("other", 100.0, duration=30), 120.0, LeaseDecision.WAIT),
        # Skewed clocks: the holder's renewTime says nothing to us, in either direction.
        ("holder 1 h behind, just seen", seen("other", 100.0, WALL - HOUR), 101.0, LeaseDecision.WAIT),
        ("holder 1 h ahead, 15 s unchanged", seen("other", 100.0, WALL + HOUR), 115.0, LeaseDecision.ACQUIRE),
    ],
)  # fmt: skip
def test_decide_lease(
    case: str, observation: LeaseObservation | None, now: float, expected: LeaseDecision
) -> None:
    assert le.decide_lease("me", observation, T, now) is expected, case


def test_observed_time_moves_only_when_the_record_changes() -> None:
    first = le.observe(None, held("other", WALL), now=10.0)
    assert first.at == 10.0
    same = le.observe(first, held("other", WALL), now=20.0)
    assert same.at == 10.0  # unchanged record: still judged from when we first saw it
    renewed = le.observe(same, held("other", WALL + timedelta(seconds=2)), now=24.0)
    assert renewed.at == 24.0
    assert le.decide_lease("me", renewed, T, now=38.9) is LeaseDecision.WAIT
    assert le.decide_lease("me", renewed, T, now=39.0) is LeaseDecision.ACQUIRE


def test_a_standby_whose_wall_clock_runs_far_ahead_waits_while_the_holder_renews() -> None:
    """The old rule (renewTime vs our wall clock) took this Lease at once; the observed rule never does."""
    holder_wall = WALL
    standby_skew = timedelta(minutes=5)
    observation: LeaseObservation | None = None
    for tick in range(60):  # 120 s of renewals every 2 s, each seen by the standby 1 s later
        record = held("leader", holder_wall + timedelta(seconds=2 * tick))
        observation = le.observe(observation, record, now=2.0 * tick + 1.0)
        standby_now = 2.0 * tick + 1.0
        standby_wall = WALL + standby_skew + timedelta(seconds=standby_now)
        assert record.renew_time is not None
        assert standby_wall - record.renew_time > timedelta(
            seconds=15
        )  # what the previous implementation would have done
        assert le.decide_lease("standby", observation, T, standby_now) is LeaseDecision.WAIT


@pytest.mark.parametrize("skew", [timedelta(0), timedelta(hours=-2), timedelta(hours=2)])
def test_leader_stops_before_any_standby_may_take_over(skew: timedelta) -> None:
    """Holder renews last at t=100 (sent) and then hangs; the standby read that record at t>=100."""
    last_sent = 100.0
    stop_leading = le.leading_until(last_sent, T)
    record = held("leader", WALL + skew)
    seen = le.observe(None, record, now=last_sent + 0.001)
    first_takeover = next(
        t / 10
        for t in range(1000, 2000)
        if le.decide_lease("standby", seen, T, t / 10) is LeaseDecision.ACQUIRE
    )
    assert stop_leading == 110.0
    assert first_takeover == pytest.approx(115.0, abs=0.1)
    assert stop_leading < first_takeover


@pytest.mark.parametrize(
    ("case", "decision", "current", "wall", "expected"),
    [
        ("create", LeaseDecision.CREATE, None, WALL, LeaseRecord("me", 15, WALL, WALL, 0)),
        ("renew", LeaseDecision.RENEW, held("me", WALL - 2000 * MS), WALL, held("me", WALL)),
        (
            "acquire",
            LeaseDecision.ACQUIRE,
            held("other", WALL - HOUR),
            WALL,
            LeaseRecord("me", 15, WALL, WALL, 4),
        ),
        # Our wall clock is behind (or stands still): renewTime still moves, so standbys see a change.
        ("renew, clock behind", LeaseDecision.RENEW, held("me", WALL), WALL - HOUR, held("me", WALL + MS)),
        ("renew, clock stopped", LeaseDecision.RENEW, held("me", WALL), WALL, held("me", WALL + MS)),
    ],
)  # fmt: skip
def test_next_record(
    case: str, decision: LeaseDecision, current: LeaseRecord | None, wall: datetime, expected: LeaseRecord
) -> None:
    record = le.next_record("me", decision, current, T, wall)
    assert record == expected, case
    if current is not None:
        assert le.observe(LeaseObservation(current, 0.0), record, 1.0).at == 1.0  # a change others can see


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lease_duration": 10, "renew_deadline": 10}, "lease duration must be greater"),
        ({"lease_duration": 15, "renew_deadline": 20}, "lease duration must be greater"),
        ({"renew_deadline": 2, "retry_period": 2}, "renew deadline must be greater"),
        ({"request_timeout": 0}, "request timeout"),
        ({"request_timeout": 11}, "request timeout"),
    ],
)
def test_timings_are_checked(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ElectionConfigError, match=message):
        ElectionTimings(**kwargs)
