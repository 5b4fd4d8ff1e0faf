"""Leader election on a coordination.k8s.io Lease with client-go's rules (core.leaderelection).

Exactly one operator replica acts; the others wait. Expiry is judged by when this replica last saw the
record change (its own monotonic clock), never by the holder's renewTime; the leader counts itself
leader only until renew_deadline after its last successful renew began, and every Lease request has a
client-side timeout, so a leader cut off from the API server stops before a standby may take over.
Every write carries the resourceVersion it read, so two candidates can never both win one round.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from kubernetes import client

from eventedpleg.core import leaderelection as le
from eventedpleg.core.leaderelection import (
    ElectionTimings,
    LeaseDecision,
    LeaseObservation,
    LeaseRecord,
)
from eventedpleg.k8s.errors import ApiError, NotFound, translated

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaseConfig:
    namespace: str
    name: str
    identity: str
    timings: ElectionTimings = field(default_factory=ElectionTimings)


def _record(spec: client.V1LeaseSpec | None) -> LeaseRecord:
    if spec is None:
        return LeaseRecord()
    return LeaseRecord(
        holder=str(spec.holder_identity or ""),
        lease_duration_seconds=int(spec.lease_duration_seconds or 0),
        acquire_time=spec.acquire_time,
        renew_time=spec.renew_time,
        transitions=int(spec.lease_transitions or 0),
    )


def _spec(record: LeaseRecord) -> client.V1LeaseSpec:
    return client.V1LeaseSpec(
        holder_identity=record.holder or None,
        lease_duration_seconds=record.lease_duration_seconds or None,
        acquire_time=record.acquire_time,
        renew_time=record.renew_time,
        lease_transitions=record.transitions,
    )


class LeaseLock:
    """One replica's side of the election. `monotonic` and `wall` are injectable (tests skew them)."""

    def __init__(
        self,
        api: client.ApiClient,
        config: LeaseConfig,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._api = client.CoordinationV1Api(api)
        self.config = config
        self._monotonic, self._wall = monotonic, wall
        self._observed: LeaseObservation | None = None
        self._valid_until = float("-inf")  # monotonic instant our leadership ends unless renewed
        self._lock = threading.Lock()

    @property
    def timings(self) -> ElectionTimings:
        return self.config.timings

    def leading(self) -> bool:
        """True while our last successful renew is younger than the renew deadline. Purely time-based:
        it turns False on time even while a renew request hangs."""
        return self._monotonic() < self._valid_until

    # -- API calls, each with a client-side timeout ----------------------------------------------------

    @translated
    def _read(self) -> client.V1Lease:
        lease: client.V1Lease = self._api.read_namespaced_lease(
            self.config.name, self.config.namespace, _request_timeout=self.timings.request_timeout
        )
        return lease

    @translated
    def _create(self, body: client.V1Lease) -> None:
        self._api.create_namespaced_lease(
            self.config.namespace, body, _request_timeout=self.timings.request_timeout
        )

    @translated
    def _replace(self, body: client.V1Lease) -> None:
        self._api.replace_namespaced_lease(
            self.config.name, self.config.namespace, body, _request_timeout=self.timings.request_timeout
        )

    # -- election --------------------------------------------------------------------------------------

    def holder(self) -> str:
        try:
            return _record(self._read().spec).holder
        except NotFound:
            return ""

    def try_acquire_or_renew(self) -> bool:
        """One attempt; True when we hold the Lease afterwards (and `leading()` was extended)."""
        with self._lock:
            cfg = self.config
            started = self._monotonic()
            try:
                lease: client.V1Lease | None = self._read()
            except NotFound:
                lease = None
            except ApiError as exc:
                log.debug("reading the Lease failed: %s", exc)
                return False
            current = _record(lease.spec) if lease is not None else None
            if current is not None:
                self._observed = le.observe(self._observed, current, self._monotonic())
            observation = self._observed if current is not None else None
            decision = le.decide_lease(cfg.identity, observation, self.timings, self._monotonic())
            if decision is LeaseDecision.WAIT:
                return False
            record = le.next_record(cfg.identity, decision, current, self.timings, self._wall())
            try:
                if lease is None:
                    meta = client.V1ObjectMeta(name=cfg.name, namespace=cfg.namespace)
                    self._create(client.V1Lease(metadata=meta, spec=_spec(record)))
                else:
                    lease.spec = _spec(record)
                    self._replace(lease)  # carries metadata.resourceVersion: a concurrent writer gets 409
            except ApiError as exc:
                log.debug("writing the Lease failed: %s", exc)
                return False
            self._observed = LeaseObservation(record, self._monotonic())
            self._valid_until = max(self._valid_until, le.leading_until(started, self.timings))
            return True

    def step_down(self) -> None:
        """Stop counting ourselves leader at once (before release, or after losing)."""
        self._valid_until = float("-inf")

    def release(self) -> None:
        """Give the Lease up at shutdown so a standby takes over at once instead of after the duration."""
        self.step_down()
        try:
            lease = self._read()
            record = _record(lease.spec)
            if record.holder != self.config.identity:
                return
            lease.spec = _spec(LeaseRecord(transitions=record.transitions, lease_duration_seconds=1))
            self._replace(lease)
        except ApiError:
            return
