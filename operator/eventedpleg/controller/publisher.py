"""What a pass tells people: Events on condition transitions and node failures, metrics, and the status
write (at most one a second while only counts move; at once when a condition flips)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from eventedpleg.constants import ConditionType
from eventedpleg.controller.configstate import ConfigState
from eventedpleg.controller.nodeconfigview import InvalidSpec, NodeConfigView
from eventedpleg.core.rollout import status
from eventedpleg.core.rollout.planner import Summary
from eventedpleg.k8s import nodeconfigs
from eventedpleg.k8s.errors import ApiError
from eventedpleg.k8s.events import EventRecorder, ObjectRef
from eventedpleg.logfields import fields
from eventedpleg.models.nodeconfig import ConditionStatus, NodeConfigStatus
from eventedpleg.reasons import NODE_FAILURE_EVENTS, ConditionReason, EventReason

log = logging.getLogger(__name__)
STATUS_INTERVAL = 1.0  # at most one status write a second while only the counts move


@dataclass
class StatusPublisher:
    api: Any  # kubernetes ApiClient (typed only inside eventedpleg.k8s)
    recorder: EventRecorder
    clock: Callable[[], datetime]  # transition times of the statuses it makes itself (invalid, first)
    monotonic: Callable[[], float] = time.monotonic  # paces the writes (STATUS_INTERVAL)

    def publish(
        self,
        state: ConfigState,
        ref: ObjectRef,
        previous: NodeConfigStatus,
        new: NodeConfigStatus,
        summary: Summary,
    ) -> bool:
        """Events on transitions, metrics, and the status write. True when a write was held back."""
        last, last_at = state.written or (previous, 0.0)
        before = {cond.type: cond.status for cond in last.conditions}
        after = {cond.type: cond for cond in new.conditions}
        available, degraded = after[ConditionType.AVAILABLE], after[ConditionType.DEGRADED]
        if (
            available.status is ConditionStatus.TRUE
            and before.get(ConditionType.AVAILABLE) != available.status
        ):
            self.recorder.emit(ref, "Normal", EventReason.ROLLOUT_COMPLETE, available.message)
        if degraded.status != before.get(ConditionType.DEGRADED, ConditionStatus.FALSE):
            if degraded.status is ConditionStatus.TRUE:
                self.recorder.emit(ref, "Warning", ConditionReason(degraded.reason), degraded.message)
            else:
                self.recorder.emit(ref, "Normal", EventReason.RECOVERED, "no longer degraded")
        stalled = after[ConditionType.STALLED]
        if (
            stalled.status is ConditionStatus.TRUE
            and stalled.reason == ConditionReason.BUDGET_HELD_BY_OTHER_NODES
            and before.get(ConditionType.STALLED) != stalled.status
        ):
            self.recorder.emit(ref, "Warning", ConditionReason.BUDGET_HELD_BY_OTHER_NODES, stalled.message)
        seen, failures = state.seen_failures, 0
        for note in summary.failures:
            if (note.name, note.since) not in seen:
                seen.add((note.name, note.since))
                failures += 1
                reason = NODE_FAILURE_EVENTS[note.state]
                self.recorder.emit(ref, "Warning", reason, f"{note.name}: {note.reason}")
        conditions = {cond.type.value: cond.status is ConditionStatus.TRUE for cond in new.conditions}
        state.record_pass(summary, conditions, failures)
        if new == last:
            return False  # already written; the watch will catch the cached body up
        flipped = {c.type: c.status for c in new.conditions} != before
        if not flipped and self.monotonic() - last_at < STATUS_INTERVAL:
            return True
        self._write(state, new)
        return False

    def invalid(self, state: ConfigState, nodeconfig: NodeConfigView, spec: InvalidSpec) -> None:
        """Stalled and Degraded (InvalidSpec), naming the first problems (`spec`: nodeconfig.spec, known
        invalid); written once per change."""
        problems, previous = spec.problems, nodeconfig.status
        new = status.invalid_status(
            previous, problems=problems, generation=nodeconfig.generation, now=self.clock()
        )
        if new != previous:
            self.recorder.emit(nodeconfig.ref, "Warning", ConditionReason.INVALID_SPEC, problems)
            self._write(state, new)

    def first(self, state: ConfigState, nodeconfig: NodeConfigView, waiting: str) -> None:
        """Reconciling for a generation not planned yet (see status.first_status); written once."""
        new = status.first_status(
            nodeconfig.status, generation=nodeconfig.generation, now=self.clock(), waiting=waiting
        )
        if new is not None and (state.written or (None, 0.0))[0] != new:
            self._write(state, new)

    def _write(self, state: ConfigState, new: NodeConfigStatus) -> None:
        try:
            nodeconfigs.patch_status(self.api, state.name, new.to_api())
            state.written = (new, self.monotonic())
        except ApiError as exc:
            said = fields(nodeconfig=state.name)
            log.warning("could not write status of %s: %s", state.name, exc, extra=said)
