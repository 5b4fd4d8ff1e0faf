"""What an agent's host check found before any node is taken: the `eventedpleg.io/host-check` annotation.

The agent writes it on its own Node (at start and while idle), from the same pure decision it makes before
writing anything when asked to apply (core.node.facts.hostplan.plan_host), for turning Evented PLEG on in each
kubeletConfig mode. The operator reads it before the cordon: a node whose agent would refuse the change is
marked Skipped with the agent's own reason and never cordoned or drained; `eventedpleg preflight` shows it.
The check is also the operator's sign of a live agent: a node is cordoned only while its check is fresh
(`absence`). A live agent publishes at least every `every` seconds (it writes an unchanged verdict again
once that old, hostcheckphase.REFRESH); a check older than FRESH_PERIODS times that, or none at all (an agent
that never ran there), means no live agent. An agent that stops (its pod deleted, replaced or evicted) marks
its check `stopped` on the way out, so the operator knows at once and since when (`back_by`): a node it
holds is given back once the agent has been gone GONE_GRACE, long enough for a DaemonSet's rolling update to
bring the next agent up, and far below the verification timeout.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from eventedpleg.protocol import format_time, parse_time

# The period a check without `every` (an older agent) is taken to be written again at: hostcheckphase.REFRESH.
DEFAULT_EVERY = 3600.0
# A check is fresh while younger than this many of its agent's publishing periods: one period missed is a
# slow API server, three are an agent that is not running.
FRESH_PERIODS = 3
# How long a node the operator holds waits for a stopped agent to come back before it is given back: a
# rolling update of the agent DaemonSet replaces a pod in seconds when the image is present (the lab's
# helm upgrade test), and a minute and a half still covers an image pulled on the way.
GONE_GRACE = timedelta(seconds=90)


@dataclass(frozen=True)
class HostCheck:
    at: datetime  # when the agent looked
    refusals: Mapping[str, str] = field(default_factory=dict)  # kubeletConfig mode -> refusal ("" if fine)
    every: float = DEFAULT_EVERY  # seconds: the agent publishes its check again at least this often
    stopped: datetime | None = None  # when its agent stopped (no live agent since then)

    @property
    def fresh_until(self) -> datetime:
        at = self.at if self.at.tzinfo is not None else self.at.replace(tzinfo=UTC)  # ours are in UTC
        return at + timedelta(seconds=FRESH_PERIODS * self.every)

    def refusal(self, mode: str) -> str:
        return self.refusals.get(mode, "")

    def to_json(self) -> str:
        doc: dict[str, object] = {
            "at": format_time(self.at),
            "every": int(self.every),
            "refusals": dict(sorted(self.refusals.items())),
        }
        if self.stopped is not None:
            doc["stopped"] = format_time(self.stopped)
        return json.dumps(doc, separators=(",", ":"))


def parse(text: str | None) -> HostCheck | None:
    """The annotation's value; anything unreadable is no check at all."""
    try:
        doc = json.loads(text or "")
        at = parse_time(str(doc["at"]))
        refusals = {str(mode): str(why) for mode, why in dict(doc.get("refusals") or {}).items()}
        every = float(doc.get("every") or DEFAULT_EVERY)
        stopped = parse_time(str(doc["stopped"])) if doc.get("stopped") else None
    except (ValueError, KeyError, TypeError):
        return None
    if at is None or (stopped is None and doc.get("stopped")):  # an unreadable time: no check at all
        return None
    if not every > 0:
        return None
    return HostCheck(at, refusals, every, stopped)


NO_CHECK = (
    "no host check from the eventedpleg agent: its pod is not running there (not scheduled, not ready, "
    "crash-looping, or the node's architecture or taints keep it off)"
)


def absence(text: str | None, now: datetime) -> str:
    """Why `text` (the node's host-check annotation) shows no live agent at `now`; "" when it does."""
    if not text:
        return NO_CHECK
    check = parse(text)
    if check is None:
        return (
            f"unreadable host check {text[:80]!r}: the eventedpleg agent there is not one this operator knows"
        )
    if check.stopped is not None:
        return (
            f"the eventedpleg agent stopped at {format_time(check.stopped)} (its pod was "
            "deleted, replaced or evicted) and no agent has started there since"
        )
    if now <= check.fresh_until:
        return ""
    return (
        f"the eventedpleg agent's last host check is from {format_time(check.at)}, older "
        f"than {FRESH_PERIODS} of its {int(check.every)}s publishing periods: its pod is not running"
    )


def back_by(text: str | None) -> datetime | None:
    """When the agent that marked `text` stopped is to be back by (its stop + GONE_GRACE); None when the
    check does not say its agent stopped (none, unreadable, or gone stale without a word: no grace)."""
    check = parse(text)
    if check is None or check.stopped is None:
        return None
    return check.stopped + GONE_GRACE


def stopped(text: str | None, now: datetime) -> HostCheck:
    """The check an agent leaves on its Node as it stops: its last verdict (none if unreadable), stopped at
    `now`."""
    last = parse(text)
    if last is None:
        return HostCheck(now, {}, DEFAULT_EVERY, now)
    return HostCheck(last.at, last.refusals, last.every, now)
