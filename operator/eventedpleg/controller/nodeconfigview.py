"""One NodeConfig as a watch event (or a read) delivered it, validated once: every pass until the next event
plans from this view and parses nothing (pydantic validation was a fifth of a pass's CPU)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg.core.rollout import approval, retry
from eventedpleg.core.rollout.snapshot import Peer
from eventedpleg.k8s.events import ObjectRef
from eventedpleg.models.nodeconfig import NodeConfigSpec, NodeConfigStatus
from eventedpleg.protocol import parse_time


@dataclass(frozen=True)
class InvalidSpec:
    """A spec that failed validation: the first problems, in one line (status and the InvalidSpec Event)."""

    problems: str


@dataclass(frozen=True)
class NodeConfigView:
    name: str
    ref: ObjectRef  # for its Events
    generation: int
    created: datetime
    spec: NodeConfigSpec | InvalidSpec
    status: NodeConfigStatus  # as last written; one that cannot be read counts as none
    retry: Mapping[str, datetime]  # node -> the failure to retry (ANN_RETRY, core.rollout.retry)
    approved: Mapping[str, str]  # node -> the config approved (ANN_APPROVED, core.rollout.approval)

    @property
    def peer(self) -> Peer | None:
        """This NodeConfig for its peers' overlap detection; an invalid one manages nothing."""
        if isinstance(self.spec, InvalidSpec):
            return None
        return Peer(self.name, self.created, self.spec.node_selector)


def view_of(body: Mapping[str, Any]) -> NodeConfigView:
    """The view of one NodeConfig body; the only place its spec and status are validated."""
    meta = body["metadata"]
    name = str(meta["name"])
    annotations = meta.get("annotations") or {}
    return NodeConfigView(
        name=name,
        ref=ObjectRef(c.KIND, name, f"{protocol.GROUP}/{c.VERSION}", str(meta.get("uid", ""))),
        generation=int(meta.get("generation", 0)),
        created=parse_time(str(meta.get("creationTimestamp", ""))) or datetime.min.replace(tzinfo=UTC),
        spec=_spec(body.get("spec") or {}),
        status=_status(body.get("status") or {}),
        retry=retry.parse(annotations.get(protocol.ANN_RETRY)),
        approved=approval.parse(annotations.get(protocol.ANN_APPROVED)),
    )


def _spec(raw: Mapping[str, Any]) -> NodeConfigSpec | InvalidSpec:
    try:
        return NodeConfigSpec.model_validate(raw)
    except ValidationError as exc:
        return InvalidSpec(
            "; ".join(
                f"spec.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()[:5]
            )
        )


def _status(raw: Mapping[str, Any]) -> NodeConfigStatus:
    try:
        return NodeConfigStatus.model_validate(raw)
    except ValidationError:
        return NodeConfigStatus()
