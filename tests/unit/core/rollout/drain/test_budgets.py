"""Evictions no PodDisruptionBudget can allow as things stand (core.rollout.drain.budgets), over PDBs as the
disruption controller writes their status. The cluster tier checks the same rule against the real
controller's status (tests/cluster/test_rollout.py: the PDB and onBlocked tests)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventedpleg.core.rollout.drain import budgets
from eventedpleg.core.rollout.drain.placement import Destination
from eventedpleg.core.rollout.drain.pods import PodRef
from eventedpleg.core.rollout.drain.taints import Taint


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


# --- a budget short of what the drain needs, whose replacements cannot become healthy ------------------

ONE_WORKER: tuple[Destination, ...] = ()  # a single-worker cluster: no other node at all


def web(name: str, **spec: Any) -> dict[str, Any]:
    found = pod(name, labels={"app": "web"})
    found["spec"] = spec
    return found


def web_pdb(allowed: int, *, expected: int = 2, desired: int = 1) -> dict[str, Any]:
    found = pdb("web", selector={"matchLabels": {"app": "web"}}, expected=expected, desired=desired)
    found["status"]["disruptionsAllowed"] = allowed
    return found


WEB = (PodRef("shop", "web-0"), PodRef("shop", "web-1"))


def short(
    pods: list[dict[str, Any]],
    pdbs: list[dict[str, Any]],
    nodes: tuple[Destination, ...] | None,
    pending: list[dict[str, Any]] | None = None,
    evict: tuple[PodRef, ...] = WEB,
) -> list[str]:
    asked: list[tuple[str, ...]] = []

    def pending_in(names: tuple[str, ...]) -> list[dict[str, Any]]:
        asked.append(names)
        return pending or []

    elsewhere = budgets.Elsewhere(None if nodes is None else lambda: nodes, pending_in)
    found = [str(n) for n in budgets.never_allowed(pods, evict, pdbs, elsewhere)]
    assert len(asked) <= 1 and all(names == ("shop",) for names in asked)  # one LIST per namespace
    return found


def test_two_replicas_on_the_only_worker_with_min_available_one_never_drain() -> None:
    """The first eviction goes, its replacement stays Pending (the only node is cordoned), the second
    eviction is refused for good: found before the cordon, on the pod that would be refused."""
    (text,) = short([web("web-0"), web("web-1")], [web_pdb(1)], ONE_WORKER)
    assert text == (
        "shop/web-1: PodDisruptionBudget shop/web (minAvailable: 1) allows 1 disruption(s) now and the drain "
        "needs 2, but no replacement can become healthy: 2 of them fit no other node (nodeSelector, "
        "affinity, taints, cordons); make room for them on another node (a node they fit, or capacity) or "
        "relax the budget"
    )


def test_a_budget_that_allows_every_eviction_the_drain_needs_is_not_asked_about() -> None:
    asked: list[tuple[str, ...]] = []

    def pending_in(names: tuple[str, ...]) -> list[dict[str, Any]]:
        asked.append(names)
        return []

    def nodes() -> tuple[Destination, ...]:
        raise AssertionError("the other nodes are read only for a budget short of what the drain needs")

    elsewhere = budgets.Elsewhere(nodes, pending_in)
    assert budgets.never_allowed([web("web-0"), web("web-1")], WEB, [web_pdb(2)], elsewhere) == ()
    assert asked == []  # no LIST of Pending pods either


def test_replacements_that_fit_another_node_let_the_drain_finish() -> None:
    other = (Destination("w2", {}),)
    assert short([web("web-0"), web("web-1")], [web_pdb(1)], other) == []
    # pinned by nodeSelector to labels only this node has: they fit nowhere else
    pinned = [web("web-0", nodeSelector={"disk": "ssd"}), web("web-1", nodeSelector={"disk": "ssd"})]
    assert len(short(pinned, [web_pdb(1)], other)) == 1
    # a node the rollout took itself is back once done: no finding
    assert (
        short(
            [web("web-0"), web("web-1")],
            [web_pdb(1)],
            (Destination("w2", {}, unschedulable=True, returning=True),),
        )
        == []
    )
    # cordoned by someone else, or tainted: no place
    assert (
        len(short([web("web-0"), web("web-1")], [web_pdb(1)], (Destination("w2", {}, unschedulable=True),)))
        == 1
    )


def test_one_replica_that_fits_nowhere_within_the_allowance_is_not_reported() -> None:
    pods = [web("web-0", nodeSelector={"disk": "ssd"}), web("web-1")]
    assert short(pods, [web_pdb(1)], (Destination("w2", {}),)) == []  # 1 stuck, 1 allowed


def test_a_pending_unschedulable_pod_of_the_budget_means_no_replacement_becomes_healthy() -> None:
    said = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    stuck: dict[str, Any] = {
        "metadata": {"namespace": "shop", "name": "web-2", "labels": {"app": "web"}},
        "spec": {},
        "status": {"phase": "Pending", "conditions": [said]},
    }
    (text,) = short([web("web-0")], [web_pdb(0, expected=3, desired=2)], None, [stuck], evict=WEB[:1])
    assert text.startswith(
        "shop/web-0: PodDisruptionBudget shop/web (minAvailable: 1) allows 0 disruption(s)"
    )
    assert "its pod shop/web-2 is Pending, unschedulable" in text
    other_app = {**stuck, "metadata": {**stuck["metadata"], "labels": {"app": "db"}}}
    assert short([web("web-0")], [web_pdb(0, expected=3, desired=2)], None, [other_app], evict=WEB[:1]) == []
    # Pending only until a node the rollout took is back: not reported
    back = (Destination("w2", {}, unschedulable=True, returning=True),)
    assert short([web("web-0")], [web_pdb(0, expected=3, desired=2)], back, [stuck], evict=WEB[:1]) == []


def test_only_ready_pods_count_against_the_allowance_and_unjudged_budgets_are_left_alone() -> None:
    unready = web("web-1")
    unready["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    assert short([web("web-0"), unready], [web_pdb(1)], ONE_WORKER) == []  # one ready pod, one allowed
    stale = web_pdb(1)
    stale["metadata"]["generation"] = 2
    assert short([web("web-0"), web("web-1")], [stale], ONE_WORKER) == []


def test_exhausted_names_a_budget_of_the_pods_to_evict_that_allows_nothing_now() -> None:
    assert budgets.exhausted([web("web-0")], WEB, [web_pdb(0)]) == (
        "PodDisruptionBudget shop/web (minAvailable: 1) allows 0 disruptions now"
    )
    assert budgets.exhausted([web("web-0")], WEB, [web_pdb(1)]) == ""
    assert budgets.exhausted([web("web-0")], (), [web_pdb(0)]) == ""  # not one the drain evicts


@settings(max_examples=200, deadline=None)
@given(
    ready=st.lists(st.booleans(), min_size=2, max_size=4),  # one pod under minAvailable 1: never (_never)
    allowed=st.integers(0, 4),
    pinned=st.booleans(),
    others=st.lists(st.tuples(st.booleans(), st.booleans(), st.booleans()), max_size=3),
)
def test_a_short_budget_is_found_exactly_when_its_replacements_have_nowhere_to_go(
    ready: list[bool], allowed: int, pinned: bool, others: list[tuple[bool, bool, bool]]
) -> None:
    """Every pod of the budget on the cluster's single worker: the drain is found never to finish exactly
    when it needs more evictions of ready pods than the budget allows now; a node every replacement fits
    makes any such drain finish; a node they cannot use (cordoned by someone else, tainted, without the
    labels they need) changes nothing."""
    selector = {"disk": "ssd"} if pinned else {}
    pods = []
    for i, up in enumerate(ready):
        found = web(f"web-{i}", nodeSelector=selector)
        found["status"]["conditions"] = [{"type": "Ready", "status": str(up)}]
        pods.append(found)
    evict = tuple(PodRef("shop", f"web-{i}") for i in range(len(ready)))
    budget = [web_pdb(allowed, expected=len(ready), desired=1)]
    needed = sum(ready)
    alone = short(pods, budget, ONE_WORKER, evict=evict)
    assert len(alone) == (1 if needed > allowed else 0)
    useless = tuple(
        Destination(
            f"o{i}",
            {} if pinned and labelled else {"disk": "hdd"} if pinned else {},
            (Taint("dedicated", effect="NoSchedule"),) if tainted or not (cordoned or pinned) else (),
            unschedulable=cordoned,
        )
        for i, (cordoned, tainted, labelled) in enumerate(others)
    )
    assert short(pods, budget, useless, evict=evict) == alone
    fits = (Destination("free", {"disk": "ssd"}),)
    assert short(pods, budget, useless + fits, evict=evict) == []


def test_a_budget_whose_other_pod_may_still_become_healthy_is_a_drain_that_waits() -> None:
    """One pod pinned to this node under minAvailable 1 that also covers a pod Pending but not found
    unschedulable (no scheduler has looked yet): the eviction is refused now, and allowed once that pod
    runs, so the drain waits; found unschedulable, the drain never finishes."""
    pinned = web("web-0", nodeSelector={"kubernetes.io/hostname": "w1"})
    budget = [web_pdb(0, expected=2, desired=1)]
    waiting: dict[str, Any] = {
        "metadata": {"namespace": "shop", "name": "web-standby", "labels": {"app": "web"}},
        "spec": {"schedulerName": "later"},
        "status": {"phase": "Pending"},
    }
    assert short([pinned], budget, ONE_WORKER, [waiting], evict=WEB[:1]) == []
    waiting["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    (text,) = short([pinned], budget, ONE_WORKER, [waiting], evict=WEB[:1])
    assert "shop/web-standby is Pending, unschedulable" in text, text
