"""The alert gate's adapter: asks a Prometheus-compatible API which alerts fire (spec.rollout.alertGate).
Not a Kubernetes adapter, so not in eventedpleg.k8s; the decision over the answer is core.rollout.alerts.
urllib3: the library the Kubernetes client's REST layer already runs on, so no second HTTP stack."""

from __future__ import annotations

import json

import urllib3

from eventedpleg.core.rollout import alerts

TIMEOUT = urllib3.Timeout(connect=3.0, read=5.0)
_pool = urllib3.PoolManager(retries=False, headers={"Accept": "application/json"})


def holding(url: str, pattern: str) -> str:
    """Why the gate holds ("" when no matching alert fires). Any failure to ask holds it too: a gate that
    cannot see must not let nodes go (fail closed), and the text says what went wrong."""
    target = url.rstrip("/") + "/api/v1/alerts"
    try:
        response = _pool.request("GET", target, timeout=TIMEOUT)
        if response.status != 200:
            raise ValueError(f"HTTP {response.status}")
        return alerts.holding_text(alerts.firing(json.loads(response.data), pattern))
    except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
        return f"cannot read the alerts at {target}: {type(exc).__name__}: {exc}"
