"""spec.drain.rules: Cluster API's MachineDrainRule order, Skip and WaitCompleted over kubectl
drain's filters (core.rollout.drain.rules, core.rollout.drain.pods.select_pods), and the eviction pass that
acts on them (k8s.drain.attempt)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventedpleg.cli import report
from eventedpleg.core import compat
from eventedpleg.core.rollout.drain import pods as drainpods
from eventedpleg.core.rollout.drain import rules as drainrules
from eventedpleg.core.rollout.drain.pods import PodRef, SkipKind
from eventedpleg.core.rollout.drain.policy import DrainPolicy
from eventedpleg.core.rollout.snapshot import node_view
from eventedpleg.k8s import drain as drainer
from eventedpleg.models.nodeconfig import DrainBehavior, DrainRule, DrainSpec, LabelSelector, NodeConfigSpec

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
GONE = "2026-11-27T11:59:00Z"  # a deletionTimestamp


def pod(
    name: str,
    app: str = "web",
    *,
    namespace: str = "shop",
    owner: str | None = "ReplicaSet",
    phase: str = "Running",
    **meta: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "namespace": namespace, "labels": {"app": app}, **meta}
    if owner:
        body["ownerReferences"] = [{"kind": owner, "name": "o", "controller": True}]
    return {"metadata": body, "spec": {}, "status": {"phase": phase}}


def rule(behavior: str, app: str | None = None, order: int | None = None, **kw: Any) -> DrainRule:
    selector = LabelSelector(match_labels={"app": app}) if app else LabelSelector()
    return DrainRule(pod_selector=selector, behavior=DrainBehavior(behavior), order=order, **kw)


STATELESS_FIRST = (
    rule("Drain", "db", 10),
    rule("WaitCompleted", "job"),
    rule("Skip", "cache"),
)


def select(
    pods: list[dict[str, Any]],
    rules: tuple[DrainRule, ...],
    selector: LabelSelector | None = None,
    namespaces: drainrules.NamespaceLabels = drainrules.NO_NAMESPACES,
) -> drainpods.DrainSelection:
    options = drainpods.Options(
        delete_empty_dir_data=True,
        force=False,
        pods=selector or LabelSelector(),
        rules=rules,
        now=NOW,
        namespaces=namespaces,
    )
    return drainpods.select_pods(pods, options)


# Namespaces as the API lists them (every namespace carries kubernetes.io/metadata.name).
NAMESPACES = {
    "shop": {"kubernetes.io/metadata.name": "shop", "team": "web"},
    "monitoring": {"kubernetes.io/metadata.name": "monitoring", "team": "ops"},
    "batch": {"kubernetes.io/metadata.name": "batch", "team": "ops"},
}


def team(name: str) -> LabelSelector:
    return LabelSelector(match_labels={"team": name})


def refs(*names: str) -> tuple[PodRef, ...]:
    return tuple(PodRef("shop", name) for name in names)


def test_the_first_rule_that_selects_a_pod_decides_and_no_rule_means_drain_in_order_0() -> None:
    rules = (
        rule("Skip", "db", namespaces=["staging"]),
        rule("Drain", "db", 5),
        rule("WaitCompleted"),  # every pod the rules above did not take
    )
    assert drainrules.place(pod("a", "db", namespace="staging"), rules).behavior is DrainBehavior.SKIP
    assert drainrules.place(pod("a", "db"), rules) == drainrules.Placement(DrainBehavior.DRAIN, 5)
    assert drainrules.place(pod("a", "web"), rules).behavior is DrainBehavior.WAIT_COMPLETED
    assert drainrules.place(pod("a", "web"), ()) == drainrules.DRAIN
    assert drainrules.place(pod("a", "db"), (rule("Drain", "db"),)).order == 0  # order absent: 0


def test_a_namespace_selector_selects_pods_by_their_namespaces_labels_anded_with_the_pod_selector() -> None:
    """Cluster API's MachineDrainRulePodSelector: selector AND namespaceSelector, each empty selecting
    everything; our `namespaces` list narrows further."""
    prom = rule("Drain", "prometheus", 10, namespace_selector=team("ops"))
    assert drainrules.place(pod("p", "prometheus", namespace="monitoring"), (prom,), NAMESPACES).order == 10
    assert drainrules.place(pod("p", "prometheus", namespace="shop"), (prom,), NAMESPACES).order == 0
    assert drainrules.place(pod("p", "web", namespace="monitoring"), (prom,), NAMESPACES).order == 0
    every_pod = rule("Skip", namespace_selector=team("ops"))  # no podSelector: every pod of those namespaces
    assert drainrules.place(pod("j", "job", namespace="batch"), (every_pod,), NAMESPACES).behavior is (
        DrainBehavior.SKIP
    )
    by_name = rule("Skip", namespace_selector=team("ops"), namespaces=["batch"])  # both must hold
    assert drainrules.place(pod("p", "x", namespace="monitoring"), (by_name,), NAMESPACES) == drainrules.DRAIN
    assert drainrules.place(pod("p", "x", namespace="batch"), (by_name,), NAMESPACES).behavior is (
        DrainBehavior.SKIP
    )
    by_metadata_name = rule(
        "Skip", namespace_selector=LabelSelector(match_labels={"kubernetes.io/metadata.name": "shop"})
    )
    assert drainrules.place(pod("w"), (by_metadata_name,), NAMESPACES).behavior is DrainBehavior.SKIP
    # A namespace not listed (deleted since) has no labels: only an empty namespaceSelector matches it.
    assert drainrules.place(pod("p", namespace="gone"), (every_pod,), NAMESPACES) == drainrules.DRAIN
    assert drainrules.place(pod("p", namespace="gone"), (rule("Skip"),), NAMESPACES).behavior is (
        DrainBehavior.SKIP
    )


def test_namespaces_are_read_only_when_a_rule_has_a_namespace_selector(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plain = DrainPolicy.of(DrainSpec(rules=STATELESS_FIRST))
    assert not plain.reads_namespaces and not drainrules.reads_namespaces(())

    def unexpected(_api: object) -> list[dict[str, Any]]:
        raise AssertionError("Namespaces listed without a namespaceSelector")

    monkeypatch.setattr(drainer, "_all_namespaces", unexpected)
    assert drainer.namespace_labels(None, plain) == {}  # type: ignore[arg-type]
    assert drainer.namespace_labels(None, DrainPolicy.of(DrainSpec())) == {}  # type: ignore[arg-type]
    listed = [{"metadata": {"name": name, "labels": labels}} for name, labels in NAMESPACES.items()] + [
        {"metadata": {"name": "bare"}}
    ]
    monkeypatch.setattr(drainer, "_all_namespaces", lambda _api: listed)
    ops = DrainPolicy.of(DrainSpec(rules=(rule("Skip", namespace_selector=team("ops")),)))
    assert ops.reads_namespaces
    assert drainer.namespace_labels(None, ops) == {**NAMESPACES, "bare": {}}  # type: ignore[arg-type]


def test_the_eviction_pass_reads_the_namespaces_and_orders_by_them(monkeypatch: pytest.MonkeyPatch) -> None:
    evicted: list[PodRef] = []
    listed: list[int] = []
    monkeypatch.setattr(drainer, "_evict", lambda _api, ref, _policy: evicted.append(ref))
    monkeypatch.setattr(drainer, "never_allowed", lambda _api, _pods, _refused: [])

    def namespaces(_api: object) -> list[dict[str, Any]]:
        listed.append(1)
        return [{"metadata": {"name": name, "labels": labels}} for name, labels in NAMESPACES.items()]

    monkeypatch.setattr(drainer, "_all_namespaces", namespaces)
    policy = DrainPolicy.of(DrainSpec(rules=(rule("Drain", order=5, namespace_selector=team("ops")),)))
    pods = [pod("prom", namespace="monitoring"), pod("web-0"), pod("job", namespace="batch")]
    result = drainer.attempt(None, "n1", policy, now=NOW, pods=pods)  # type: ignore[arg-type]
    assert evicted == list(refs("web-0")) and listed == [1] and not result.done
    assert "order 5 waits for order 0: monitoring/prom, batch/job" in result.waiting
    evicted.clear()
    drainer.attempt(None, "n1", policy, now=NOW, pods=pods[:1], namespaces=NAMESPACES)  # type: ignore[arg-type]
    assert evicted == [PodRef("monitoring", "prom")] and listed == [1]  # given: not listed again


def test_stateless_pods_go_first_databases_wait_jobs_finish_and_skipped_pods_stay() -> None:
    pods = [pod("web-0"), pod("web-1"), pod("pg-0", "db"), pod("report", "job"), pod("redis", "cache")]
    chosen = select(pods, STATELESS_FIRST)
    assert chosen.evict == refs("web-0", "web-1")
    assert chosen.later == ((PodRef("shop", "pg-0"), 10),)
    assert chosen.wait_completed == refs("report")
    assert dict(chosen.skipped) == {PodRef("shop", "redis"): SkipKind.RULE}
    assert chosen.order == 0 and not chosen.done
    assert chosen.drained == refs("web-0", "web-1", "pg-0")
    note = drainpods.result(chosen).waiting
    assert note == (
        "evicting 2 pod(s) of order 0; order 10 waits for order 0: shop/pg-0; "
        "waits for shop/report to complete (drain.rules: WaitCompleted)"
    )


def test_the_next_order_waits_until_every_pod_of_the_lower_ones_is_gone() -> None:
    terminating = [pod("web-0", deletionTimestamp=GONE), pod("pg-0", "db")]
    chosen = select(terminating, STATELESS_FIRST)
    assert chosen.evict == () and chosen.terminating == refs("web-0") and chosen.order == 0
    assert "order 10 waits for order 0: shop/pg-0" in drainpods.result(chosen).waiting

    blocked = [pod("bare", owner=None), pod("pg-0", "db")]  # no controller, no drain.force
    chosen = select(blocked, STATELESS_FIRST)
    assert chosen.evict == () and [ref for ref, _ in chosen.blocked] == list(refs("bare"))
    assert chosen.later == ((PodRef("shop", "pg-0"), 10),)

    gone = select([pod("pg-0", "db"), pod("report", "job", phase="Succeeded")], STATELESS_FIRST)
    assert gone.evict == refs("pg-0") and gone.order == 10
    assert drainpods.result(gone).waiting == "evicting 1 pod(s) of order 10"


def test_a_waitcompleted_pod_holds_the_drain_until_it_completes_and_is_never_evicted() -> None:
    running = select([pod("report", "job")], STATELESS_FIRST)
    assert running.evict == () and running.wait_completed == refs("report") and not running.done
    completed = select([pod("report", "job", phase="Succeeded")], STATELESS_FIRST)
    assert completed.evict == () and dict(completed.skipped) == {PodRef("shop", "report"): SkipKind.COMPLETED}
    assert completed.done
    # A Job pod with local data or no controller is waited for, not blocked: it is never evicted.
    bare = select([pod("report", "job", owner=None)], STATELESS_FIRST)
    assert bare.blocked == () and bare.wait_completed == refs("report")


def test_a_waitcompleted_pod_is_in_order_0_and_the_higher_orders_wait_for_it() -> None:
    pods = [pod("pg-0", "db"), pod("report", "job")]
    chosen = select(pods, STATELESS_FIRST)
    assert chosen.evict == () and chosen.order == 0 and chosen.later == ((PodRef("shop", "pg-0"), 10),)
    assert drainpods.result(chosen).waiting == (
        "order 10 waits for order 0: shop/pg-0; "
        "waits for shop/report to complete (drain.rules: WaitCompleted)"
    )
    first = (rule("Drain", "web", -1), *STATELESS_FIRST)  # a negative order goes before the wait
    chosen = select([pod("web-0"), *pods], first)
    assert chosen.evict == refs("web-0") and chosen.order == -1 and chosen.wait_completed == refs("report")


def test_onTimeout_forcedelete_at_the_deadline_deletes_waitcompleted_pods_too() -> None:
    policy = DrainPolicy.of(DrainSpec(rules=STATELESS_FIRST))
    pods = [pod("report", "job"), pod("pg-0", "db")]
    assert drainpods.select_pods(pods, policy.options(NOW)).evict == ()
    forced = drainpods.select_pods(pods, policy.options(NOW, force_delete=True))
    assert forced.evict == refs("report") and forced.later == ((PodRef("shop", "pg-0"), 10),)


def test_no_rule_moves_a_pod_kubectl_drain_keeps() -> None:
    drain_all = (rule("Drain", order=-3),)
    pods = [
        pod("ds", owner="DaemonSet"),
        pod("static", owner="Node", annotations={"kubernetes.io/config.mirror": "x"}),
        pod("pinned", annotations={"eventedpleg.io/drain": "skip"}),
    ]
    chosen = select(pods, drain_all)
    assert chosen.evict == () and chosen.done
    assert [kind for _, kind in chosen.skipped] == [SkipKind.DAEMONSET, SkipKind.MIRROR, SkipKind.OPTED_OUT]
    # drain.podSelector narrows first: a rule never brings back a pod it leaves out.
    outside = select([pod("pg-0", "db")], drain_all, LabelSelector(match_labels={"app": "web"}))
    assert dict(outside.skipped) == {PodRef("shop", "pg-0"): SkipKind.NOT_SELECTED}


def test_without_rules_the_drain_is_as_before() -> None:
    chosen = select([pod("web-0"), pod("pg-0", "db")], ())
    assert chosen.evict == refs("web-0", "pg-0") and chosen.later == () and chosen.order is None
    assert drainpods.result(chosen).waiting == "evicting 2 pod(s)"
    # Rules without a Drain one order nothing: no "of order" in the note.
    skip_only = select([pod("web-0"), pod("redis", "cache")], (rule("Skip", "cache"),))
    assert skip_only.order is None and drainpods.result(skip_only).waiting == "evicting 1 pod(s)"


def test_the_eviction_pass_evicts_only_the_current_order(monkeypatch: pytest.MonkeyPatch) -> None:
    evicted: list[PodRef] = []
    monkeypatch.setattr(drainer, "_evict", lambda _api, ref, _policy: evicted.append(ref))
    monkeypatch.setattr(drainer, "never_allowed", lambda _api, _pods, _refused: [])
    policy = DrainPolicy.of(DrainSpec(rules=STATELESS_FIRST))
    pods = [pod("pg-0", "db"), pod("web-0"), pod("report", "job"), pod("redis", "cache")]
    result = drainer.attempt(None, "n1", policy, now=NOW, pods=pods)  # type: ignore[arg-type]
    assert evicted == list(refs("web-0")) and not result.done
    assert "order 10 waits for order 0: shop/pg-0" in result.waiting


def test_rules_as_written_in_a_nodeconfig_round_trip() -> None:
    rules = [
        {"podSelector": {"matchLabels": {"app": "db"}}, "behavior": "Drain", "order": 10},
        {
            "podSelector": {"matchLabels": {"app": "job"}},
            "namespaces": ["batch"],
            "behavior": "WaitCompleted",
        },
        {"behavior": "Drain"},  # no order: 0
        {"namespaceSelector": {"matchLabels": {"team": "ops"}}, "behavior": "Skip"},
    ]
    spec = NodeConfigSpec.model_validate({"eventedPleg": True, "drain": {"rules": rules}})
    assert [(r.behavior, r.order) for r in spec.drain.rules] == [
        (DrainBehavior.DRAIN, 10),
        (DrainBehavior.WAIT_COMPLETED, None),
        (DrainBehavior.DRAIN, None),
        (DrainBehavior.SKIP, None),
    ]
    assert spec.drain.rules[3].namespace_selector == team("ops")
    written = spec.to_api()["drain"]["rules"]
    assert "order" not in written[1] and written[1]["namespaces"] == ["batch"]
    assert written[3]["namespaceSelector"]["matchLabels"] == {"team": "ops"}
    assert NodeConfigSpec.model_validate(spec.to_api()) == spec
    assert DrainPolicy.of(spec.drain).rules == spec.drain.rules  # hashable: DrainPolicy.of caches


def test_preflight_counts_every_orders_pods_and_names_the_waits() -> None:
    def node(name: str) -> dict[str, Any]:
        info = {"kubeletVersion": "v1.36.4", "containerRuntimeVersion": "containerd://2.2.9"}
        meta = {"name": name, "resourceVersion": "1", "annotations": {}, "labels": {}}
        return {"metadata": meta, "spec": {}, "status": {"nodeInfo": info}}

    def on(name: str, body: dict[str, Any]) -> dict[str, Any]:
        return {**body, "spec": {"nodeName": name}}

    pods = [on("a", pod("web-0")), on("a", pod("pg-0", "db")), on("a", pod("report", "job"))]
    pods += [on("b", pod("web-1"))]
    drain = DrainPolicy.of(DrainSpec(rules=STATELESS_FIRST))
    policy = compat.Policy()
    nodes = [node_view(node(name)) for name in ("a", "b")]
    rows = {row.node.name: row for row in report.preflight_rows(nodes, policy, pods, [], drain, now=NOW)}
    assert (rows["a"].evict, rows["a"].orders, rows["a"].wait_completed) == (2, 2, ("shop/report",))
    assert (rows["b"].evict, rows["b"].orders, rows["b"].wait_completed) == (1, 1, ())
    table = report.preflight_table([rows["a"], rows["b"]], policy, drain, wide=True).splitlines()
    assert "2 pod(s) in 2 orders, waits for 1 to complete" in table[1]
    assert "1 pod(s)" in table[2] and "orders" not in table[2]
    listed = json.loads(report.preflight_json([rows["a"]], policy))[0]["drain"]
    assert (listed["evict"], listed["orders"], listed["waitCompleted"]) == (2, 2, ["shop/report"])


def test_preflight_places_pods_by_their_namespaces_labels_as_the_drain_does() -> None:
    info = {"kubeletVersion": "v1.36.4", "containerRuntimeVersion": "containerd://2.2.9"}
    meta = {"name": "a", "resourceVersion": "1", "annotations": {}, "labels": {}}
    nodes = [node_view({"metadata": meta, "spec": {}, "status": {"nodeInfo": info}})]
    pods = [
        {**body, "spec": {"nodeName": "a"}}
        for body in (pod("web-0"), pod("prom-0", namespace="monitoring"), pod("job-0", namespace="batch"))
    ]
    drain = DrainPolicy.of(
        DrainSpec(
            rules=(
                rule("WaitCompleted", namespace_selector=team("ops"), namespaces=["batch"]),
                rule("Drain", order=3, namespace_selector=team("ops")),
            )
        )
    )
    (row,) = report.preflight_rows(nodes, compat.Policy(), pods, [], drain, now=NOW, namespaces=NAMESPACES)
    assert (row.evict, row.orders, row.wait_completed) == (2, 2, ("batch/job-0",))


# --- property: a simulated drain, pass after pass ---------------------------------------------------

APPS = ("web", "db", "job", "cache", "api")
APP = st.sampled_from((None, *APPS))  # None: every pod
TEAM = st.sampled_from((None, "web", "ops")).map(lambda name: team(name) if name else LabelSelector())
RULES = st.lists(
    st.one_of(
        st.builds(
            lambda app, order, ns: rule("Drain", app, order, namespace_selector=ns),
            APP,
            st.integers(-2, 3),
            TEAM,
        ),
        st.builds(lambda app, ns: rule("WaitCompleted", app, namespace_selector=ns), APP, TEAM),
        st.builds(lambda app, ns: rule("Skip", app, namespace_selector=ns), APP, TEAM),
    ),
    max_size=5,
).map(tuple)
NODE_PODS = st.lists(
    st.tuples(
        st.sampled_from(APPS),
        st.booleans(),
        st.sampled_from(["ReplicaSet", "DaemonSet"]),
        st.sampled_from(sorted(NAMESPACES)),
    ),
    max_size=8,
).map(
    lambda specs: [
        pod(f"p{i}", app, owner=owner, namespace=ns, **({"deletionTimestamp": GONE} if deleting else {}))
        for i, (app, deleting, owner, ns) in enumerate(specs)
    ]
)


@settings(max_examples=200, deadline=None)
@given(rules=RULES, pods=NODE_PODS, seeds=st.lists(st.integers(0, 3), min_size=40, max_size=40))
def test_no_pod_of_a_higher_order_is_evicted_while_one_of_a_lower_order_remains(
    rules: tuple[DrainRule, ...], pods: list[dict[str, Any]], seeds: list[int]
) -> None:
    """Each pass evicts what select says (evicted pods start terminating); terminating pods vanish and
    running WaitCompleted pods complete at random. Invariants: an evicted pod's order is the lowest
    among the pods to drain still on the node, terminating ones included; a WaitCompleted pod is never
    evicted; and the drain finishes once the waited-for pods have completed."""
    node = {body["metadata"]["name"]: body for body in pods}
    placed = {name: drainrules.place(body, rules, NAMESPACES) for name, body in node.items()}
    for body in pods:  # the first rule whose app and team (each absent: any) fit decides
        meta = body["metadata"]
        fits = [
            r
            for r in rules
            if r.pod_selector.match_labels.get("app", meta["labels"]["app"]) == meta["labels"]["app"]
            and r.namespace_selector.match_labels.get("team", "")
            in ("", NAMESPACES[meta["namespace"]]["team"])
        ]
        expected = fits[0].behavior if fits else DrainBehavior.DRAIN
        assert placed[meta["name"]].behavior is expected
    for seed in seeds:
        chosen = select(list(node.values()), rules, namespaces=NAMESPACES)
        if chosen.done:
            break
        skipped = {ref.name for ref, _ in chosen.skipped}
        to_drain = [  # WaitCompleted pods are in order 0
            placed[name].order
            for name in node
            if placed[name].behavior is not DrainBehavior.SKIP and name not in skipped
        ]
        for ref in chosen.evict:
            assert placed[ref.name].behavior is DrainBehavior.DRAIN
            assert placed[ref.name].order == min(to_drain)
            node[ref.name]["metadata"]["deletionTimestamp"] = GONE
        for ref in chosen.terminating[: seed % 2 + 1]:  # some deletions finish
            del node[ref.name]
        for ref in chosen.wait_completed[: seed + 1]:  # some waited-for pods complete
            node[ref.name]["status"]["phase"] = "Succeeded"
    assert select(
        list(node.values()), rules, namespaces=NAMESPACES
    ).done  # every pass moved something: 40 are enough for 8 pods
