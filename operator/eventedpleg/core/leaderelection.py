"""Leader election decisions with client-go's rules (k8s.io/client-go/tools/leaderelection), pure.

Why not compare the holder's renewTime with our own clock: two machines' wall clocks differ, and a
standby whose clock runs ahead would take a Lease that is still being renewed. client-go instead
remembers when *this* replica last saw the record change (observedTime, on its own monotonic clock)
and treats the Lease as expired only when no change was seen for leaseDurationSeconds. The holder, for
its part, counts itself leader only until `renew_deadline` after the start of its last successful
renew; renew_deadline < lease_duration, so it has stopped acting before any standby may take over.

Times here are floats from an injected monotonic clock; the wall-clock stamps written into the Lease
(acquireTime, renewTime) are informational and never compared across machines.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta


class ElectionConfigError(ValueError):
    pass


@dataclass(frozen=True)
class ElectionTimings:
    """client-go's three durations, plus the client-side timeout of each Lease request."""

    lease_duration: float = 15.0  # a standby waits this long without seeing the record change
    renew_deadline: float = 10.0  # the leader stops acting when it has not renewed for this long
    retry_period: float = 2.0  # between attempts, for leader and standby alike
    request_timeout: float = 5.0  # each Lease GET/UPDATE/CREATE

    def __post_init__(self) -> None:
        # client-go: leaseDuration > renewDeadline > retryPeriod * JitterFactor (1.2).
        if not self.lease_duration > self.renew_deadline:
            raise ElectionConfigError("lease duration must be greater than the renew deadline")
        if not self.renew_deadline > self.retry_period * 1.2:
            raise ElectionConfigError("renew deadline must be greater than 1.2 x the retry period")
        if not 0 < self.request_timeout <= self.renew_deadline:
            raise ElectionConfigError("request timeout must be positive and at most the renew deadline")


@dataclass(frozen=True)
class LeaseRecord:
    """The Lease spec fields that make up the election record (client-go's LeaderElectionRecord)."""

    holder: str = ""
    lease_duration_seconds: int = 0
    acquire_time: datetime | None = None
    renew_time: datetime | None = None
    transitions: int = 0


@dataclass(frozen=True)
class LeaseObservation:
    """The record as this replica last saw it, and when (monotonic) it first saw it in that form."""

    record: LeaseRecord
    at: float


def observe(previous: LeaseObservation | None, record: LeaseRecord, now: float) -> LeaseObservation:
    """client-go: observedTime moves only when the record differs from the one observed before.

    `now` should be taken after the read returned: a later observation only makes a standby wait longer.
    """
    if previous is not None and previous.record == record:
        return previous
    return LeaseObservation(record, now)


def expired(observation: LeaseObservation, timings: ElectionTimings, now: float) -> bool:
    """No change seen for the record's own leaseDurationSeconds (ours when the record has none)."""
    duration = observation.record.lease_duration_seconds or timings.lease_duration
    return now >= observation.at + duration


class LeaseDecision(enum.Enum):
    CREATE = "create"  # no Lease yet: create it holding it
    ACQUIRE = "acquire"  # free or expired: take it over (a new acquireTime, transitions + 1)
    RENEW = "renew"  # ours: write a new renewTime
    WAIT = "wait"  # held by someone else and not expired


def decide_lease(
    identity: str, observation: LeaseObservation | None, timings: ElectionTimings, now: float
) -> LeaseDecision:
    """What one attempt should write, given what we observed (None: the Lease does not exist)."""
    if observation is None:
        return LeaseDecision.CREATE
    holder = observation.record.holder
    if holder == identity:
        return LeaseDecision.RENEW
    if not holder or expired(observation, timings, now):
        return LeaseDecision.ACQUIRE
    return LeaseDecision.WAIT


def next_record(
    identity: str,
    decision: LeaseDecision,
    current: LeaseRecord | None,
    timings: ElectionTimings,
    wall: datetime,
) -> LeaseRecord:
    """The record to write for CREATE/ACQUIRE/RENEW. renewTime always moves forward, even when our wall
    clock is behind the previous writer's or stands still: a standby sees a change only if it moves."""
    duration = int(timings.lease_duration)
    previous = current.renew_time if current else None
    stamp = wall if previous is None or wall > previous else previous + timedelta(milliseconds=1)
    if decision is LeaseDecision.RENEW and current is not None:
        return LeaseRecord(identity, duration, current.acquire_time or stamp, stamp, current.transitions)
    transitions = 0 if current is None else current.transitions + 1  # client-go counts every change
    return LeaseRecord(identity, duration, stamp, stamp, transitions)


def leading_until(renew_started: float, timings: ElectionTimings) -> float:
    """A leader whose last successful write was *sent* at `renew_started` leads until this instant.

    Measured from the send, not the answer: the server stamped the record no earlier than that, and a
    standby's clock for this record starts no earlier than when it read it back.
    """
    return renew_started + timings.renew_deadline
