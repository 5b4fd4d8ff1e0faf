"""spec.drain as the one frozen value every part of a drain reads: the planner (the deadline, the retry
back-off), the step policy (what a timeout does) and the drain attempt (grace period, which pods). Built
once per distinct spec.drain and carried by the Cordon and Drain actions."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache

from eventedpleg.core.rollout.drain import pods as drainpods
from eventedpleg.core.rollout.drain import rules as drainrules
from eventedpleg.core.rollout.drain.taints import Taint
from eventedpleg.models.nodeconfig import (
    DrainMode,
    DrainRule,
    DrainSpec,
    LabelSelector,
    OnDrainBlocked,
    OnDrainTimeout,
    OnInPlaceIneligible,
)


@dataclass(frozen=True)
class DrainPolicy:
    """Made by `of` (the defaults and bounds are DrainSpec's)."""

    timeout_seconds: int  # 0: wait forever (kubectl)
    on_timeout: OnDrainTimeout
    on_blocked: OnDrainBlocked  # a drain that can never finish as things are
    retries: int  # onTimeout: Fail gives the node back; it is taken again this many times
    retry_backoff_seconds: int  # before the first retry; doubled for each next one
    grace_period_seconds: int  # -1: the pod's own
    delete_empty_dir_data: bool
    force: bool  # evict pods without a controller
    blocking_pods: LabelSelector  # a node running one of these is not taken (empty: off)
    pods: LabelSelector  # only these are evicted (empty: every pod kubectl drain would evict)
    stalled_delete_seconds: int  # a deletion older than this no longer holds the drain (0: always does)
    taint: Taint | None = None  # put on the node chosen, `taint_seconds` before its cordon (None: off)
    taint_seconds: int = 0
    in_place: bool = False  # mode: InPlace: neither cordon nor drain where that is safe
    in_place_strict: bool = False  # mode: InPlace, inPlace.onIneligible: Skip: never drain instead
    rules: tuple[DrainRule, ...] = ()  # order and exceptions (core.rollout.drain.rules)

    @staticmethod
    @cache
    def of(spec: DrainSpec) -> DrainPolicy:
        before = spec.taint_before_cordon
        return DrainPolicy(
            timeout_seconds=spec.timeout_seconds,
            on_timeout=spec.on_timeout,
            on_blocked=spec.on_blocked,
            retries=spec.retries,
            retry_backoff_seconds=spec.retry_backoff_seconds,
            grace_period_seconds=spec.grace_period_seconds,
            delete_empty_dir_data=spec.delete_empty_dir_data,
            force=spec.force,
            blocking_pods=spec.blocking_pod_selector,
            pods=spec.pod_selector,
            stalled_delete_seconds=spec.skip_wait_for_delete_timeout_seconds,
            taint=None if before is None else Taint(before.key, before.value, before.effect.value),
            taint_seconds=0 if before is None else before.seconds,
            in_place=spec.mode is DrainMode.IN_PLACE,
            in_place_strict=spec.mode is DrainMode.IN_PLACE
            and spec.in_place.on_ineligible is OnInPlaceIneligible.SKIP,
            rules=spec.rules,
        )

    def cordon_at(self, tainted_since: datetime) -> datetime:
        """When a node tainted at `tainted_since` is cordoned (at once, once the taint is turned off)."""
        return tainted_since + timedelta(seconds=self.taint_seconds)

    def deadline(self, since: datetime) -> datetime | None:
        """When a drain that started at `since` times out (None: never)."""
        return since + timedelta(seconds=self.timeout_seconds) if self.timeout_seconds else None

    def retried(self, attempt: int) -> bool:
        """A drain that timed out for the `attempt`-th time in a row (onTimeout: Fail) is taken again."""
        return 0 < attempt <= self.retries

    def backoff(self, attempt: int) -> timedelta:
        """Wait before automatic retry `attempt` (1-based): base, 2x base, 4x base..."""
        return timedelta(seconds=self.retry_backoff_seconds * 2 ** max(0, attempt - 1))

    @property
    def reads_namespaces(self) -> bool:
        """Whether a drain needs the labels of the pods' namespaces (a rule's namespaceSelector)."""
        return drainrules.reads_namespaces(self.rules)

    def options(
        self,
        now: datetime,
        *,
        force_delete: bool = False,
        namespaces: drainrules.NamespaceLabels = drainrules.NO_NAMESPACES,
    ) -> drainpods.Options:
        """Which pods a drain evicts now; `force_delete` (onTimeout: ForceDelete at the deadline) takes
        emptyDir pods, pods without a controller and drain.rules' WaitCompleted pods too. `namespaces`:
        the labels of the pods' namespaces, read when `reads_namespaces`."""
        return drainpods.Options(
            delete_empty_dir_data=self.delete_empty_dir_data or force_delete,
            force=self.force or force_delete,
            pods=self.pods,
            stalled_delete_seconds=self.stalled_delete_seconds,
            now=now,
            rules=self.rules,
            namespaces=namespaces,
            finish=force_delete,
        )

    def grace(self) -> int | None:
        """The eviction's or delete's grace period (None: the pod's own)."""
        return None if self.grace_period_seconds < 0 else self.grace_period_seconds
