"""Before/after figures for the `eventedpleg.io/benefit` annotation, from two kubelet /metrics scrapes.

Pure. A window is the delta between two readings (scrapes) of the same kubelet process:
- relists: `kubelet_pleg_relist_interval_seconds` count and sum (mean interval = sum/count; 0 relists in
  the window means the period is longer than the window, i.e. 300 s on an evented v1.36 kubelet);
- CPU: `process_cpu_seconds_total` (component-base's process collector) over the wall-clock window, in
  millicores. That is the whole kubelet, of which relisting is one part (docs/benchmarks.md §2);
- pod start: `kubelet_pod_start_sli_duration_seconds` (ALPHA histogram, no labels, in v1.36 and v1.37), the
  Pod startup latency SLI: from the pod's creation to all its containers started as the kubelet's watch
  sees it, less image pulls and init containers; the pods started in the window (count) and their mean
  (sum/count), none when no pod started. The kubelet observes it for API pods only (not static ones), and
  exports no series before its first observation, so an absent series counts as none yet.
A scrape pair that spans a kubelet restart (another `process_start_time_seconds`, or counters that went
down) gives no figures.

The "before" window is measured while the node still serves: the agent keeps a few readings taken while its
Node is schedulable, and one more when it first sees the cordon (`before`), so no second of a cordoned node
is spent on it. The "after" window is measured once the node is Done and given back.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime

from eventedpleg.core.node.facts.promtext import Metrics
from eventedpleg.core.node.facts.verify import RELIST_COUNT, RELIST_SUM

CPU = "process_cpu_seconds_total"
STARTED = "process_start_time_seconds"
# pkg/kubelet/metrics/metrics.go (v1.36.4, v1.37.2): PodStartSLIDuration.
POD_START = "kubelet_pod_start_sli_duration_seconds"
POD_START_COUNT, POD_START_SUM = f"{POD_START}_count", f"{POD_START}_sum"
# What a benefit reading needs of /metrics: six series of a body of ~130 KB on an idle v1.36 kubelet,
# more with pods. The agent reads it every check interval while the node serves, so it parses only these
# (0.9 ms instead of 11 ms on tests/realnode/fixtures/kubelet-metrics-v1.36.4.txt).
NAMES = frozenset({RELIST_COUNT, RELIST_SUM, CPU, STARTED, POD_START_COUNT, POD_START_SUM})
# A window shorter than this says little (ten generic relist periods of 1 s, as in core.node.facts.verify).
MIN_WINDOW_SECONDS = 10.0
KEPT_READINGS = 3
BENEFIT_LIMIT = 1024
NARROWED_NOTE = "1.37+: relist stays at 1 s by design, no steady-state CPU saving (k8s#139262)"


@dataclass(frozen=True)
class MeasuredWindow:
    """Figures over one window; None where the metric is absent or the window spans a restart."""

    seconds: float
    relists: int | None
    relist_interval_seconds: float | None  # mean; None when there was no relist in the window
    cpu_millicores: float | None
    pods_started: int | None = None  # pods whose start the kubelet observed in the window (SLI count)
    pod_start_seconds: float | None = None  # their mean SLI start; None when no pod started

    def to_json(self) -> dict[str, object]:
        doc = asdict(self)
        return {
            "windowSeconds": round(self.seconds, 1),
            "relists": doc["relists"],
            "relistIntervalSeconds": None
            if self.relist_interval_seconds is None
            else round(self.relist_interval_seconds, 2),
            "kubeletCpuMillicores": None if self.cpu_millicores is None else round(self.cpu_millicores, 1),
            "podsStarted": doc["pods_started"],
            "podStartSeconds": None if self.pod_start_seconds is None else round(self.pod_start_seconds, 2),
        }

    def describe(self) -> str:
        if self.relists is None:
            relist = "relist ?"
        elif self.relists == 0:
            relist = f"no relist in {self.seconds:.0f}s"
        else:
            relist = f"relist every {self.relist_interval_seconds or 0:.1f}s"
        parts = [relist]
        if self.cpu_millicores is not None:  # None: no process_cpu_seconds_total (e.g. a simulated kubelet)
            parts.append(f"kubelet {self.cpu_millicores:.0f}m")
        if self.pods_started and self.pod_start_seconds is not None:
            parts.append(
                f"{self.pods_started} pod start{'s' if self.pods_started > 1 else ''} "
                f"{self.pod_start_seconds:.1f}s mean"
            )
        return ", ".join(parts)


@dataclass(frozen=True)
class Reading:
    """The counters of one /metrics scrape, when it was taken, and whether the node was in service then."""

    at: datetime
    in_service: bool  # schedulable; False for the reading taken when the agent first saw the cordon
    started: float | None  # process_start_time_seconds: which kubelet process answered
    relists: float | None
    relist_sum: float | None
    cpu_seconds: float | None
    pods_started: float | None = None  # the SLI histogram's count and sum
    pod_start_sum: float | None = None


def reading(metrics: Metrics, at: datetime, *, in_service: bool) -> Reading:
    return Reading(
        at,
        in_service,
        metrics.value(STARTED),
        metrics.value(RELIST_COUNT),
        metrics.value(RELIST_SUM),
        metrics.value(CPU),
        # No series before the first observation: none observed yet (see the module's docstring).
        metrics.value(POD_START_COUNT) or 0.0,
        metrics.value(POD_START_SUM) or 0.0,
    )


def _delta(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b < a:
        return None
    return b - a


def _same_process(a: Reading, b: Reading) -> bool:
    # Unknown on either side: the counters going down still tell a restart (_delta).
    return a.started is None or b.started is None or a.started == b.started


def between(first: Reading, second: Reading) -> MeasuredWindow | None:
    """The figures from `first` to `second`; None for another kubelet process or an empty window."""
    seconds = (second.at - first.at).total_seconds()
    if seconds <= 0 or not _same_process(first, second):
        return None
    count = _delta(first.relists, second.relists)
    total = _delta(first.relist_sum, second.relist_sum)
    cpu = _delta(first.cpu_seconds, second.cpu_seconds)
    relists = None if count is None else round(count)
    interval = total / count if count and total is not None else None
    started = _delta(first.pods_started, second.pods_started)
    start_sum = _delta(first.pod_start_sum, second.pod_start_sum)
    return MeasuredWindow(
        seconds,
        relists,
        interval,
        None if cpu is None else 1000.0 * cpu / seconds,
        None if started is None else round(started),
        start_sum / started if started and start_sum is not None else None,
    )


def keep(readings: Sequence[Reading], new: Reading) -> tuple[Reading, ...]:
    """The last KEPT_READINGS readings, `new` included."""
    return (*readings, new)[-KEPT_READINGS:]


def closing(readings: Sequence[Reading]) -> Reading | None:
    """The reading taken when the agent first saw the node cordoned after serving, if that is the last."""
    if len(readings) >= 2 and not readings[-1].in_service and readings[-2].in_service:
        return readings[-1]
    return None


def before(readings: Sequence[Reading], end: Reading, *, seconds: float) -> MeasuredWindow | None:
    """The window that ends at `end`: from the latest in-service reading at least `seconds` earlier, else
    from the earliest in-service one when that still spans MIN_WINDOW_SECONDS."""
    earlier = [r for r in readings if r.in_service and r.at < end.at and _same_process(r, end)]
    if not earlier or seconds <= 0:
        return None
    long_enough = [r for r in earlier if (end.at - r.at).total_seconds() >= seconds]
    start = long_enough[-1] if long_enough else earlier[0]
    if (end.at - start.at).total_seconds() < min(seconds, MIN_WINDOW_SECONDS):
        return None
    return between(start, end)


def document(
    *,
    kubelet: str,
    enabled: bool,
    before: MeasuredWindow | None,
    after: MeasuredWindow | None,
    narrowed: bool,
) -> dict[str, object]:
    """The annotation's JSON (see docs/realnode.md, "Benefit annotation")."""
    doc: dict[str, object] = {"kubelet": kubelet, "enabled": enabled}
    if before is not None:
        doc["before"] = before.to_json()
    if after is not None:
        doc["after"] = after.to_json()
    parts = [f"before: {before.describe()}" if before else "", f"after: {after.describe()}" if after else ""]
    summary = "; ".join(p for p in parts if p)
    if narrowed and enabled:
        summary = f"{summary}; {NARROWED_NOTE}" if summary else NARROWED_NOTE
    doc["summary"] = summary
    return doc


def to_annotation(doc: dict[str, object]) -> str:
    text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
    if len(text) > BENEFIT_LIMIT:
        text = json.dumps({k: v for k, v in doc.items() if k != "summary"}, separators=(",", ":"))
    return text
