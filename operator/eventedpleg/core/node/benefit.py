"""Before/after figures for the `eventedpleg.io/benefit` annotation, from two kubelet /metrics scrapes.

Pure. A window is the delta between two scrapes of the same kubelet process:
- relists: `kubelet_pleg_relist_interval_seconds` count and sum (mean interval = sum/count; 0 relists in
  the window means the period is longer than the window, i.e. 300 s on an evented v1.36 kubelet);
- CPU: `process_cpu_seconds_total` (component-base's process collector) over the wall-clock window, in
  millicores. That is the whole kubelet, of which relisting is one part (docs/benchmarks.md §2).
A scrape pair that spans a kubelet restart (counters went down) gives no figures.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from eventedpleg.core.node.promtext import Metrics

RELIST_COUNT = "kubelet_pleg_relist_interval_seconds_count"
RELIST_SUM = "kubelet_pleg_relist_interval_seconds_sum"
CPU = "process_cpu_seconds_total"
BENEFIT_LIMIT = 1024
NARROWED_NOTE = "1.37+: relist stays at 1 s by design, no steady-state CPU saving (k8s#139262)"


@dataclass(frozen=True)
class MeasuredWindow:
    """Figures over one window; None where the metric is absent or the window spans a restart."""

    seconds: float
    relists: int | None
    relist_interval_seconds: float | None  # mean; None when there was no relist in the window
    cpu_millicores: float | None

    def to_json(self) -> dict[str, object]:
        doc = asdict(self)
        return {
            "windowSeconds": round(self.seconds, 1),
            "relists": doc["relists"],
            "relistIntervalSeconds": None
            if self.relist_interval_seconds is None
            else round(self.relist_interval_seconds, 2),
            "kubeletCpuMillicores": None if self.cpu_millicores is None else round(self.cpu_millicores, 1),
        }

    def describe(self) -> str:
        if self.relists is None:
            relist = "relist ?"
        elif self.relists == 0:
            relist = f"no relist in {self.seconds:.0f}s"
        else:
            relist = f"relist every {self.relist_interval_seconds or 0:.1f}s"
        if self.cpu_millicores is None:  # no process_cpu_seconds_total (e.g. a simulated kubelet)
            return relist
        return f"{relist}, kubelet {self.cpu_millicores:.0f}m"


def _delta(first: Metrics, second: Metrics, name: str) -> float | None:
    a, b = first.value(name), second.value(name)
    if a is None or b is None or b < a:
        return None
    return b - a


def window(first: Metrics | None, second: Metrics | None, seconds: float) -> MeasuredWindow | None:
    if first is None or second is None or seconds <= 0:
        return None
    count = _delta(first, second, RELIST_COUNT)
    total = _delta(first, second, RELIST_SUM)
    cpu = _delta(first, second, CPU)
    relists = None if count is None else round(count)
    interval = total / count if count and total is not None else None
    return MeasuredWindow(seconds, relists, interval, None if cpu is None else 1000.0 * cpu / seconds)


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
