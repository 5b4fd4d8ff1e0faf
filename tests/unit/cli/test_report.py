"""`eventedpleg status` (and the demo's live view): conditions, counts, and the nodes in our hands, with
the measured before/after figures of Done nodes; `eventedpleg preflight`'s drain column."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from eventedpleg import protocol
from eventedpleg.cli.report import (
    agent_pod_text,
    benefit_text,
    needs_agent_pods,
    preflight_json,
    preflight_rows,
    preflight_table,
    status_view,
)
from eventedpleg.core import compat, hostcheck
from eventedpleg.core.node.facts import benefit
from eventedpleg.core.rollout.drain import pods as drainpods
from eventedpleg.core.rollout.drain.policy import DrainPolicy
from eventedpleg.core.rollout.planner.taking import NO_AGENT
from eventedpleg.core.rollout.snapshot import NodeView, node_view
from eventedpleg.models.nodeconfig import DrainSpec, OnDrainBlocked, OrderBy, RolloutOrder

HASH = "0123456789"


def _node(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "resourceVersion": "1", "annotations": annotations, "labels": {}},
        "spec": {},
        "status": {
            "nodeInfo": {"kubeletVersion": "v1.36.4", "containerRuntimeVersion": "containerd://2.2.9"}
        },
    }


def _figures() -> str:
    before = benefit.MeasuredWindow(seconds=30, relists=30, relist_interval_seconds=1.0, cpu_millicores=31.2)
    after = benefit.MeasuredWindow(seconds=30, relists=0, relist_interval_seconds=None, cpu_millicores=24.9)
    doc = benefit.document(kubelet="v1.36.4", enabled=True, before=before, after=after, narrowed=False)
    return benefit.to_annotation(doc)


def test_benefit_text_is_the_agents_summary() -> None:
    assert (
        benefit_text(_figures())
        == "before: relist every 1.0s, kubelet 31m; after: no relist in 30s, kubelet 25m"
    )
    # A kubelet without process_cpu_seconds_total (the simulated one): no made-up or "?" CPU figure.
    unknown = benefit.MeasuredWindow(seconds=30, relists=30, relist_interval_seconds=1.0, cpu_millicores=None)
    assert unknown.describe() == "relist every 1.0s"
    started = benefit.MeasuredWindow(30, 0, None, 24.9, pods_started=2, pod_start_seconds=1.38)
    doc = benefit.document(kubelet="v1.36.4", enabled=True, before=None, after=started, narrowed=False)
    assert (
        benefit_text(benefit.to_annotation(doc))
        == "after: no relist in 30s, kubelet 25m, 2 pod starts 1.4s mean"
    )
    assert benefit_text("") == ""
    assert benefit_text("not json") == ""
    assert benefit_text(json.dumps(["a list"])) == ""


def test_status_shows_done_nodes_with_their_figures_and_failed_ones_with_their_reason() -> None:
    nodeconfig = {
        "metadata": {"name": "cluster"},
        "spec": {"eventedPleg": True},
        "status": {
            "renderedHash": HASH,
            "nodes": {"total": 2, "eligible": 2, "updated": 1, "failed": 1},
            "conditions": [
                {"type": "Degraded", "status": "True", "reason": "RolloutHalted", "message": "n2"}
            ],
        },
    }
    ours = {protocol.ANN_OWNER: "cluster", protocol.ANN_CURRENT: HASH}
    done = node_view(_node("n1", {**ours, protocol.ANN_STATE: "Done", protocol.ANN_BENEFIT: _figures()}))
    failed = node_view(
        _node("n2", {**ours, protocol.ANN_STATE: "RolledBack", protocol.ANN_REASON: "stream FAIL"})
    )

    text = status_view(nodeconfig, [done, failed])

    assert "nodes: 1/2 updated, 0 updating, 1 failed, 0 skipped, 2 selected" in text
    assert "Degraded     True   RolloutHalted: n2" in text
    row = next(line for line in text.splitlines() if line.startswith("n1 "))
    assert "Done ✓" in row and "after: no relist in 30s, kubelet 25m" in row
    assert "stream FAIL" in next(line for line in text.splitlines() if line.startswith("n2 "))


def test_preflight_names_the_drain_that_could_never_finish_and_counts_it_out() -> None:

    def pod(name: str, node: str, **meta: Any) -> dict[str, Any]:
        return {
            "metadata": {"namespace": "shop", "name": name, "labels": {"app": "db"}, **meta},
            "spec": {"nodeName": node},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }

    owned = {"ownerReferences": [{"controller": True, "kind": "ReplicaSet", "name": "db-1"}]}
    pods = [
        pod("db-0", "a", **owned),
        pod("scratch", "b"),
        pod("etcd-c", "c", annotations={"kubernetes.io/config.mirror": "x"}),
    ]
    pdb = {
        "metadata": {"namespace": "shop", "name": "db", "generation": 1},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "db"}}},
        "status": {"observedGeneration": 1, "expectedPods": 1, "desiredHealthy": 1},
    }
    refuses = hostcheck.HostCheck(datetime(2026, 11, 25, tzinfo=UTC), {"DropInOnly": "Unsupported: x"})
    checked = {protocol.ANN_HOST_CHECK: refuses.to_json()}
    nodes = [node_view(_node(n, checked if n == "e" else {})) for n in ("a", "b", "c", "d", "e")]
    policy, drain = compat.Policy(), DrainPolicy.of(DrainSpec())
    rows = {
        row.node.name: row
        for row in preflight_rows(nodes, policy, pods, [pdb], drain, now=datetime(2026, 11, 25, tzinfo=UTC))
    }
    assert rows["a"].never.startswith("shop/db-0: PodDisruptionBudget shop/db (maxUnavailable: 0)")
    # a pod without a controller: no PDB involved, and no drain option given that lets it go
    assert rows["b"].never == "shop/scratch has no controller (it would not come back); set drain.force: true"
    assert rows["c"].verdict.eligible(policy) is False  # static pods: skipped by the verdict already
    assert (rows["d"].evict, rows["d"].never) == (0, "")
    assert (rows["e"].refusal, rows["d"].host) == ("Unsupported: x", None)
    assert [n for n, row in rows.items() if row.taken(policy, drain)] == ["d"]
    waits = DrainPolicy.of(DrainSpec(on_blocked=OnDrainBlocked.WAIT))
    assert [n for n, row in rows.items() if row.taken(policy, waits)] == ["a", "b", "d"]  # e: refused
    table = preflight_table(list(rows.values()), policy, drain, wide=True)
    assert (
        "2 of them with a drain that could never finish as things are: not cordoned, marked Skipped" in table
    )
    assert "nothing to evict" in table.splitlines()[4]
    assert table.splitlines()[5].split()[6:8] == ["refuses", "nothing"]  # HOST, DRAIN
    assert "1 of them refused by their agent's host check: not cordoned, marked Skipped" in table


def test_status_and_preflight_list_nodes_in_the_order_the_rollout_takes_them() -> None:
    rank = "example.com/rank"

    def labelled(name: str, value: str, created: str) -> dict[str, Any]:
        body = _node(name, {protocol.ANN_OWNER: "cluster", protocol.ANN_STATE: "Pending"})
        body["metadata"]["labels"] = {rank: value}
        body["metadata"]["creationTimestamp"] = created
        return body

    nodes = [
        node_view(labelled("a", "10", "2026-01-03T00:00:00Z")),
        node_view(labelled("b", "9", "2026-01-01T00:00:00Z")),
        node_view(labelled("c", "1", "2026-01-02T00:00:00Z")),
    ]
    by_label = {"eventedPleg": True, "rollout": {"order": {"by": "Label", "label": rank}}}
    text = status_view({"metadata": {"name": "cluster"}, "spec": by_label, "status": {}}, nodes)
    assert [line.split()[0] for line in text.splitlines() if line[:2] in ("a ", "b ", "c ")] == [
        "c",
        "b",
        "a",
    ]
    # Unreadable or absent: by name, as the operator's default.
    broken = {"eventedPleg": True, "rollout": {"order": {"by": "Nonsense"}}}
    text = status_view({"metadata": {"name": "cluster"}, "spec": broken, "status": {}}, nodes)
    assert [line.split()[0] for line in text.splitlines() if line[:2] in ("a ", "b ", "c ")] == [
        "a",
        "b",
        "c",
    ]
    policy, drain, now = compat.Policy(), DrainPolicy.of(DrainSpec()), datetime(2026, 11, 25, tzinfo=UTC)
    oldest = RolloutOrder(by=OrderBy.OLDEST_FIRST)
    rows = preflight_rows(nodes, policy, [], [], drain, now=now, order=oldest)
    assert [row.node.name for row in rows] == ["b", "c", "a"]
    assert [row.node.name for row in preflight_rows(nodes, policy, [], [], drain, now=now)] == ["a", "b", "c"]


def test_preflight_prints_each_advisory_once_with_its_nodes() -> None:
    def on(name: str, kubelet: str, runtime: str) -> dict[str, Any]:
        body = _node(name, {})
        body["status"]["nodeInfo"] = {"kubeletVersion": kubelet, "containerRuntimeVersion": runtime}
        return body

    nodes = [
        node_view(on("k17-new", "v1.38.0", "containerd://1.7.35")),
        node_view(on("k17-old", "v1.37.2", "containerd://1.7.35")),
        node_view(on("c22", "v1.36.4", "containerd://2.2.9")),
    ]
    policy, drain = compat.Policy(allow_risky=True), DrainPolicy.of(DrainSpec())
    rows = preflight_rows(nodes, policy, [], [], drain, now=datetime(2026, 11, 25, tzinfo=UTC))
    table = preflight_table(rows, policy, drain, wide=True)
    notes = [line for line in table.splitlines() if line.startswith("note (")]
    # KEP-4033: only the kubelet >= 1.38 on containerd 1.7; the <= 1.36 kubelet bugs: only c22.
    assert [n.split(")")[0] for n in notes if "KEP-4033" in n] == ["note (k17-new"]
    assert [n.split(")")[0] for n in notes if "k8s#128654" in n] == ["note (c22"]
    doc = {row["node"]: row for row in json.loads(preflight_json(rows, policy))}
    assert any("KEP-4033" in text for text in doc["k17-new"]["advisories"])
    assert doc["k17-old"]["advisories"] == []


def test_preflight_says_per_node_that_kubelet_136_is_supported_only_with_the_guard() -> None:
    def on(name: str, kubelet: str) -> NodeView:
        body = _node(name, {})
        body["status"]["nodeInfo"]["kubeletVersion"] = kubelet
        return node_view(body)

    nodes = [on("k136", "v1.36.4"), on("k137", "v1.37.2")]
    drain, now = DrainPolicy.of(DrainSpec()), datetime(2026, 11, 25, tzinfo=UTC)
    guarded = compat.Policy()
    table = preflight_table(preflight_rows(nodes, guarded, [], [], drain, now=now), guarded, drain, wide=True)
    notes = [line for line in table.splitlines() if "Supported only with the guard on" in line]
    assert len(notes) == 1 and notes[0].startswith("note (k136)"), table
    assert "2 of 2 node(s) eligible" in table
    off = compat.Policy(guard=False)
    rows = preflight_rows(nodes, off, [], [], drain, now=now)
    table = preflight_table(rows, off, drain, wide=True)
    line = next(line for line in table.splitlines() if line.startswith("k136"))
    assert "Risky" in line and "spec.guard.enabled: true" in line, table
    assert "1 of 2 node(s) eligible (Risky nodes need spec.allowRisky: true)" in table
    doc = {row["node"]: row for row in json.loads(preflight_json(rows, off))}
    assert (doc["k136"]["verdict"], doc["k136"]["eligible"]) == ("Risky", False)
    assert (doc["k137"]["verdict"], doc["k137"]["eligible"]) == ("Supported", True)


def _agent_pod(node: str, *, scheduled: bool = True, **status: Any) -> dict[str, Any]:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "values": [node]}]}]
            }
        }
    }
    spec: dict[str, Any] = {"affinity": affinity, **({"nodeName": node} if scheduled else {})}
    meta = {"name": f"agent-{node}", "namespace": "eps", "ownerReferences": [{"kind": "DaemonSet"}]}
    return {"metadata": meta, "spec": spec, "status": status}


def test_agent_pod_text_gives_the_pods_own_reason() -> None:
    assert agent_pod_text("n1", []).startswith("no agent pod for this node")
    pending = _agent_pod(
        "n1",
        scheduled=False,
        conditions=[{"type": "PodScheduled", "status": "False", "message": "0/3 nodes are available: taint"}],
    )
    assert (
        agent_pod_text("n1", [pending])
        == "agent pod eps/agent-n1 not scheduled: 0/3 nodes are available: taint"
    )
    crashing = _agent_pod(
        "n1",
        containerStatuses=[
            {
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s"}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
            }
        ],
    )
    assert agent_pod_text("n1", [crashing]) == (
        "agent pod eps/agent-n1: CrashLoopBackOff: back-off 5m0s (last exit 1: Error)"
    )
    unready = _agent_pod("n1", phase="Running", conditions=[{"type": "Ready", "status": "False"}])
    assert agent_pod_text("n1", [unready]) == "agent pod eps/agent-n1 not ready (Running)"
    assert agent_pod_text("n2", [unready]).startswith("no agent pod")  # another node's pod


def test_preflight_and_status_name_a_node_without_a_live_agent() -> None:
    now = datetime(2026, 11, 25, tzinfo=UTC)
    live = hostcheck.HostCheck(now, {}).to_json()
    nodes = [node_view(_node("a", {protocol.ANN_HOST_CHECK: live})), node_view(_node("b", {}))]
    pods = [
        _agent_pod(
            "b", scheduled=False, conditions=[{"type": "PodScheduled", "message": "untolerated taint"}]
        )
    ]
    policy, drain = compat.Policy(), DrainPolicy.of(DrainSpec())
    rows = preflight_rows(nodes, policy, [], [], drain, now=now, agent_pods=pods)
    assert rows[0].no_agent == ""
    assert "not scheduled: untolerated taint" in rows[1].no_agent
    table = preflight_table(rows, policy, drain, wide=True)
    assert "no agent" in table and "1 of them without a live agent" in table and "untolerated taint" in table
    note = {"name": "b", "state": "Pending", "reason": NO_AGENT + "no host check", "cause": "NoAgent"}
    nodeconfig = {"metadata": {"name": "cluster"}, "spec": {}, "status": {"nodeStatuses": [note]}}
    assert needs_agent_pods(nodeconfig)
    text = status_view(nodeconfig, nodes, agent_pods=pods)
    assert "not scheduled: untolerated taint" in text


def test_preflight_drain_column_names_pods_that_ask_not_to_be_disrupted_as_the_operator_does() -> None:
    owned = {"ownerReferences": [{"controller": True, "kind": "ReplicaSet", "name": "r"}]}

    def pod(name: str, node: str, annotations: dict[str, str]) -> dict[str, Any]:
        meta = {"namespace": "ml", "name": name, "annotations": annotations, **owned}
        return {"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": "Running"}}

    pods = [
        pod("train-0", "a", {"karpenter.sh/do-not-disrupt": "true"}),
        pod("cache-0", "b", {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}),
        pod("web-0", "c", {"karpenter.sh/do-not-disrupt": "false"}),
    ]
    nodes = [node_view(_node(n, {})) for n in ("a", "b", "c")]
    policy, drain = compat.Policy(), DrainPolicy.of(DrainSpec())
    now = datetime(2026, 11, 25, tzinfo=UTC)
    rows = {row.node.name: row for row in preflight_rows(nodes, policy, pods, [], drain, now=now)}
    assert rows["a"].never == 'ml/train-0 annotated karpenter.sh/do-not-disrupt: "true"'
    assert rows["b"].never == 'ml/cache-0 annotated cluster-autoscaler.kubernetes.io/safe-to-evict: "false"'
    assert (rows["c"].evict, rows["c"].never) == (1, "")
    # the operator's look before the cordon reads the same pure function over the same pods
    for name in ("a", "b", "c"):
        mine = [p for p in pods if p["spec"]["nodeName"] == name]
        assert rows[name].never == drainpods.never(drainpods.select_pods(mine, drain.options(now)))
    table = preflight_table(list(rows.values()), policy, drain, wide=True).splitlines()
    assert "never finishes" in table[1] and 'karpenter.sh/do-not-disrupt: "true"' in table[1]
    assert "1 pod(s)" in table[3]


def test_preflight_shows_a_budget_whose_replacements_have_nowhere_to_go_per_node() -> None:
    """Two replicas under minAvailable: 1 on the only worker of their nodeSelector: `never finishes` on
    that node before any cordon; a second worker they fit makes the drain finish."""

    def web(name: str, node: str) -> dict[str, Any]:
        owner = {"controller": True, "kind": "ReplicaSet", "name": "web-1"}
        return {
            "metadata": {
                "namespace": "shop",
                "name": name,
                "labels": {"app": "web"},
                "ownerReferences": [owner],
            },
            "spec": {"nodeName": node, "nodeSelector": {"pool": "web"}},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }

    pdb = {
        "metadata": {"namespace": "shop", "name": "web", "generation": 1},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        "status": {"observedGeneration": 1, "expectedPods": 2, "desiredHealthy": 1, "disruptionsAllowed": 1},
    }

    def worker(name: str, pool: str) -> NodeView:
        body = _node(name, {})
        body["metadata"]["labels"] = {"pool": pool}
        body["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        return node_view(body)

    policy, drain, now = compat.Policy(), DrainPolicy.of(DrainSpec()), datetime(2026, 11, 25, tzinfo=UTC)
    pods = [web("web-0", "a"), web("web-1", "a")]
    alone = [worker("a", "web"), worker("b", "batch")]
    (row,) = preflight_rows(alone[:1], policy, pods, [pdb], drain, now=now, cluster=alone)
    assert row.take.kind.value == "block"
    assert row.never.startswith(
        "shop/web-1: PodDisruptionBudget shop/web (minAvailable: 1) allows 1 disruption(s) now and the drain "
        "needs 2, but no replacement can become healthy: 2 of them fit no other node"
    )
    table = preflight_table([row], policy, drain, wide=True)
    assert "never finishes" in table.splitlines()[1]
    room = [*alone, worker("c", "web")]
    (row,) = preflight_rows(room[:1], policy, pods, [pdb], drain, now=now, cluster=room)
    assert (row.never, row.evict) == ("", 2)
