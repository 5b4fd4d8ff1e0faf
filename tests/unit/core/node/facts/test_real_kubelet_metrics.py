"""A /metrics body served by a REAL kubelet, replayed through the agent's reader and its verification.

Recorded once by hand from the rig's kubelet v1.36.4 binary, run standalone (own ports and root dir) with
EventedPLEG on over Debian's containerd 1.6.20, which answers GetContainerEvents with Unimplemented: after 5
attempts the kubelet fell back to polling (docs/compatibility.md §4, §7). Scraped from its read-only port
about 25 s after start.
"""

from __future__ import annotations

from pathlib import Path

from eventedpleg.core.node.facts.kubeletlog import scan
from eventedpleg.core.node.facts.promtext import parse_metrics
from eventedpleg.core.node.facts.verify import (
    CONN_ERROR,
    CONN_SUCCESS,
    RELIST_COUNT,
    fallen_back,
    gate_metric,
)
from eventedpleg.core.versions import parse_version

BODY = (Path(__file__).parents[4] / "realnode" / "fixtures" / "kubelet-metrics-v1.36.4.txt").read_text()


def test_every_sample_line_of_the_real_body_is_read() -> None:
    sample_lines = [line for line in BODY.splitlines() if line and not line.startswith("#")]
    assert len(parse_metrics(BODY).samples) == len(sample_lines) == 926


def test_counters_are_read_under_the_names_the_kubelet_exposes() -> None:
    # `# TYPE kubelet_evented_pleg_connection_error_count counter`, no `_total`: looked up by that name.
    metrics = parse_metrics(BODY)
    assert metrics.value(CONN_ERROR) == 5
    assert metrics.value(CONN_SUCCESS) == 5
    assert metrics.value(RELIST_COUNT) == 42
    assert metrics.value("process_cpu_seconds_total") == 0.75


def test_the_real_body_says_gate_on_and_fallen_back() -> None:
    metrics = parse_metrics(BODY)
    assert gate_metric(metrics) == (True, 'kubernetes_feature_enabled{name="EventedPLEG",stage="ALPHA"} 1')
    reason = fallen_back(parse_version("v1.36.4"), metrics, scan([]))
    assert reason is not None and CONN_ERROR in reason
