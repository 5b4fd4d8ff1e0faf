# ruff: noqa: E501 - verbatim metrics text
"""The Prometheus text reader used on the kubelet's /metrics."""

from __future__ import annotations

from eventedpleg.core.node.facts.promtext import parse_metrics

TEXT = r"""
# HELP kubernetes_feature_enabled [BETA] This metric records the data about the stage and enablement of a k8s feature.
# TYPE kubernetes_feature_enabled gauge
kubernetes_feature_enabled{name="AllAlpha",stage="ALPHA"} 0
kubernetes_feature_enabled{name="EventedPLEG",stage="ALPHA"} 1
kubelet_evented_pleg_connection_error_count 2
kubelet_pleg_relist_interval_seconds_bucket{le="+Inf"} 42
kubelet_pleg_relist_interval_seconds_sum 12600 1700000000000
weird_label{path="a\"b\\c",x="1"} 3.5e2
not a metric line
broken{name="x" 1
nan_metric NaN
"""


def test_samples_by_name_and_labels() -> None:
    metrics = parse_metrics(TEXT)
    assert metrics.value("kubernetes_feature_enabled", name="EventedPLEG") == 1
    assert metrics.value("kubernetes_feature_enabled", name="EventedPLEG", stage="BETA") is None
    assert metrics.value("kubelet_evented_pleg_connection_error_count") == 2
    assert metrics.value("kubelet_pleg_relist_interval_seconds_bucket", le="+Inf") == 42
    assert metrics.value("kubelet_pleg_relist_interval_seconds_sum") == 12600  # timestamp ignored
    assert metrics.find("weird_label")[0].label("path") == 'a"b\\c'
    assert metrics.value("weird_label") == 350


def test_unreadable_lines_are_skipped_not_fatal() -> None:
    metrics = parse_metrics(TEXT)
    assert not metrics.find("broken")
    assert not metrics.find("nan_metric")
    assert metrics.value("absent_metric") is None


def test_a_counter_split_by_labels_is_summed() -> None:
    metrics = parse_metrics('c{code="1"} 2\nc{code="2"} 3\n')
    assert metrics.value("c") == 5
