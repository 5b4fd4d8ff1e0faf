"""eventedpleg_held_node_seconds (EventedPlegNodeHeldTooLong), eventedpleg_build_info and the process
metrics on the operator's registry, the Grafana dashboard's metric names, and --log-format json."""

from __future__ import annotations

import io
import json
import logging
import re
from datetime import UTC, datetime, timedelta

from prometheus_client import generate_latest

from eventedpleg import __version__, protocol
from eventedpleg.cli import logformat
from eventedpleg.controller.metrics import OperatorMetrics
from eventedpleg.core.rollout.snapshot import NodeView, node_view
from tests.dashboard import dashboard_exprs, exported_names, metric_names

T0 = datetime(2026, 11, 27, 8, 0, tzinfo=UTC)


def _view(
    name: str, *, owner: str = "cluster", cordoned: bool = True, since: datetime | None = None
) -> NodeView:
    annotations = {protocol.ANN_OWNER: owner, protocol.ANN_STATE: "Draining"}
    if cordoned:
        annotations[protocol.ANN_CORDONED_BY_US] = "true"
    if since is not None:
        annotations[protocol.ANN_STATE_SINCE] = since.isoformat()
    return node_view(
        {
            "metadata": {"name": name, "annotations": annotations, "labels": {}},
            "spec": {"unschedulable": cordoned},
        }
    )


def _held(metrics: OperatorMetrics, nodeconfig: str = "cluster") -> float:
    return (
        metrics.registry.get_sample_value("eventedpleg_held_node_seconds", {"nodeconfig": nodeconfig}) or 0.0
    )


def test_held_is_the_longest_cordon_of_ours_from_the_earlier_of_state_since_and_first_seen() -> None:
    metrics = OperatorMetrics()
    views = [
        _view("a", since=T0 - timedelta(minutes=10)),
        _view("b", since=T0 - timedelta(minutes=30)),
        _view("theirs", owner="other", since=T0 - timedelta(hours=5)),
        _view("uncordoned", cordoned=False, since=T0 - timedelta(hours=5)),
    ]
    metrics.record_held("cluster", views, None, T0)
    assert _held(metrics) == 30 * 60

    # b moves on to a new state: its since is later now, but it has been held since we first saw it.
    later = T0 + timedelta(minutes=5)
    metrics.record_held("cluster", [], {"b": _view("b", since=later)}, later)
    assert _held(metrics) == 35 * 60

    # b uncordoned, a deleted: only what changed is looked at, and nothing is held any more.
    metrics.record_held("cluster", [], {"b": _view("b", cordoned=False), "a": None}, later)
    assert _held(metrics) == 0

    # A node first seen cordoned without a state-since counts from then.
    metrics.record_held("cluster", [], {"c": _view("c")}, later)
    metrics.record_held("cluster", [], {}, later + timedelta(seconds=90))
    assert _held(metrics) == 90


def test_a_full_pass_forgets_nodes_no_longer_there_and_forget_drops_the_series() -> None:
    metrics = OperatorMetrics()
    metrics.record_held("cluster", [_view("a", since=T0 - timedelta(minutes=1))], None, T0)
    metrics.record_held("cluster", [], None, T0)
    assert _held(metrics) == 0
    metrics.forget("cluster")
    assert (
        metrics.registry.get_sample_value("eventedpleg_held_node_seconds", {"nodeconfig": "cluster"}) is None
    )


def test_operator_registry_has_build_info_and_process_metrics() -> None:
    text = generate_latest(OperatorMetrics().registry).decode()
    info = re.search(r"^eventedpleg_build_info\{(.*)\} 1\.0$", text, flags=re.M)
    assert info is not None
    labels = dict(re.findall(r'(\w+)="([^"]*)"', info.group(1)))
    assert labels["component"] == "operator"
    assert labels["version"] == __version__
    assert labels["revision"]
    assert re.fullmatch(r"3\.\d+\.\d+", labels["python_version"])
    assert "process_resident_memory_bytes" in text and "python_info" in text


def test_dashboard_queries_name_only_metrics_the_operator_registry_exports() -> None:
    exported = exported_names(generate_latest(OperatorMetrics().registry).decode())
    used = set().union(*(metric_names(expr) for expr in dashboard_exprs()))
    assert used, "no metric found in the dashboard's queries"
    assert used <= exported, sorted(used - exported)
    assert {"eventedpleg_nodes", "eventedpleg_held_node_seconds", "eventedpleg_build_info"} <= used


def test_metric_names_reads_selectors_not_functions() -> None:
    expr = 'histogram_quantile(0.95, sum by (le) (rate(x_bucket{job=~"a{b}"}[5m]))) + max(y) + z[1m]'
    assert metric_names(expr) == {"x_bucket", "z"}


def test_log_format_json_is_one_object_per_line() -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    root.handlers = []
    try:
        logformat.configure("json", verbose=False)
        handler = root.handlers[0]
        assert isinstance(handler, logging.StreamHandler)
        handler.setStream(stream)
        logging.getLogger("eventedpleg.test").info("cordoned %s", "node-1")
        logging.getLogger("eventedpleg.test").debug("not at info")
    finally:
        root.handlers, level = saved
        root.setLevel(level)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["message"] == "cordoned node-1"
    assert (record["level"], record["logger"]) == ("INFO", "eventedpleg.test")
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}", record["time"])
