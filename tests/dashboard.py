"""The chart's Grafana dashboard read as its queries, and the metric names in PromQL and in a /metrics text:
what the unit test (against the operator's registry) and the cluster test (against a live operator's
/metrics) compare."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

DASHBOARD = (
    Path(__file__).resolve().parents[1] / "manifests/evented-pleg-operator/files/grafana-dashboard.json"
)


def dashboard_exprs() -> list[str]:
    """Every PromQL expression of the dashboard: its panels' targets and its variables' queries."""
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    exprs += [v["query"]["query"] for v in doc["templating"]["list"] if isinstance(v.get("query"), dict)]
    return exprs


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers followed by a selector or range, or the
    first argument of label_values(); never function names, labels or keywords."""
    expr = re.sub(r'"[^"]*"', '""', expr)  # label values
    names = set(re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?=\{|\[)", expr))
    names |= set(re.findall(r"label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)", expr))
    return names


def exported_names(exposition: str) -> set[str]:
    """Every sample name a /metrics text can hold, from its TYPE lines (families with no series yet too)."""
    names: set[str] = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", exposition, flags=re.M):
        names.add(name)
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        if kind == "counter":
            names |= {f"{name}_total", name.removesuffix("_total") + "_total"}
    return names
