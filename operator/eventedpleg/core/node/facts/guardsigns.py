"""What the guard looks for on a Done node, from what the kubelet says. Pure.

Read at k8s.io/kubernetes v1.36.4 (`pkg/kubelet`; docs/compatibility.md "kubelet-pleg-wedge"):

- **The wedge**, earliest and certain: the journal line `"Skipping pod synchronization" err="EventedPLEG is
  not healthy: ..."` (`kubelet.go:2646`), logged the moment `syncLoop` meets the full channel and every
  0.1 s doubling to 5 s after. It is followed from a cursor, filtered by the journal itself
  (core.node.phases.effects.FollowJournal), so a look costs what was logged since the last one.
- **The wedge from /metrics** (kubelet <= 1.36) when the journal says nothing (no journald, a log that
  rotated): discards (`kubelet_pleg_discard_events`, `pleg/generic.go:395-400`, `pleg/evented.go:323-331`) and
  `kubelet_pleg_last_seen_seconds` stale on two looks in a row (wedged, only the generic check passes and
  sets it to its last relist, up to 300 s old; healthy, the evented check sets it to now every second).
- Not used: `/healthz` (its syncloop check fails only after 5 minutes) and the Ready condition (the same
  runtime error, reaching the API up to `nodeStatusUpdateFrequency` later).
- **The event stream lost without fallback** (kubelet <= 1.36): `kubelet_evented_pleg_connection_error_count`
  rising on two looks in a row while the kubelet keeps the gate on (the fallback is the after-Done check's,
  core.node.phases.donephase): pods change meanwhile only at the 300-s relist.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from eventedpleg.core.guardincidents import Kind
from eventedpleg.core.node.facts import kubeletlog
from eventedpleg.core.node.facts.promtext import Metrics
from eventedpleg.core.node.facts.verify import CONN_ERROR

WEDGE_MATCH = "EventedPLEG is not healthy"  # what the journal filters by (every wedge line has it)
DISCARDS = "kubelet_pleg_discard_events"
LAST_SEEN = "kubelet_pleg_last_seen_seconds"
METRICS = frozenset({DISCARDS, LAST_SEEN, CONN_ERROR})  # all the guard scrapes
# Healthy, the gauge is at most ~1 s old (syncTicker); a relist's moment of freshness is why it takes two.
STALE_SECONDS = 10.0
LOOKS_IN_A_ROW = 2
CLOCK_SKEW = timedelta(minutes=10)  # a klog time further than this from the agent's clock is not trusted
_KLOG_TIME = re.compile(r"[IWEF](?P<month>\d{2})(?P<day>\d{2}) (?P<time>\d{2}:\d{2}:\d{2}\.\d+)")
_KLOG_PID = re.compile(r"[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d+\s+(?P<pid>\d+) ")


@dataclass(frozen=True)
class Sign:
    kind: Kind
    at: datetime  # the first sign (the line's own time when it is believable, else the look's)
    seen: str  # the line, or the metrics, it was seen by


@dataclass(frozen=True)
class Streak:
    """What detection keeps between looks."""

    stale: int = 0  # looks in a row with discards and a stale last-seen gauge
    erroring: int = 0  # looks in a row the stream's error counter rose
    errors: float | None = None  # the error counter at the last look
    first_suspect: datetime | None = None  # the look that began the current run of suspect looks


def line_time(line: str, now: datetime) -> datetime | None:
    """A klog header's time (`E1128 13:15:54.855580`, no year, the kubelet's clock in UTC), or None when
    there is none or it is far from `now` (another time zone, a wrong year)."""
    match = _KLOG_TIME.search(line)
    if match is None:
        return None
    try:
        parsed = datetime.strptime(
            f"{now.year}-{match['month']}-{match['day']} {match['time']}", "%Y-%m-%d %H:%M:%S.%f"
        ).replace(tzinfo=UTC)
    except ValueError:
        return None
    return parsed if abs(parsed - now) <= CLOCK_SKEW else None


def line_pid(line: str) -> int | None:
    """The process that logged a klog line (its header's thread id, the kubelet's pid for its main
    goroutines' lines as the journal and the rig show them), or None."""
    match = _KLOG_PID.search(line)
    return None if match is None else int(match["pid"])


def wedge_lines(lines: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(ln for ln in lines if kubeletlog.classify(ln) is kubeletlog.Signal.WEDGE)


def detect(
    lines: tuple[str, ...],
    metrics: Metrics | None,
    watch: Streak,
    now: datetime,
    *,
    stream_drives: bool = True,
) -> tuple[Sign | None, Streak]:
    """The first sign among `lines` (followed since the last look) and `metrics` (now), and what to keep.
    `stream_drives`: the event stream drives the pod cache and the evented health check holds the sync
    loop (kubelet <= 1.36). From 1.37 neither: a failing stream loses nothing, and the metrics say nothing
    of a wedge (seen on the rig: kubelet v1.37.2 meeting the 1100 exited containers discarded 100 events
    and its relist kept the gauge 20 s old on two looks, while it synced on), so only its log counts."""
    stale, erroring, errors, first = 0, 0, watch.errors, watch.first_suspect
    if metrics is not None:
        discards = metrics.value(DISCARDS) or 0.0
        last_seen = metrics.value(LAST_SEEN)
        age = None if last_seen is None else now.timestamp() - last_seen
        if stream_drives and discards > 0 and age is not None and age > STALE_SECONDS:
            stale = watch.stale + 1
        errors = metrics.value(CONN_ERROR)
        if stream_drives and errors is not None and watch.errors is not None and errors > watch.errors:
            erroring = watch.erroring + 1
    if (stale or erroring) and not (watch.stale or watch.erroring):
        first = now
    kept = Streak(stale, erroring, errors, first if (stale or erroring) else None)
    wedged = wedge_lines(lines)
    if wedged:
        return Sign(Kind.WEDGE, line_time(wedged[0], now) or now, wedged[0].strip()), kept
    if stale >= LOOKS_IN_A_ROW:
        seen = f"{DISCARDS} {discards:g}, {LAST_SEEN} {age:.0f}s old on {stale} looks in a row"
        return Sign(Kind.WEDGE, first or now, seen), kept
    if erroring >= LOOKS_IN_A_ROW:
        seen = f"{CONN_ERROR} rose to {errors:g} on {erroring} looks in a row, no fallback"
        return Sign(Kind.EVENTS_LOST, first or now, seen), kept
    return None, kept
