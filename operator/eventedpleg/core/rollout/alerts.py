"""Which firing Prometheus alerts hold the rollout (spec.rollout.alertGate), pure, over the JSON answer of
Prometheus' `GET /api/v1/alerts` (https://prometheus.io/docs/prometheus/latest/querying/api/#alerts):
{"status": "success", "data": {"alerts": [{"labels": {"alertname": ...}, "state": "firing"|"pending"}]}}.
Pending alerts do not hold it (kured counts firing alerts only, too)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

MAX_NAMED = 5


def firing(answer: Mapping[str, Any], pattern: str) -> tuple[str, ...]:
    """The names of the firing alerts `pattern` matches (re.search, as Go's MatchString), sorted, once."""
    if answer.get("status") != "success":
        raise ValueError(f"Prometheus answered status {answer.get('status')!r}: {answer.get('error', '')}")
    rule = re.compile(pattern)
    names = {
        str((alert.get("labels") or {}).get("alertname", ""))
        for alert in (answer.get("data") or {}).get("alerts") or []
        if alert.get("state") == "firing"
    }
    return tuple(sorted(name for name in names if rule.search(name)))


def holding_text(names: tuple[str, ...]) -> str:
    """What the status says about them ("" when none fires)."""
    if not names:
        return ""
    more = f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else ""
    return "alerts firing: " + ", ".join(names[:MAX_NAMED]) + more
