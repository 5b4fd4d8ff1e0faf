"""The chart's Grafana dashboard read as its queries, and the metric names in PromQL and in a /metrics text:
what the unit test (against the operator's registry), the cluster test (against a live operator's /metrics)
and the agent test (against a live agent's /metrics) compare."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

DASHBOARD = (
    Path(__file__).resolve().parents[1] / "manifests/evented-pleg-operator/files/grafana-dashboard.json"
)


AGENTS_ROW = "Agents"  # the row of the agents' panels (agent/metrics.py); every other row is the operator's
AGENT_VARIABLES = {"node"}


def dashboard_exprs(*, agents: bool = False) -> list[str]:
    """The dashboard's PromQL expressions (its panels' targets and its variables' queries): the
    operator's, or with `agents` those of the Agents row and its variables."""
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    exprs, row = [], ""
    for panel in doc["panels"]:
        if panel["type"] == "row":
            row = panel["title"]
        elif (row == AGENTS_ROW) == agents:
            exprs += [t["expr"] for t in panel.get("targets", [])]
    for var in doc["templating"]["list"]:
        if isinstance(var.get("query"), dict) and (var["name"] in AGENT_VARIABLES) == agents:
            exprs.append(var["query"]["query"])
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
