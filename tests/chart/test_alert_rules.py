"""The chart's alerting rules under Prometheus' own promtool (Debian's): they parse (`check rules`), and
each alert fires on the series the operator exports, with its labels and runbook_url, and stays silent
on healthy ones (`test rules` with alerts_test.yaml beside this file)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.chartlib import prometheus_binaries, render

HERE = Path(__file__).resolve().parent
UNIT_TESTS = HERE / "alerts_test.yaml"
RULE_NAME = "evented-pleg-operator"
# The runbooks alerts_test.yaml expects: set here, as the default follows the version (test_chart.py).
RUNBOOKS = "https://runbooks.example/runbooks.md"


def _groups(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    values = {"prometheusRule.enabled": True, "prometheusRule.runbookBaseUrl": RUNBOOKS, **(values or {})}
    rule = render(values).find("PrometheusRule", RULE_NAME)
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def _alerts(groups: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    _, promtool = prometheus_binaries()
    return subprocess.run(
        [str(promtool), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.parametrize(
    "values",
    [{}, {"prometheusRule.labels": {"release": "kube-prometheus-stack"}, "prometheusRule.degradedFor": "1m"}],
    ids=["defaults", "overrides"],
)
def test_promtool_accepts_the_rules(tmp_path: Path, values: dict[str, Any]) -> None:
    """PromQL and templates as Prometheus parses them."""
    groups = _groups(values)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    done = _promtool("check", "rules", "rules.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(_alerts(groups))} rules found" in done.stdout


def test_each_alert_fires_on_the_operators_series_and_only_then(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": _groups()}))
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    done = _promtool("test", "rules", UNIT_TESTS.name, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_has_a_firing_case_with_its_runbook() -> None:
    """A new alert in the chart fails here until alerts_test.yaml makes it fire, and each firing case
    expects the runbook_url the chart gives it (test_chart.py: it names the alert's docs/runbooks.md
    section)."""
    alerts = _alerts(_groups())
    cases = yaml.safe_load(UNIT_TESTS.read_text())["tests"]
    fired: dict[str, list[dict[str, Any]]] = {}
    for case in cases:
        for check in case["alert_rule_test"]:
            fired.setdefault(check["alertname"], []).extend(check.get("exp_alerts") or [])
    assert set(fired) <= set(alerts), f"cases for alerts the chart does not have: {set(fired) - set(alerts)}"
    assert [name for name in alerts if not fired.get(name)] == [], "alerts without a firing case"
    for name, expected in fired.items():
        runbook = alerts[name]["annotations"]["runbook_url"]
        assert {e["exp_annotations"]["runbook_url"] for e in expected} == {runbook}, name
