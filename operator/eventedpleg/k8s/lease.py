"""Leader election on a coordination.k8s.io Lease, the way client-go's leaderelection does it.

Exactly one operator replica acts; the others wait. A holder renews every `renew_seconds`; a candidate
takes the Lease over when it has not been renewed for `duration_seconds`. Every write carries the
resourceVersion it read, so two candidates can never both win.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from kubernetes import client

from eventedpleg.k8s.errors import ApiError, NotFound, translated


@dataclass(frozen=True)
class LeaseConfig:
    namespace: str
    name: str
    identity: str
    duration_seconds: int = 15
    renew_seconds: float = 5.0


def _now() -> datetime:
    return datetime.now(UTC)


class LeaseLock:
    def __init__(self, api: client.ApiClient, config: LeaseConfig) -> None:
        self._api = client.CoordinationV1Api(api)
        self.config = config

    @translated
    def _read(self) -> client.V1Lease:
        lease = self._api.read_namespaced_lease(self.config.name, self.config.namespace)
        if lease.spec is None:
            lease.spec = client.V1LeaseSpec()
        return lease

    @translated
    def _create(self, body: client.V1Lease) -> None:
        self._api.create_namespaced_lease(self.config.namespace, body)

    @translated
    def _replace(self, body: client.V1Lease) -> None:
        self._api.replace_namespaced_lease(self.config.name, self.config.namespace, body)

    def holder(self) -> str:
        try:
            spec = self._read().spec
            return str(spec.holder_identity or "") if spec else ""
        except NotFound:
            return ""

    def try_acquire_or_renew(self) -> bool:
        """One attempt; True when we hold the Lease afterwards."""
        cfg, now = self.config, _now()
        try:
            lease = self._read()
        except NotFound:
            spec = client.V1LeaseSpec(
                holder_identity=cfg.identity,
                lease_duration_seconds=cfg.duration_seconds,
                acquire_time=now,
                renew_time=now,
                lease_transitions=0,
            )
            body = client.V1Lease(
                metadata=client.V1ObjectMeta(name=cfg.name, namespace=cfg.namespace), spec=spec
            )
            try:
                self._create(body)
            except ApiError:
                return False
            return True
        except ApiError:
            return False
        spec = lease.spec or client.V1LeaseSpec()
        lease.spec = spec
        renewed = spec.renew_time or spec.acquire_time or datetime.min.replace(tzinfo=UTC)
        expired = now - renewed > timedelta(seconds=spec.lease_duration_seconds or cfg.duration_seconds)
        ours = spec.holder_identity == cfg.identity
        if not ours and not expired and spec.holder_identity:
            return False
        if not ours:
            spec.acquire_time = now
            spec.lease_transitions = (spec.lease_transitions or 0) + 1
        spec.holder_identity = cfg.identity
        spec.lease_duration_seconds = cfg.duration_seconds
        spec.renew_time = now
        try:
            self._replace(lease)  # carries metadata.resourceVersion: a concurrent writer makes this 409
        except ApiError:
            return False
        return True

    def release(self) -> None:
        """Give the Lease up at shutdown so a standby takes over at once instead of after the duration."""
        try:
            lease = self._read()
            spec = lease.spec or client.V1LeaseSpec()
            if spec.holder_identity != self.config.identity:
                return
            spec.holder_identity = ""
            spec.renew_time = None
            self._replace(lease)
        except ApiError:
            return
