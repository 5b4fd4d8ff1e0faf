"""What an agent saw, as one typed document: the agent writes it to the `eventedpleg.io/evidence` annotation
and the operator shows it, shortened, in the NodeConfig's per-node status. Pure.

Every field is bounded (strings clipped, at most MAX_LINES log lines and MAX_CHECKS checks), and both
renderings are valid compact JSON within their limit: when a document is still too long, log lines go
first, then strings are shortened -- never a cut through the middle of the JSON.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError

ANNOTATION_LIMIT = 2048  # the annotation (all of it, nested failure/rollback included)
STATUS_LIMIT = 600  # one node's entry in NodeConfig status.nodeStatuses
MAX_TEXT = 1024
MAX_LINES = 4
MAX_CHECKS = 16


def _clip(text: str, width: int = MAX_TEXT) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _clip_lines(lines: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(_clip(line) for line in lines[:MAX_LINES])


def _clip_checks(checks: dict[str, str]) -> dict[str, str]:
    return {_clip(k, 64): _clip(v) for k, v in list(checks.items())[:MAX_CHECKS]}


Text = Annotated[str, AfterValidator(_clip)]
Lines = Annotated[tuple[str, ...], AfterValidator(_clip_lines)]
Checks = Annotated[dict[str, str], AfterValidator(_clip_checks)]


class Evidence(BaseModel):
    """One verification (result, kubelet, window, checks, lines), or why nothing was verified (rejected,
    refused, drift), or a failed apply (failure, then rollback), or a fallback (fallback, then heal).
    Absent fields are left out of the JSON; unknown ones (another agent version) are kept."""

    model_config = ConfigDict(frozen=True, extra="allow")

    result: Text | None = None  # pass, fail, pending, rejected, refused, drift
    kubelet: Text | None = None
    window: Text | None = None
    checks: Checks | None = None  # check name -> "ok: ...", "FAIL: ...", "wait: ...", "info: ..."
    lines: Lines | None = None  # the kubelet log lines behind the verdict
    error: Text | None = None
    reason: Text | None = None
    fix: Text | None = None
    changed: Text | None = None
    drift: Text | None = None
    fallback: Text | None = None
    failure: Evidence | None = None
    warnings: Lines | None = None
    rollback: Evidence | None = None
    heal: Evidence | None = None

    @classmethod
    def verification(
        cls,
        *,
        result: str,
        kubelet: str,
        window_seconds: float,
        checks: Mapping[str, str],
        lines: Sequence[str],
    ) -> Evidence:
        return cls(
            result=result,
            kubelet=kubelet,
            window=f"{window_seconds:.0f}s",
            checks=dict(checks),
            lines=tuple(lines),
        )

    def to_json(self, limit: int = ANNOTATION_LIMIT) -> str:
        """Compact JSON of at most `limit` characters."""
        return compact_json(self.model_dump(mode="json", exclude_none=True), limit)

    @classmethod
    def parse(cls, text: str) -> Evidence | None:
        """The annotation as written (None when it is not an evidence document)."""
        try:
            return cls.model_validate_json(text)
        except ValidationError:
            return None


@functools.lru_cache(maxsize=256)  # the status is rebuilt on every pass from mostly the same annotations
def for_status(annotation: str, limit: int = STATUS_LIMIT) -> str:
    """The evidence annotation as a node's status entry shows it: valid compact JSON within `limit`."""
    if not annotation:
        return ""
    evidence = Evidence.parse(annotation)
    if evidence is None:
        return compact_json({"unparsed": annotation}, limit)
    return evidence.to_json(limit)


def compact_json(doc: Mapping[str, Any], limit: int) -> str:
    """Compact JSON of at most `limit` characters: drop log lines first, then shorten strings."""
    work = dict(doc)
    text = _dumps(work)
    raw_lines = work.get("lines")
    lines = list(raw_lines) if isinstance(raw_lines, list) else []
    while len(text) > limit and lines:
        lines.pop()
        work["lines"] = lines
        text = _dumps(work)
    width = 160
    while len(text) > limit and width > 16:
        work = {k: _shorten(v, width) for k, v in work.items()}
        text = _dumps(work)
        width //= 2
    cut = limit - 32
    whole = text
    while len(text) > limit and cut > 0:  # escapes can make the wrapped text longer than its slice
        text = _dumps({"truncated": whole[:cut]})
        cut -= max(1, len(text) - limit)
    return text if len(text) <= limit else "{}"


def _dumps(doc: object) -> str:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


def _shorten(value: object, width: int) -> object:
    if isinstance(value, str):
        return _clip(value, width)
    if isinstance(value, dict):
        return {k: _shorten(v, width) for k, v in value.items()}
    if isinstance(value, list):
        return [_shorten(v, width) for v in value]
    return value
