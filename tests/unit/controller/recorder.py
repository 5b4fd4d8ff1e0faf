"""The controller tests' Event recorder: keeps (kind, reason, message) instead of writing an Event."""

from __future__ import annotations

from typing import Literal

from eventedpleg.k8s.events import EventRecorder, ObjectRef
from eventedpleg.reasons import ConditionReason, EventReason


class Recorder(EventRecorder):
    def __init__(self) -> None:  # no API client, no pool: nothing is sent
        self.sent: list[tuple[str, str, str]] = []

    def emit(
        self,
        ref: ObjectRef,
        kind: Literal["Normal", "Warning"],
        reason: EventReason | ConditionReason,
        message: str,
    ) -> None:
        self.sent.append((kind, reason, message))
