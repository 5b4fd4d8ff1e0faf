"""The reasons the docs name are the ones the product writes (eventedpleg.reasons), and the README names
every Event reason, its Warnings included."""

from __future__ import annotations

import re
from pathlib import Path

from eventedpleg.constants import ConditionType
from eventedpleg.reasons import ConditionReason, EventReason

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]
WRITTEN = {r.value for r in EventReason} | {r.value for r in ConditionReason}


def _events_bullets() -> str:
    """README's two bullets "- Events on the NodeConfig: ..." and "- Events on each Node ...", joined."""
    text = README.read_text()
    found = re.findall(r"^- Events on (?:the NodeConfig|each Node)\b.*?(?=^- |^#|\Z)", text, re.M | re.S)
    assert len(found) == 2, found
    return "".join(found)


def _named_as_reasons(text: str) -> set[str]:
    """Words the text gives as a reason: `X` right after "reason", "Event" or "Warning"."""
    return set(re.findall(r"\b(?:reason|Event|Warning)\s+`([A-Za-z]+)`", text))


def test_every_reason_the_docs_name_is_one_the_product_writes() -> None:
    named = {(path.name, word) for path in DOCS for word in _named_as_reasons(path.read_text())}
    assert named  # the docs were read at all
    assert {(path, word) for path, word in named if word not in WRITTEN} == set()


def test_the_readme_events_bullets_name_every_event_reason_and_nothing_else() -> None:
    listed = set(re.findall(r"`([A-Z][A-Za-z]+)`", _events_bullets()))
    assert {r.value for r in EventReason} - listed == set()
    # The conditions whose reasons become Events are named by their type.
    assert listed - WRITTEN - {ConditionType.DEGRADED, ConditionType.STALLED} == set()
