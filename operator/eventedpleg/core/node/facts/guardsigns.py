"""What the guard looks for on a Done node, from what the kubelet says. Pure.

Read at k8s.io/kubernetes v1.36.4 (`pkg/kubelet`; docs/compatibility.md "kubelet-pleg-wedge"):

- **The wedge**, earliest and certain: the journal line `"Skipping pod synchronization" err="EventedPLEG is
  not healthy: ..."` (`kubelet.go:2646`), logged the moment `syncLoop` meets the full channel and every
  0.1 s doubling to 5 s after. It is followed from a cursor, filtered by the journal itself
  (core.node.blocks.effects.FollowJournal), so a look costs what was logged since the last one.
- **The wedge from /metrics** (kubelet <= 1.36) when the journal says nothing (no journald, a log that
  rotated): discards (`kubelet_pleg_discard_events`, `pleg/generic.go:395-400`, `pleg/evented.go:323-331`) and
  `kubelet_pleg_last_seen_seconds` stale on two looks in a row (wedged, only the generic check passes and
  sets it to its last relist, up to 300 s old; healthy, the evented check sets it to now every second).
- Not used: `/healthz` (its syncloop check fails only after 5 minutes) and the Ready condition (the same
  runtime error, reaching the API up to `nodeStatusUpdateFrequency` later).
- **The event stream lost without fallback** (kubelet <= 1.36): `kubelet_evented_pleg_connection_error_count`
  rising on two looks in a row while the kubelet keeps the gate on (the fallback is the after-Done check's,
  core.node.phases.donephase): pods change meanwhile only at the 300-s relist.
- **A pod's status lost** (kubelet <= 1.36, the missed restarts: docs/compatibility.md
  "kubelet-136-missed-restarts"): the evented PLEG deleted a live pod's cache entry, so each sync of the pod
  asks the runtime for the pod's *first* sandbox (attempt 0: an empty status has no attempt to count from),
  and the runtime refuses it, the name being held by the pod's old sandbox: the error line
  `"Failed to create sandbox for pod" err="... failed to reserve sandbox name \\"<pod>_<ns>_<uid>_0\\" ..."`
  (`kuberuntime_sandbox.go:70`, logged at every verbosity), once per pod sync (~every 12 s on the rig).
  Meanwhile the API shows the pod's container waiting while the runtime runs it, until the 300-s relist.
  LOST_REFUSALS refusals of one pod within LOST_WINDOW are the sign. A first sandbox that is slow to be
  made (a hanging CNI plugin) is refused the same way, at the same pace, while its first request still
  runs; but that request failed first, by its own timeout (`runtimeRequestTimeout`, 2 min): a pod whose
  sandbox failed otherwise within OTHER_FAILURE_MEMORY is not counted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from eventedpleg.core.guardincidents import Kind
from eventedpleg.core.node.facts import kubeletlog
from eventedpleg.core.node.facts.promtext import Metrics
from eventedpleg.core.node.facts.verify import CONN_ERROR

WEDGE_MATCH = "EventedPLEG is not healthy"  # every wedge line has it
LOST_MATCH = "Failed to create sandbox for pod"  # one line per refused sandbox request, naming the pod
MATCH = f"{WEDGE_MATCH}|{LOST_MATCH}"  # what the journal filters by (a regular expression, journalctl --grep)
LOST_REFUSALS = 2
LOST_WINDOW = timedelta(seconds=60)
OTHER_FAILURE_MEMORY = timedelta(minutes=10)
# kuberuntime_sandbox.go's line (the pod workers' "Error syncing pod" line quotes it once more, so it does
# not match), and in its error a refused first sandbox (attempt 0), as klog quotes the runtime's error.
_SANDBOX_FAILED = re.compile(r'\] "Failed to create sandbox for pod" err="(?P<err>.*)"\s+pod="(?P<p>[^"]+)"')
_FIRST_RESERVED = re.compile(r'failed to reserve sandbox name \\"[^"\\]*_0\\"')
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
    refused: tuple[tuple[str, datetime], ...] = ()  # (pod, when) first sandboxes refused in LOST_WINDOW
    failed: tuple[tuple[str, datetime], ...] = ()  # (pod, when) sandboxes failed otherwise, for a while


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


def sandbox_failure(line: str) -> tuple[str, bool] | None:
    """A failed sandbox request's pod (namespace/name), and whether it was a refused first sandbox; None
    for any other line."""
    match = _SANDBOX_FAILED.search(line) if LOST_MATCH in line else None
    if match is None:
        return None
    return match["p"], _FIRST_RESERVED.search(match["err"]) is not None


def refused_first(line: str) -> str | None:
    """The pod whose first sandbox this line says the runtime refused, or None."""
    failure = sandbox_failure(line)
    return failure[0] if failure is not None and failure[1] else None


Dated = tuple[tuple[str, datetime], ...]


def _lost(lines: tuple[str, ...], watch: Streak, now: datetime) -> tuple[Sign | None, Dated, Dated]:
    """A pod refused its first sandbox LOST_REFUSALS times within LOST_WINDOW, with no other failure of its
    sandbox in OTHER_FAILURE_MEMORY; and the refusals and other failures to keep."""
    refusals: list[tuple[str, datetime, str]] = []
    others: list[tuple[str, datetime]] = []
    for line in lines:
        failure = sandbox_failure(line)
        if failure is not None:
            at = line_time(line, now) or now
            if failure[1]:
                refusals.append((failure[0], at, line))
            else:
                others.append((failure[0], at))
    failed = tuple(f for f in (*watch.failed, *others) if now - f[1] < OTHER_FAILURE_MEMORY)
    new = tuple((pod, at) for pod, at, _ in refusals)
    refused = tuple(r for r in (*watch.refused, *new) if now - r[1] < LOST_WINDOW)
    excused = {pod for pod, _ in failed}
    for pod, _, line in refusals:
        times = sorted(t for p, t in refused if p == pod)
        if pod not in excused and len(times) >= LOST_REFUSALS:
            seen = (
                f"{pod}: the runtime refused its first sandbox {len(times)} times in "
                f"{LOST_WINDOW.seconds}s (its old sandbox holds the name): {line.strip()}"
            )
            return Sign(Kind.STATUS_LOST, times[0], seen), refused, failed
    return None, refused, failed


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
    lost, refused, failed = _lost(lines, watch, now) if stream_drives else (None, (), ())
    kept = Streak(stale, erroring, errors, first if (stale or erroring) else None, refused, failed)
    wedged = wedge_lines(lines)
    if wedged:
        return Sign(Kind.WEDGE, line_time(wedged[0], now) or now, wedged[0].strip()), kept
    if lost is not None:
        return lost, kept
    if stale >= LOOKS_IN_A_ROW:
        seen = f"{DISCARDS} {discards:g}, {LAST_SEEN} {age:.0f}s old on {stale} looks in a row"
        return Sign(Kind.WEDGE, first or now, seen), kept
    if erroring >= LOOKS_IN_A_ROW:
        seen = f"{CONN_ERROR} rose to {errors:g} on {erroring} looks in a row, no fallback"
        return Sign(Kind.EVENTS_LOST, first or now, seen), kept
    return None, kept
