"""controller.executor's answers to a step's requests: what they read from the API, and how often."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from eventedpleg.controller import executor
from eventedpleg.core.rollout.drain.policy import DrainPolicy
from eventedpleg.core.rollout.snapshot import NodeView, node_view
from eventedpleg.core.rollout.steps import AttemptDrain
from eventedpleg.k8s import drain as drainer
from eventedpleg.models.nodeconfig import DrainBehavior, DrainRule, DrainSpec, LabelSelector

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def pod(name: str, namespace: str) -> dict[str, Any]:
    owner = {"kind": "ReplicaSet", "name": name, "controller": True}
    meta = {"name": name, "namespace": namespace, "labels": {}, "ownerReferences": [owner]}
    return {"metadata": meta, "spec": {}, "status": {"phase": "Running"}}


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """The drainer's API calls, answered for a node with one pod in `shop` and one in `monitoring`."""
    calls: dict[str, list[str]] = {"namespaces": [], "evict": []}
    pods = [pod("web-0", "shop"), pod("prom-0", "monitoring")]
    monkeypatch.setattr(drainer, "node_pods", lambda _api, _node: list(pods))
    monkeypatch.setattr(drainer, "pdbs_in", lambda _api, _namespaces: [])
    monkeypatch.setattr(drainer, "maintenance_of", lambda _api, _node: [])
    monkeypatch.setattr(drainer, "never_allowed", lambda _api, _pods, _refused: [])
    monkeypatch.setattr(drainer, "_evict", lambda _api, ref, _policy: calls["evict"].append(str(ref)))

    def namespaces(_api: object) -> list[dict[str, Any]]:
        calls["namespaces"].append("list")
        return [
            {"metadata": {"name": "shop", "labels": {"team": "web"}}},
            {"metadata": {"name": "monitoring", "labels": {"team": "ops"}}},
        ]

    monkeypatch.setattr(drainer, "_all_namespaces", namespaces)
    return calls


def answers(policy: DrainPolicy) -> executor._ApiAnswers:
    runner = executor.Executor(None, None, clock=lambda: NOW)  # type: ignore[arg-type]
    return executor._ApiAnswers(runner, "n1", "1", policy, {}, "uid")


def test_a_step_lists_namespaces_once_and_only_when_a_rule_selects_by_them(api: dict[str, list[str]]) -> None:
    ops_last = DrainRule(
        behavior=DrainBehavior.DRAIN, order=5, namespace_selector=LabelSelector(match_labels={"team": "ops"})
    )
    step = answers(DrainPolicy.of(DrainSpec(rules=(ops_last,))))
    assert not step.survey_pods().nothing_to_evict
    step.find_mirror_pods()
    result = step.attempt_drain(AttemptDrain())
    assert api["namespaces"] == ["list"]  # survey and attempt share one list
    assert api["evict"] == ["shop/web-0"] and "order 5 waits for order 0: monitoring/prom-0" in result.waiting

    api["evict"].clear()
    plain = answers(DrainPolicy.of(DrainSpec(rules=(DrainRule(behavior=DrainBehavior.DRAIN, order=5),))))
    plain.survey_pods()
    plain.attempt_drain(AttemptDrain())
    assert api["namespaces"] == ["list"]  # no namespaceSelector: no request
    assert api["evict"] == ["shop/web-0", "monitoring/prom-0"]


def test_the_survey_finds_a_short_budget_from_the_node_cache_and_one_pending_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two replicas under minAvailable: 1 on the node: the survey reads the other nodes from the cache
    (never this one) and lists the namespace's Pending pods once, only for that budget."""

    def ready(name: str) -> dict[str, Any]:
        found = pod(name, "shop")
        found["metadata"]["labels"] = {"app": "web"}
        found["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        return found

    budget = {
        "metadata": {"namespace": "shop", "name": "web", "generation": 1},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        "status": {"observedGeneration": 1, "expectedPods": 2, "desiredHealthy": 1, "disruptionsAllowed": 1},
    }
    listed: list[tuple[str, ...]] = []
    monkeypatch.setattr(drainer, "node_pods", lambda _api, _node: [ready("web-0"), ready("web-1")])
    monkeypatch.setattr(drainer, "pdbs_in", lambda _api, _namespaces: [budget])
    monkeypatch.setattr(drainer, "maintenance_of", lambda _api, _node: [])

    def pending_in(_api: object, names: list[str]) -> list[dict[str, Any]]:
        listed.append(tuple(names))
        return []

    monkeypatch.setattr(drainer, "pending_in", pending_in)

    def cluster(*names: str) -> list[NodeView]:
        return [node_view({"metadata": {"name": n}, "status": {"conditions": [ready_node]}}) for n in names]

    ready_node = {"type": "Ready", "status": "True"}
    only = executor.Executor(None, None, clock=lambda: NOW, nodes=lambda: cluster("n1"))  # type: ignore[arg-type]
    found = executor._ApiAnswers(only, "n1", "1", DrainPolicy.of(DrainSpec()), {}, "uid").survey_pods()
    assert "PodDisruptionBudget shop/web (minAvailable: 1) allows 1 disruption(s) now" in found.never
    assert listed == [("shop",)]
    two = executor.Executor(None, None, clock=lambda: NOW, nodes=lambda: cluster("n1", "n2"))  # type: ignore[arg-type]
    assert (
        not executor._ApiAnswers(two, "n1", "1", DrainPolicy.of(DrainSpec()), {}, "uid").survey_pods().never
    )
