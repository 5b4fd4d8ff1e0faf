"""spec.rollout.alertGate: which firing alerts hold the rollout (core.rollout.alerts), how the planner
holds new nodes meanwhile and what the status says. The cluster tier runs it against a real Prometheus
(tests/cluster/test_alert_gate.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from eventedpleg.constants import ConditionType
from eventedpleg.core.rollout import alerts, status
from eventedpleg.reasons import ConditionReason
from eventedpleg_lab.sim.rolloutworld import H_ON, T0, World, fleet, spec


def answer(*alerts_: tuple[str, str]) -> dict[str, object]:
    return {
        "status": "success",
        "data": {
            "alerts": [{"labels": {"alertname": name, "severity": "x"}, "state": st} for name, st in alerts_]
        },
    }


def test_only_firing_alerts_the_pattern_matches_hold() -> None:
    got = answer(
        ("NodeDown", "firing"), ("NodeDown", "firing"), ("DiskFull", "pending"), ("Watchdog", "firing")
    )
    assert alerts.firing(got, ".*") == ("NodeDown", "Watchdog")
    assert alerts.firing(got, "^Node") == ("NodeDown",)  # searched, as Go's MatchString
    assert alerts.firing(got, "Disk") == ()  # pending does not hold
    assert alerts.holding_text(("NodeDown", "Watchdog")) == "alerts firing: NodeDown, Watchdog"
    assert alerts.holding_text(()) == ""


def test_an_answer_that_is_not_a_success_is_an_error() -> None:
    with pytest.raises(ValueError, match="status 'error'"):
        alerts.firing({"status": "error", "error": "bad"}, ".*")


def test_firing_alerts_hold_new_nodes_and_finish_started_ones() -> None:
    nodes = fleet(3)
    world = World(nodes, spec(rollout={"canary": {"nodes": 0}, "alertGate": {"prometheusUrl": "http://p"}}))
    world.alerts = "alerts firing: NodeDown"
    result = world.tick()
    assert result.actions == ()
    assert result.summary.alerting and "no new node while alerts firing: NodeDown" in result.summary.waiting
    assert result.summary.next_wake == T0 + timedelta(seconds=15)  # asked again without any event
    conditions = status.conditions_for(result.summary, enabled=True, deleting=False)
    assert (
        conditions[ConditionType.PAUSED].status and conditions[ConditionType.PAUSED].reason == "AlertsFiring"
    )
    assert conditions[ConditionType.PROGRESSING] == status.Cond(
        False, ConditionReason.ALERTS_FIRING, result.summary.waiting
    )
    assert conditions[ConditionType.RECONCILING].status and not conditions[ConditionType.STALLED].status
    world.alerts = ""
    world.run()
    assert {n.annotations.get("eventedpleg.io/current-config") for n in nodes.values()} == {H_ON}
