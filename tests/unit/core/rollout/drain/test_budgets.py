"""Evictions no PodDisruptionBudget can allow as things stand (core.rollout.drain.budgets), over PDBs as the
disruption controller writes their status. The cluster tier checks the same rule against the real
controller's status (tests/cluster/test_rollout.py: the PDB and onBlocked tests)."""

from __future__ import annotations

from typing import Any

import pytest

from eventedpleg.core.rollout.drain import budgets
from eventedpleg.core.rollout.drain.pods import PodRef


def pod(
    name: str, *, labels: dict[str, str] | None = None, ready: bool = True, phase: str = "Running"
) -> dict[str, Any]:
    status = "True" if ready else "False"
    return {
        "metadata": {"namespace": "shop", "name": name, "labels": labels or {"app": "db"}},
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": status}]},
    }


def pdb(
    name: str = "db",
    *,
    rule: dict[str, Any] | None = None,
    expected: int = 1,
    desired: int = 1,
    selector: dict[str, Any] | None = None,
    generation: int = 1,
    observed: int = 1,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "shop", "name": name, "generation": generation},
        "spec": {
            "selector": {"matchLabels": {"app": "db"}} if selector is None else selector,
            **(rule or {"minAvailable": 1}),
            **spec,
        },
        "status": {
            "observedGeneration": observed,
            "expectedPods": expected,
            "desiredHealthy": desired,
            "currentHealthy": expected,
        },
    }


DB = PodRef("shop", "db-0")


def never(
    pods: list[dict[str, Any]], pdbs: list[dict[str, Any]], evict: tuple[PodRef, ...] = (DB,)
) -> list[str]:
    return [str(n) for n in budgets.never_allowed(pods, evict, pdbs)]


@pytest.mark.parametrize(
    ("rule", "expected", "desired"),
    [
        ({"minAvailable": 1}, 1, 1),  # one replica, minAvailable: 1
        ({"maxUnavailable": 0}, 3, 3),
        ({"maxUnavailable": "0%"}, 3, 3),
        ({"minAvailable": 3}, 3, 3),  # minAvailable equal to the replicas
        ({"minAvailable": "100%"}, 2, 2),
    ],
)
def test_a_budget_that_needs_every_pod_healthy_never_allows_an_eviction(
    rule: dict[str, Any], expected: int, desired: int
) -> None:
    (text,) = never([pod("db-0")], [pdb(rule=rule, expected=expected, desired=desired)])
    key, value = next(iter(rule.items()))
    assert text.startswith(
        f"shop/db-0: PodDisruptionBudget shop/db ({key}: {value}) needs {desired} of its {expected}"
    )
    assert "scale the workload up or relax the budget" in text


def test_a_budget_with_room_for_one_is_not_reported_even_when_it_is_spent_now() -> None:
    # minAvailable 2 of 3: disruptionsAllowed may be 0 for a while (a pod restarting), then 1 again
    spent = pdb(rule={"minAvailable": 2}, expected=3, desired=2)
    spent["status"]["currentHealthy"] = 2
    assert never([pod("db-0")], [spent]) == []


def test_two_budgets_over_one_pod_are_always_refused_by_the_eviction_api() -> None:
    (text,) = never([pod("db-0")], [pdb("a", expected=3, desired=1), pdb("b", expected=3, desired=1)])
    assert text == (
        "shop/db-0: matched by more than one PodDisruptionBudget (shop/a, shop/b), "
        "which the eviction API refuses"
    )


def test_what_the_eviction_api_lets_go_without_the_budget_is_not_reported() -> None:
    blocking = [pdb()]
    assert never([pod("db-0", phase="Pending")], blocking) == []  # not running: no PDB check
    assert never([pod("db-0", phase="Succeeded")], blocking) == []
    deleting = pod("db-0")
    deleting["metadata"]["deletionTimestamp"] = "2026-11-25T00:00:00Z"
    assert never([deleting], blocking) == []
    # unready under AlwaysAllow goes; unready under the default policy is not judged (may clear)
    assert never([pod("db-0", ready=False)], [pdb(unhealthyPodEvictionPolicy="AlwaysAllow")]) == []
    assert never([pod("db-0", ready=False)], blocking) == []
    assert never([pod("db-0")], blocking, evict=()) == []  # not one the drain evicts (a DaemonSet pod)


def test_a_budget_the_controller_has_not_judged_yet_is_left_to_the_drain() -> None:
    assert never([pod("db-0")], [pdb(generation=2, observed=1)]) == []
    assert never([pod("db-0")], [pdb(expected=0, desired=0)]) == []  # no pods counted yet


def test_selectors_follow_policy_v1() -> None:
    other = pod("db-0", labels={"app": "web"})
    assert never([other], [pdb()]) == []  # another app's budget
    assert len(never([other], [pdb(selector={})])) == 1  # empty: every pod of the namespace
    nulled = pdb()
    nulled["spec"]["selector"] = None
    assert never([pod("db-0")], [nulled]) == []  # null: no pod
    expr = {"matchExpressions": [{"key": "app", "operator": "In", "values": ["db", "cache"]}]}
    assert len(never([pod("db-0")], [pdb(selector=expr)])) == 1
    notin = {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["db"]}]}
    assert never([pod("db-0")], [pdb(selector=notin)]) == []
    elsewhere = pdb()
    elsewhere["metadata"]["namespace"] = "other"
    assert never([pod("db-0")], [elsewhere]) == []  # a budget covers its own namespace only
