"""The operator on the real control plane: kwok nodes, real drains and PDBs, the chart's RBAC, kills."""

from __future__ import annotations

import itertools
import json
import os
import shlex
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg.core import hostcheck
from eventedpleg_lab.demo.harness import chart_dir, http_status
from eventedpleg_lab.kube.fakenodes import FakeNode
from eventedpleg_lab.localcluster import build
from eventedpleg_lab.localcluster.cluster import LocalCluster, kubectl_path
from tests.cluster.rollout_harness import (
    OperatorProcess,
    ProtocolAgents,
    drain_retries,
    install_operator_rbac,
    nodeconfig,
    operator_running,
    plain,
    planned_again,
    wait_for,
)
from tests.cluster.workloads import guarded_deployment

pytestmark = pytest.mark.cluster
NS = "evented-pleg-system"


class Env:
    def __init__(self, cluster: LocalCluster, tmp: Path) -> None:
        self.cluster, self.tmp = cluster, tmp
        self.prefix = f"r{uuid.uuid4().hex[:5]}"
        self.api = cluster.api()
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.names: list[str] = []

    def nodes(self, specs: list[dict[str, Any]]) -> list[str]:
        fakes = []
        for i, extra in enumerate(specs):
            labels = {"rollout-test": self.prefix, **extra.pop("labels", {})}
            extra.setdefault("zone", f"z{i % 2}")
            fakes.append(FakeNode(name=f"{self.prefix}-{i:02d}", labels=labels, **extra))
        return self.cluster.add_nodes(fakes)

    def apply(self, body: dict[str, Any]) -> None:
        self.cluster.kubectl("apply", "-f", "-", stdin=json.dumps(body), check=True)
        self.names.append(body["metadata"]["name"])

    def nc(self, name: str) -> dict[str, Any]:
        return dict(plain(self.custom.get_cluster_custom_object(protocol.GROUP, c.VERSION, c.PLURAL, name)))

    def condition(self, name: str, kind: str) -> dict[str, Any]:
        for cond in (self.nc(name).get("status") or {}).get("conditions", []):
            if cond["type"] == kind:
                return cond  # type: ignore[no-any-return]
        return {}

    def annotations(self, node: str) -> dict[str, str]:
        return dict(plain(self.core.read_node(node))["metadata"].get("annotations") or {})

    def node_states(self) -> dict[str, tuple[str | None, bool]]:
        result = {}
        for node in plain(self.core.list_node(label_selector=f"rollout-test={self.prefix}"))["items"]:
            ann = node["metadata"].get("annotations") or {}
            result[node["metadata"]["name"]] = (
                ann.get(protocol.ANN_STATE),
                bool(node["spec"].get("unschedulable")),
            )
        return result

    def state_labels(self) -> dict[str, str | None]:
        """Each node's eventedpleg.io/state label as `kubectl get nodes -L` shows it (None: no label)."""
        out = self.cluster.kubectl(
            "get", "nodes", "-l", f"rollout-test={self.prefix}", "-L", protocol.LABEL_STATE, check=True
        ).stdout.splitlines()
        assert out[0].split()[-1] == "STATE", out[0]  # the -L column, headed by the key's last segment
        rows = [line.split() for line in out[1:]]
        return {row[0]: row[5] if len(row) > 5 else None for row in rows}

    def cleanup(self) -> None:
        for name in self.names:
            try:
                self.custom.patch_cluster_custom_object(
                    protocol.GROUP, c.VERSION, c.PLURAL, name, {"metadata": {"finalizers": None}}
                )
                self.custom.delete_cluster_custom_object(protocol.GROUP, c.VERSION, c.PLURAL, name)
            except client.ApiException:
                pass
        self.api.close()


def mixed(count: int) -> list[dict[str, Any]]:
    """Supported nodes plus the three kinds that must be skipped with a reason."""
    specs: list[dict[str, Any]] = [{} for _ in range(count)]
    specs[1] = {"kubelet_version": "v1.25.16"}
    specs[2] = {"container_runtime_version": "containerd://1.6.33"}
    specs[3] = {"control_plane": True}
    specs[4] = {"container_runtime_version": "cri-o://1.35.6", "kubelet_version": "v1.34.1"}
    return specs


def test_full_rollout_over_mixed_nodes(env: Env) -> None:
    names = env.nodes(mixed(12))
    env.apply(
        nodeconfig(
            "full", env.prefix, rollout={"maxUnavailable": 3, "canary": {"nodes": 1, "soakSeconds": 2}}
        )
    )
    with operator_running(env.cluster, NS, env.tmp) as op, ProtocolAgents(env.api, env.prefix) as agents:
        waited = env.cluster.kubectl("wait", "--for=condition=Available", "nodeconfig/full", "--timeout=100s")
        assert waited.returncode == 0, (waited.stderr, op.log()[-3000:])
    status = env.nc("full")["status"]
    assert status["nodes"] == {
        "total": 12,
        "eligible": 9,
        "updated": 9,
        "updating": 0,
        "failed": 0,
        "skipped": 3,
        "awaitingApproval": 0,
    }
    skipped = {n["name"]: n["reason"] for n in status["nodeStatuses"] if n["state"] == "Skipped"}
    assert "unrecognized feature gate" in skipped[names[1]]
    assert "Unimplemented" in skipped[names[2]]
    assert "includeControlPlane" in skipped[names[3]]
    states = env.node_states()
    for name in names:
        state, unschedulable = states[name]
        assert not unschedulable, name  # nobody left cordoned
        assert state == ("Done" if name not in names[1:4] else None), name
        assert agents.applied.get(name, 0) <= 1, name
    crio = env.annotations(names[4])
    assert crio[protocol.ANN_CURRENT] == status["renderedHash"]
    cm = plain(env.core.read_namespaced_config_map(c.CONFIGMAP_PREFIX + status["renderedHash"], NS))
    assert cm["immutable"] and "enable_pod_events = true" in cm["data"][c.CM_KEY_CRIO]
    table = env.cluster.kubectl("get", "nodeconfig", "full", check=True).stdout
    assert table.split("\n")[0].split() == [
        "NAME",
        "EVENTEDPLEG",
        "UPDATED",
        "TOTAL",
        "READY",
        "STALLED",
        "AGE",
        "MESSAGE",
    ]
    assert table.split("\n")[1].split()[1:6] == ["true", "9", "12", "True", "False"]
    ready = env.condition("full", "Ready")["message"]
    assert ready and table.split("\n")[1].rstrip().endswith(ready)  # MESSAGE: why Ready is what it is
    events = env.cluster.kubectl(
        "get", "events", "-n", "default", "--field-selector", f"involvedObject.name={names[0]}", check=True
    ).stdout
    # An empty node: cordoned and asked to apply in one write, nothing evicted (no "Drained"), given back.
    assert "Uncordoned" in events and "Drained" not in events


def protect_with_pdb(env: Env, node: str) -> Callable[[], list[dict[str, Any]]]:
    """One Deployment pod pinned to `node` and a PDB with minAvailable 1 that also covers a standby pod
    that cannot be scheduled: no eviction allowed for now, and not provably never (the drain waits)."""
    manifests = guarded_deployment(
        env.prefix, "web", replicas=1, node_selector={"kubernetes.io/hostname": node}, may_allow_later=True
    )
    env.cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(manifests), check=True)

    def pods() -> list[dict[str, Any]]:
        items = plain(env.core.list_namespaced_pod(env.prefix))["items"]
        return [p for p in items if p["status"].get("phase") == "Running"]

    wait_for(pods, what="web pod running")
    wait_for(
        lambda: (
            plain(client.PolicyV1Api(env.api).read_namespaced_pod_disruption_budget("web-pdb", env.prefix))
            .get("status", {})
            .get("expectedPods")
            == 2  # the running pod and the standby
        ),
        what="PDB observed",
    )
    return pods


def test_pdb_blocks_the_drain_and_is_named_without_being_violated(env: Env) -> None:
    (node,) = env.nodes([{}])
    pods = protect_with_pdb(env, node)
    env.apply(nodeconfig("pdb", env.prefix))
    with operator_running(env.cluster, NS, env.tmp) as op, ProtocolAgents(env.api, env.prefix):
        message = wait_for(
            lambda: "web-pdb" in (m := env.condition("pdb", "Progressing").get("message", "")) and m,
            what="Progressing names the PDB",
        )
        assert "refused" in message and node in message
        planned_again(env.api, op.port, node)
        # A refused drain is tried again about once a second (as kubectl drain polls), not at once after
        # each attempt: the pass each attempt's end wakes must not start the next one straight away.
        tries = drain_retries(op.port)
        planned_again(env.api, op.port, node)
        time.sleep(5)
        assert drain_retries(op.port) - tries <= 10, "drain attempts in a hot loop"
        running = pods()
        assert len(running) == 1 and "deletionTimestamp" not in running[0]["metadata"]  # never violated
        assert env.node_states()[node] == ("Draining", True)
        client.PolicyV1Api(env.api).delete_namespaced_pod_disruption_budget("web-pdb", env.prefix)
        wait_for(
            lambda: env.condition("pdb", "Available").get("status") == "True", what="Available", timeout=60
        )
        assert env.node_states()[node] == ("Done", False), op.log()[-2000:]


def never_evictable(env: Env, node: str) -> None:
    """One Deployment pod pinned to `node` under a PDB with minAvailable 1 of 1 (judged by the real
    disruption controller): no eviction is ever allowed until someone changes it."""
    manifests = guarded_deployment(
        env.prefix, "db", replicas=1, node_selector={"kubernetes.io/hostname": node}
    )
    env.cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(manifests), check=True)

    def judged() -> bool:
        pdb = plain(client.PolicyV1Api(env.api).read_namespaced_pod_disruption_budget("db-pdb", env.prefix))
        status = pdb.get("status", {})
        return (status.get("expectedPods"), status.get("desiredHealthy"), status.get("currentHealthy")) == (
            1,
            1,
            1,
        )

    wait_for(judged, what="the PDB judged by the controller-manager")


def node_events(env: Env, node: str) -> str:
    return env.cluster.kubectl(
        "get", "events", "-n", "default", "--field-selector", f"involvedObject.name={node}", check=True
    ).stdout


def unpause_until_ready(env: Env, name: str, *, watch: str) -> dict[str, tuple[str | None, bool]]:
    """Unpause NodeConfig `name` and run the operator until it is Ready, checking at every look that
    `watch` is never cordoned; the node states at the end."""
    env.cluster.kubectl(
        "patch", "nodeconfig", name, "--type=merge", "-p", '{"spec":{"rollout":{"paused":false}}}', check=True
    )
    with operator_running(env.cluster, NS, env.tmp), ProtocolAgents(env.api, env.prefix):

        def ready() -> bool:
            assert not env.node_states()[watch][1], f"{watch} was cordoned"
            return env.condition(name, "Ready").get("status") == "True"

        wait_for(ready, what="Ready", timeout=90)
        return env.node_states()


def test_a_drain_that_could_never_finish_is_reported_and_its_node_never_cordoned(env: Env) -> None:
    """Default drain.onBlocked (Skip): preflight names the pod and the PDB; the rollout marks that node
    Skipped without a cordon or an eviction and completes on the others."""
    blocked, free = env.nodes([{}, {}])
    never_evictable(env, blocked)
    env.apply(nodeconfig("never", env.prefix, rollout={"paused": True, "canary": {"nodes": 0}}))
    looked = eventedpleg(env, "preflight", "--nodeconfig", "never", "-o", "wide")
    print(looked.stdout)  # what a user sees (pytest -s or -rA)
    assert looked.returncode == 3, looked.stderr  # some selected nodes will not be taken
    row = next(line for line in looked.stdout.splitlines() if line.startswith(blocked))
    assert "never finishes" in row
    assert f"{env.prefix}/db-" in row and f"PodDisruptionBudget {env.prefix}/db-pdb (minAvailable: 1)" in row
    assert "1 of them with a drain that could never finish as things are: not cordoned, marked Skipped" in (
        looked.stdout
    )
    assert "nothing to evict" in next(ln for ln in looked.stdout.splitlines() if ln.startswith(free))
    as_json = json.loads(eventedpleg(env, "preflight", "--nodeconfig", "never", "-o", "json").stdout)
    assert [n["node"] for n in as_json if n["drain"]["neverFinishes"]] == [blocked]
    states = unpause_until_ready(env, "never", watch=blocked)
    assert states == {blocked: ("Skipped", False), free: ("Done", False)}
    reason = env.annotations(blocked)[protocol.ANN_REASON]
    assert reason.startswith("not cordoned: the drain could never finish: ") and "db-pdb" in reason
    events = node_events(env, blocked)
    assert "DrainBlocked" in events and "Draining" not in events and "Uncordoned" not in events
    pods = plain(env.core.list_namespaced_pod(env.prefix, label_selector="app=db"))["items"]
    assert [p["status"]["phase"] for p in pods] == ["Running"]  # nothing evicted
    assert "deletionTimestamp" not in pods[0]["metadata"]


def test_on_blocked_wait_keeps_the_node_in_service_until_the_budget_is_relaxed(env: Env) -> None:
    (node,) = env.nodes([{}])
    never_evictable(env, node)
    env.apply(nodeconfig("waits", env.prefix, drain={"onBlocked": "Wait"}))
    with operator_running(env.cluster, NS, env.tmp) as op, ProtocolAgents(env.api, env.prefix):
        message = wait_for(
            lambda: "db-pdb" in (m := env.condition("waits", "Progressing").get("message", "")) and m,
            what="Progressing names the PDB",
        )
        assert "waiting, not cordoned" in message and node in message
        assert env.node_states()[node] == (None, False)  # in service, not taken
        assert "db-pdb" in env.annotations(node)[protocol.ANN_BLOCKED]
        planned_again(env.api, op.port, node)
        assert node_events(env, node).count("DrainBlocked") == 1  # said once, looked at again and again
        env.cluster.kubectl(
            "patch",
            "pdb",
            "-n",
            env.prefix,
            "db-pdb",
            "--type=merge",
            "-p",
            '{"spec":{"minAvailable":0}}',
            check=True,
        )
        wait_for(lambda: env.condition("waits", "Ready").get("status") == "True", what="Ready", timeout=90)
        assert env.node_states()[node] == ("Done", False), op.log()[-2000:]
        assert protocol.ANN_BLOCKED not in env.annotations(node)


NODE_MAINTENANCE_CRD: dict[str, Any] = {
    # The medik8s NodeMaintenance API as its operator serves it (api/v1beta1, cluster-scoped, spec.nodeName),
    # reduced to the fields the operator reads.
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "nodemaintenances.nodemaintenance.medik8s.io"},
    "spec": {
        "group": "nodemaintenance.medik8s.io",
        "names": {"kind": "NodeMaintenance", "plural": "nodemaintenances", "singular": "nodemaintenance"},
        "scope": "Cluster",
        "versions": [
            {
                "name": "v1beta1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {"nodeName": {"type": "string"}, "reason": {"type": "string"}},
                            }
                        },
                    }
                },
            }
        ],
    },
}


def test_a_blocking_pod_and_a_node_maintenance_hold_their_nodes_in_service_until_gone(env: Env) -> None:
    """drain.blockingPodSelector and a medik8s NodeMaintenance: those nodes are not taken (never
    cordoned) while the pod runs or the object exists; the rest of the rollout goes on; once they are
    gone the nodes are taken and the rollout completes."""
    busy, maintained, free = env.nodes([{}, {}, {}])
    job = guarded_deployment(env.prefix, "backup", replicas=1, node_selector={"kubernetes.io/hostname": busy})
    job = [doc for doc in job if doc["kind"] != "PodDisruptionBudget"]  # just the pod
    env.cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(job), check=True)
    env.cluster.kubectl("apply", "-f", "-", stdin=json.dumps(NODE_MAINTENANCE_CRD), check=True)
    wait_for(
        lambda: env.cluster.kubectl("get", "nodemaintenances").returncode == 0, what="NodeMaintenance served"
    )
    claim = {
        "apiVersion": "nodemaintenance.medik8s.io/v1beta1",
        "kind": "NodeMaintenance",
        "metadata": {"name": f"{env.prefix}-nm"},
        "spec": {"nodeName": maintained, "reason": "firmware"},
    }
    env.cluster.kubectl("apply", "-f", "-", stdin=json.dumps(claim), check=True)
    drain = {"blockingPodSelector": {"matchLabels": {"app": "backup"}}}
    env.apply(
        nodeconfig("holding", env.prefix, drain=drain, rollout={"maxUnavailable": 3, "canary": {"nodes": 0}})
    )
    try:
        with operator_running(env.cluster, NS, env.tmp) as op, ProtocolAgents(env.api, env.prefix):
            wait_for(lambda: env.node_states()[free] == ("Done", False), what="the free node done")
            message = wait_for(
                lambda: (
                    (m := env.condition("holding", "Progressing").get("message", ""))
                    and busy in m
                    and maintained in m
                    and m
                ),
                what="Progressing names both held nodes",
            )
            assert f"runs {env.prefix}/backup-" in message and "matches drain.blockingPodSelector" in message
            assert f"NodeMaintenance {env.prefix}-nm (another maintenance owner) holds the node" in message
            assert env.node_states()[busy] == (None, False) and env.node_states()[maintained] == (None, False)
            assert "NodeHeld" in node_events(env, busy) and "NodeHeld" in node_events(env, maintained)
            env.cluster.kubectl("delete", "deployment", "-n", env.prefix, "backup", check=True)
            env.cluster.kubectl("delete", "nodemaintenance", f"{env.prefix}-nm", check=True)
            wait_for(
                lambda: env.condition("holding", "Ready").get("status") == "True", what="Ready", timeout=120
            )
            assert set(env.node_states().values()) == {("Done", False)}, op.log()[-2000:]
    finally:
        env.cluster.kubectl("delete", "crd", NODE_MAINTENANCE_CRD["metadata"]["name"], "--ignore-not-found")


def test_post_node_delay_holds_the_next_node_and_says_until_when(env: Env) -> None:
    first, second = env.nodes([{}, {}])
    env.apply(nodeconfig("spaced", env.prefix, rollout={"canary": {"nodes": 0}, "postNodeDelaySeconds": 20}))
    with operator_running(env.cluster, NS, env.tmp) as op, ProtocolAgents(env.api, env.prefix):
        wait_for(lambda: env.node_states()[first] == ("Done", False), what="the first node done")
        message = wait_for(
            lambda: (
                f"{first} was Done at" in (m := env.condition("spaced", "Progressing").get("message", ""))
                and m
            ),
            what="Progressing says when the next node starts",
        )
        assert "(rollout.postNodeDelaySeconds: 20)" in message, message
        assert env.node_states()[second] == (None, False)
        done_at = env.annotations(first)[protocol.ANN_STATE_SINCE]
        wait_for(lambda: env.node_states()[second][0] is not None, what="the second node taken", timeout=60)
        started = time.time()
        assert started - datetime.fromisoformat(done_at).timestamp() >= 20
        wait_for(lambda: env.condition("spaced", "Ready").get("status") == "True", what="Ready", timeout=60)
        assert op.log()


def taken_in_order(env: Env, name: str, count: int) -> list[str]:
    """The nodes in the order the rollout took them (first seen with a state), once it is Ready."""
    taken: list[str] = []

    def all_taken() -> bool:
        taken.extend(n for n, (state, _) in sorted(env.node_states().items()) if state and n not in taken)
        return len(taken) == count

    wait_for(all_taken, interval=0.1, what="every node taken", timeout=120)
    wait_for(lambda: env.condition(name, "Ready").get("status") == "True", what="Ready", timeout=60)
    return taken


def test_nodes_are_taken_by_label_value_then_unlabelled_last(env: Env) -> None:
    rank = "example.com/rollout-rank"
    names = env.nodes([{"zone": "z", "labels": {rank: r}} for r in ("10", "2", "1")] + [{"zone": "z"}])
    order = {"by": "Label", "label": rank}
    env.apply(nodeconfig("ranked", env.prefix, rollout={"canary": {"nodes": 0}, "order": order}))
    with operator_running(env.cluster, NS, env.tmp), ProtocolAgents(env.api, env.prefix):
        assert taken_in_order(env, "ranked", 4) == [names[2], names[1], names[0], names[3]]


def test_oldest_first_takes_nodes_by_creation_time_not_name(env: Env) -> None:
    names = []
    for i in (2, 1, 0):  # created newest name first; creationTimestamp has a resolution of one second
        names += env.cluster.add_nodes(
            [FakeNode(name=f"{env.prefix}-{i:02d}", labels={"rollout-test": env.prefix}, zone="z")]
        )
        time.sleep(1.1)
    oldest = {"canary": {"nodes": 0}, "order": {"by": "OldestFirst"}}
    env.apply(nodeconfig("oldest", env.prefix, rollout=oldest))
    with operator_running(env.cluster, NS, env.tmp), ProtocolAgents(env.api, env.prefix):
        assert taken_in_order(env, "oldest", 3) == names


def taints(env: Env, node: str) -> list[dict[str, str]]:
    return [t for t in plain(env.core.read_node(node))["spec"].get("taints") or [] if "kwok" not in t["key"]]


def test_taint_before_cordon_taints_waits_then_cordons_and_takes_only_its_own_taint_off(env: Env) -> None:
    theirs = {"key": "eventedpleg.io/draining", "value": "ops", "effect": "NoSchedule"}
    first, second = env.nodes([{"zone": "z"}, {"zone": "z", "taints": [theirs]}])
    tainting = {"taintBeforeCordon": {"seconds": 6}}
    env.apply(nodeconfig("tainting", env.prefix, drain=tainting))
    ours = {"key": "eventedpleg.io/draining", "effect": "PreferNoSchedule"}
    with operator_running(env.cluster, NS, env.tmp) as op, ProtocolAgents(env.api, env.prefix):
        wait_for(lambda: ours in taints(env, first), what="our taint on the first node", interval=0.1)
        tainted = time.time()
        assert env.node_states()[first] == (None, False), "tainted, not cordoned yet"
        assert env.annotations(first)[protocol.ANN_TAINT] == ours["key"]
        wait_for(lambda: env.node_states()[first][1], what="the first node cordoned", interval=0.1)
        assert time.time() - tainted >= 4  # the 6 s, less the watch's and the poll's lag
        wait_for(lambda: env.condition("tainting", "Ready").get("status") == "True", what="Ready", timeout=90)
        assert taints(env, first) == [], op.log()[-2000:]  # ours went with the uncordon
        assert taints(env, second) == [theirs]  # someone else's with our key: kept as it was
        assert protocol.ANN_TAINT not in env.annotations(second)
        assert "Tainted" in node_events(env, first) and "Tainted" in node_events(env, second)


def test_a_node_its_agent_would_refuse_is_never_cordoned(env: Env) -> None:
    """The agent's host check (eventedpleg.io/host-check, as the agent writes it) says this host would be
    refused: preflight says so, and the rollout marks it Skipped with the agent's reason without a cordon."""
    refused, fine = env.nodes([{}, {}])
    why = "Unsupported: /etc/crio/crio.conf.d/99-site.conf sets enable_pod_events = false after ours"
    check = hostcheck.HostCheck(datetime.now(UTC), {"DropInOnly": why, "EditConfigFile": why})
    fine_check = hostcheck.HostCheck(datetime.now(UTC), {"DropInOnly": "", "EditConfigFile": ""})
    for node, value in ((refused, check), (fine, fine_check)):
        env.core.patch_node(node, {"metadata": {"annotations": {protocol.ANN_HOST_CHECK: value.to_json()}}})
    env.apply(nodeconfig("host", env.prefix, rollout={"paused": True, "canary": {"nodes": 0}}))
    looked = eventedpleg(env, "preflight", "--nodeconfig", "host", "-o", "wide")
    print(looked.stdout)  # what a user sees (pytest -s or -rA)
    assert looked.returncode == 3, looked.stderr
    row = next(line for line in looked.stdout.splitlines() if line.startswith(refused))
    assert "refuses" in row and why in row
    assert " ok " in next(line for line in looked.stdout.splitlines() if line.startswith(fine))
    states = unpause_until_ready(env, "host", watch=refused)
    assert states == {refused: ("Skipped", False), fine: ("Done", False)}
    assert env.annotations(refused)[protocol.ANN_REASON].startswith(
        f"not cordoned: {why} (the agent's host check at "
    )
    events = node_events(env, refused)
    assert "Unsupported" in events and "Draining" not in events


def test_the_drain_evicts_only_the_selected_pods_and_never_an_opted_out_one(env: Env) -> None:
    """drain.podSelector and the eventedpleg.io/drain: skip annotation, with real evictions: the selected
    pod is evicted (its Deployment replaces it), the others keep running on the node, which is Done."""
    (node,) = env.nodes([{}])

    def pinned(name: str, tier: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
        (deployment,) = [
            d
            for d in guarded_deployment(
                env.prefix, name, replicas=1, node_selector={"kubernetes.io/hostname": node}
            )
            if d["kind"] == "Deployment"
        ]
        template = deployment["spec"]["template"]
        template["metadata"]["labels"]["tier"] = tier
        template["metadata"]["annotations"] = annotations or {}
        return deployment

    docs = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": env.prefix}},
        pinned("web", "web"),
        pinned("db", "db"),
        pinned("cache", "web", {"eventedpleg.io/drain": "skip"}),
    ]
    env.cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs), check=True)

    def running() -> dict[str, str]:
        items = plain(env.core.list_namespaced_pod(env.prefix))["items"]
        return {
            p["metadata"]["labels"]["app"]: p["metadata"]["uid"]
            for p in items
            if p["status"].get("phase") == "Running" and "deletionTimestamp" not in p["metadata"]
        }

    before = wait_for(lambda: len(r := running()) == 3 and r, what="three pods running")
    drain = {"podSelector": {"matchLabels": {"tier": "web"}}}
    env.apply(
        nodeconfig(
            "chosen", env.prefix, drain=drain, nodeSelector={"matchLabels": {"kubernetes.io/hostname": node}}
        )
    )
    with operator_running(env.cluster, NS, env.tmp) as op, ProtocolAgents(env.api, env.prefix):
        wait_for(lambda: env.condition("chosen", "Ready").get("status") == "True", what="Ready", timeout=90)
        assert env.node_states()[node] == ("Done", False), op.log()[-2000:]
    after = running()
    assert after.get("web") != before["web"]  # evicted (its replacement comes back once uncordoned)
    assert (after["db"], after["cache"]) == (before["db"], before["cache"])  # the very same pods, kept


def test_failed_node_is_rolled_back_and_the_rollout_halts(env: Env) -> None:
    names = env.nodes([{} for _ in range(4)])
    bad = names[0]  # zone z0, first in order
    env.apply(nodeconfig("halt", env.prefix))

    def behaviour(name: str) -> str:
        return "RolledBack" if name == bad else "Done"

    with (
        operator_running(env.cluster, NS, env.tmp) as op,
        ProtocolAgents(env.api, env.prefix, behaviour=behaviour),
    ):
        degraded = wait_for(
            lambda: (
                env.condition("halt", "Degraded").get("status") == "True"
                and env.condition("halt", "Degraded")
            ),
            what="Degraded",
        )
        assert degraded["reason"] == "RolloutHalted"
        assert bad in degraded["message"] and "previous files restored" in degraded["message"]
        planned_again(env.api, op.port, names[1])
        states = env.node_states()
        assert states[bad] == ("RolledBack", False)  # healthy again and given back
        assert [n for n, (s, _) in states.items() if s == "Done"] == []  # nothing else started
        events = env.cluster.kubectl(
            "get", "events", "-n", "default", "--field-selector", "involvedObject.name=halt", check=True
        ).stdout
        assert "RolloutHalted" in events


def test_pause_resume_and_flip_to_false(env: Env) -> None:
    names = env.nodes([{} for _ in range(3)])
    env.apply(nodeconfig("flip", env.prefix, rollout={"paused": True, "canary": {"nodes": 0}}))
    with operator_running(env.cluster, NS, env.tmp) as op, ProtocolAgents(env.api, env.prefix):
        wait_for(lambda: env.condition("flip", "Paused").get("status") == "True", what="Paused")
        planned_again(env.api, op.port, names[0])
        assert all(s is None for s, _ in env.node_states().values())
        env.apply(nodeconfig("flip", env.prefix, rollout={"paused": False, "canary": {"nodes": 0}}))
        wait_for(lambda: env.condition("flip", "Available").get("status") == "True", what="Available")
        on_hash = env.nc("flip")["status"]["renderedHash"]
        env.apply(nodeconfig("flip", env.prefix, eventedPleg=False))
        wait_for(
            lambda: (
                env.nc("flip")["status"]["renderedHash"] != on_hash
                and env.condition("flip", "Available").get("status") == "True"
            ),
            what="Available after the flip",
        )
        off_hash = env.nc("flip")["status"]["renderedHash"]
        for name in names:
            ann = env.annotations(name)
            assert ann[protocol.ANN_CURRENT] == off_hash
        cm = plain(env.core.read_namespaced_config_map(c.CONFIGMAP_PREFIX + off_hash, NS))
        assert json.loads(cm["data"][c.CM_KEY_MANIFEST])["files"] == []  # turning off = our files removed


def test_delete_with_revert_waits_for_the_nodes(env: Env) -> None:
    """...and says so at INFO, once per change of what it waits for: no ERROR line every 2 s."""
    names = env.nodes([{} for _ in range(2)])
    env.apply(nodeconfig("revert", env.prefix, rollout={"maxUnavailable": 2, "canary": {"nodes": 0}}))
    with operator_running(env.cluster, NS, env.tmp) as op, ProtocolAgents(env.api, env.prefix):
        wait_for(lambda: env.condition("revert", "Available").get("status") == "True", what="Available")
        assert c.FINALIZER in env.nc("revert")["metadata"]["finalizers"]
        env.cluster.kubectl("delete", "nodeconfig", "revert", "--wait=false", check=True)

        def gone() -> bool:
            return env.cluster.kubectl("get", "nodeconfig", "revert").returncode != 0

        wait_for(gone, what="NodeConfig finalized", timeout=120)
        for name in names:
            ours = [
                k
                for k in env.annotations(name)
                if k.startswith(protocol.GROUP) and k != protocol.ANN_HOST_CHECK
            ]
            assert not ours  # the agent's host check stays: it is about the host
            assert env.node_states()[name] == (None, False)
        assert env.state_labels() == dict.fromkeys(names)  # the label went with the annotation
        lines = op.log().splitlines()
        waits = [line for line in lines if "NodeConfig revert is being deleted; waiting:" in line]
        assert waits and all(" INFO " in line for line in waits), lines[-40:]
        said = [w.split("waiting:", 1)[1] for w in waits]
        assert all(a != b for a, b in itertools.pairwise(said)), said  # once per change
        assert not [line for line in lines if " ERROR " in line], lines[-40:]
        assert any("NodeConfig revert: every node let go" in line for line in lines)


def test_overlapping_nodeconfigs_the_later_one_reports_a_conflict(env: Env) -> None:
    names = env.nodes([{}, {}])
    env.apply(nodeconfig("first", env.prefix))
    time.sleep(1.1)  # creationTimestamp has one-second resolution
    env.apply(nodeconfig("second", env.prefix))
    with operator_running(env.cluster, NS, env.tmp), ProtocolAgents(env.api, env.prefix):
        wait_for(lambda: env.condition("first", "Available").get("status") == "True", what="first Available")
        degraded = wait_for(
            lambda: (
                env.condition("second", "Degraded").get("reason") == "Conflict"
                and env.condition("second", "Degraded")
            ),
            what="conflict",
        )
        message = degraded["message"]
        assert message.count("'first'") == 1
        assert all(message.count(name) == 1 for name in names), message  # each node named once
        owners = {env.annotations(n).get(protocol.ANN_OWNER) for n in env.node_states()}
        assert owners == {"first"}
        stalled = wait_for(
            lambda: env.condition("second", "Stalled").get("status") == "True", what="second Stalled"
        )
        assert stalled
        second = {cond["type"]: cond["status"] for cond in env.nc("second")["status"]["conditions"]}
        assert second["Available"] == "False" and second["Ready"] == "False"  # never Available while Degraded


def test_a_failed_canary_halts_the_rollout_whatever_max_failed_nodes_says(env: Env) -> None:
    names = env.nodes([{} for _ in range(4)])
    canary = names[0]  # zone z0, first in order
    env.apply(
        nodeconfig(
            "canary", env.prefix, rollout={"maxFailedNodes": 3, "canary": {"nodes": 1, "soakSeconds": 1}}
        )
    )

    def behaviour(name: str) -> str:
        return "RolledBack" if name == canary else "Done"

    with operator_running(env.cluster, NS, env.tmp), ProtocolAgents(env.api, env.prefix, behaviour=behaviour):
        degraded = wait_for(
            lambda: (
                env.condition("canary", "Degraded").get("status") == "True"
                and env.condition("canary", "Degraded")
            ),
            what="Degraded",
        )
        assert degraded["reason"] == "CanaryFailed" and canary in degraded["message"]
        time.sleep(3)
        states = env.node_states()
        assert [n for n, (s, _) in states.items() if s is not None] == [canary]  # nothing else started
        assert env.condition("canary", "Stalled").get("status") == "True"


def test_kubectl_wait_for_ready_status_returns_when_the_rollout_completes_and_not_before(env: Env) -> None:
    names = env.nodes([{} for _ in range(3)])
    env.apply(nodeconfig("ready", env.prefix, rollout={"maxUnavailable": 1, "canary": {"nodes": 0}}))
    with operator_running(env.cluster, NS, env.tmp) as op:
        # The operator has written a first status (Reconciling) before any agent answers.
        wait_for(lambda: env.condition("ready", "Reconciling").get("status") == "True", what="Reconciling")
        argv = [kubectl_path(), f"--kubeconfig={env.cluster.kubeconfig}", "wait"]
        waiting = subprocess.Popen(
            [*argv, "--for=condition=Ready", "nodeconfig/ready", "--timeout=150s"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            time.sleep(3)
            assert waiting.poll() is None  # no agent yet: nothing can be Done, so not Ready
            samples = []
            with ProtocolAgents(env.api, env.prefix, delay=1.0):
                while waiting.poll() is None:
                    samples.append(sum(state == "Done" for state, _ in env.node_states().values()))
                    time.sleep(0.3)
                states = env.node_states()
            out, err = waiting.communicate(timeout=10)
        finally:
            waiting.kill()
        assert waiting.returncode == 0, (err, op.log()[-3000:])
        assert "condition met" in out
        assert all(states[name] == ("Done", False) for name in names), states
        assert min(samples) < len(names)  # kubectl was still waiting while nodes were rolling
        conditions = {cond["type"]: cond for cond in env.nc("ready")["status"]["conditions"]}
        generation = env.nc("ready")["metadata"]["generation"]
        assert conditions["Ready"]["observedGeneration"] == generation
        assert (conditions["Available"]["status"], conditions["Progressing"]["status"]) == ("True", "False")
        assert (conditions["Reconciling"]["status"], conditions["Stalled"]["status"]) == ("False", "False")


def test_operator_killed_in_each_phase_resumes_without_double_work(env: Env) -> None:
    """Kill the operator while a node drains (a PDB holds it) and another waits for its agent; the agent
    finishes while no operator runs (Done, still cordoned); kill again while the next node is with its
    agent. Each restart picks up where the nodes say: uncordons, keeps draining, never redoes a node."""
    names = env.nodes([{} for _ in range(4)])
    blocked = names[0]  # zone z0, first in order
    protect_with_pdb(env, blocked)
    env.apply(nodeconfig("crash", env.prefix, rollout={"maxUnavailable": 2, "canary": {"nodes": 0}}))
    kubeconfig = install_operator_rbac(env.cluster, NS)
    seen: list[dict[str, tuple[str | None, bool]]] = []
    with ProtocolAgents(env.api, env.prefix, delay=3.0) as agents:
        first = OperatorProcess(kubeconfig, NS, env.tmp / "op1.log").start()
        wait_for(
            lambda: (
                env.node_states()[blocked] == ("Draining", True)
                and ("Applying", True) in env.node_states().values()
            ),
            what="one node draining, one with its agent",
        )
        first.kill()
        seen.append(env.node_states())
        wait_for(
            lambda: ("Done", True) in env.node_states().values(), what="agent done while no operator runs"
        )
        seen.append(env.node_states())
        second = OperatorProcess(kubeconfig, NS, env.tmp / "op2.log").start()
        wait_for(lambda: ("Done", False) in env.node_states().values(), what="the done node uncordoned")
        wait_for(lambda: list(env.node_states().values()).count(("Applying", True)) == 1, what="next node")
        second.kill()
        seen.append(env.node_states())
        assert env.node_states()[blocked] == ("Draining", True)  # still held by the PDB, never forced
        client.PolicyV1Api(env.api).delete_namespaced_pod_disruption_budget("web-pdb", env.prefix)
        third = OperatorProcess(kubeconfig, NS, env.tmp / "op3.log").start()
        try:
            waited = env.cluster.kubectl(
                "wait", "--for=condition=Available", "nodeconfig/crash", "--timeout=100s"
            )
            assert waited.returncode == 0, third.log()[-3000:]
        finally:
            third.stop()
    phases = {state for snapshot in seen for state in snapshot.values()}
    assert {("Draining", True), ("Applying", True), ("Done", True)} <= phases, seen
    for name in names:
        assert env.node_states()[name] == ("Done", False)
        assert agents.applied[name] == 1  # no Done node was drained and applied again


def test_two_replicas_exactly_one_active_and_failover(env: Env) -> None:
    names = env.nodes([{} for _ in range(3)])
    kubeconfig = install_operator_rbac(env.cluster, NS)
    ops = [
        OperatorProcess(
            kubeconfig, NS, env.tmp / f"ha{i}.log", identity=f"replica-{i}", leader_elect=True
        ).start()
        for i in range(2)
    ]

    try:
        # The Lease may still name an operator of an earlier test until it expires: wait for one of ours.
        ours = {op.identity for op in ops}
        leader = wait_for(
            lambda: (holder := _try(lambda: _lease_holder(env))) in ours and holder, what="a leader"
        )
        standby = next(op for op in ops if op.identity != leader)
        active = next(op for op in ops if op.identity == leader)
        # Both are Ready once their node caches are synced (a warm standby); only one leads.
        wait_for(lambda: _http(standby.port, "/readyz") == 200, what="standby's cache synced")
        wait_for(lambda: _http(active.port, "/readyz") == 200, what="leader's cache synced")
        assert _leader_gauge(standby.port) == 0.0
        assert _leader_gauge(active.port) == 1.0
        env.apply(nodeconfig("ha", env.prefix, rollout={"canary": {"nodes": 0}}))
        with ProtocolAgents(env.api, env.prefix, delay=1.5):
            wait_for(lambda: any(s for s, _ in env.node_states().values()), what="rollout started")
            active.kill()
            wait_for(
                lambda: _try(lambda: _lease_holder(env)) == standby.identity, what="failover", timeout=60
            )
            waited = env.cluster.kubectl(
                "wait", "--for=condition=Available", "nodeconfig/ha", "--timeout=100s"
            )
            assert waited.returncode == 0, standby.log()[-3000:]
        assert "became leader" in standby.log()
        assert all(env.node_states()[n] == ("Done", False) for n in names)
    finally:
        for op in ops:
            op.stop()


def _leader_gauge(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return float(
        next(line.split()[1] for line in text.splitlines() if line.startswith("eventedpleg_leader "))
    )


def _lease_holder(env: Env) -> str:
    body = plain(client.CoordinationV1Api(env.api).read_namespaced_lease(c.LEASE_NAME, NS))
    return str(body["spec"].get("holderIdentity") or "")


def test_sigterm_stops_the_leader_promptly_and_gives_the_lease_up(env: Env) -> None:
    """What a rolling update or `kubectl delete pod` does: the leader must exit well inside the pod's grace
    period and release the Lease, so the standby takes over at once. (It used to hang until SIGKILL:
    kopf's threading stop-flag kept the event loop's executor busy.)"""
    kubeconfig = install_operator_rbac(env.cluster, NS)
    op = OperatorProcess(kubeconfig, NS, env.tmp / "sigterm.log", identity="sigterm-0", leader_elect=True)
    op.start()
    try:
        wait_for(lambda: _try(lambda: _lease_holder(env)) == "sigterm-0", what="leadership", timeout=60)
        wait_for(lambda: _http(op.port, "/readyz") == 200, what="ready")
        assert op.proc is not None
        op.proc.terminate()
        assert op.proc.wait(15) == 0, op.log()[-3000:]
        assert _lease_holder(env) == "", "the Lease was not released"
    finally:
        op.stop()


def _try(fn: Any) -> Any:
    try:
        return fn()
    except client.ApiException:
        return None


def _http(port: int, path: str) -> int:
    return http_status(port, path)


def test_operator_killed_again_and_again_converges(env: Env) -> None:
    """SIGKILL the operator 1-3 s after each start through a whole rollout: whatever phase each kill hits
    (cordoned, draining, waiting for the agent, done-but-cordoned), the end state is the same."""
    import random  # noqa: PLC0415

    names = env.nodes([{} for _ in range(6)])
    env.apply(nodeconfig("chaos", env.prefix, rollout={"maxUnavailable": 2, "canary": {"nodes": 0}}))
    kubeconfig = install_operator_rbac(env.cluster, NS)
    rng = random.Random(7)
    hit: set[str] = set()
    with ProtocolAgents(env.api, env.prefix, delay=1.0) as agents:
        for round_ in range(40):
            op = OperatorProcess(kubeconfig, NS, env.tmp / f"chaos{round_}.log").start()
            wait_for(lambda: _http(op.port, "/readyz") == 200, what="operator up")  # noqa: B023
            time.sleep(rng.uniform(1.0, 3.0))  # kopf needs ~1 s to start watching
            for state, cordoned in env.node_states().values():
                if state:
                    hit.add(f"{state}{'+cordoned' if cordoned else ''}")
            op.kill()
            if env.condition("chaos", "Available").get("status") == "True":
                break
        final = OperatorProcess(kubeconfig, NS, env.tmp / "final.log").start()
        try:
            waited = env.cluster.kubectl(
                "wait", "--for=condition=Available", "nodeconfig/chaos", "--timeout=100s"
            )
            assert waited.returncode == 0, final.log()[-3000:]
        finally:
            final.stop()
    assert "Applying+cordoned" in hit, hit
    for name in names:
        assert env.node_states()[name] == ("Done", False), name
        assert agents.applied[name] == 1, name  # applied once: no Done node was drained again


def test_nodeconfigs_created_and_deleted_during_a_rollout(env: Env) -> None:
    """50 other NodeConfigs come and go while a rollout runs. Every pass plans over a frozen set of peers,
    so none fails ("dictionary changed size during iteration" was the symptom), and no node is drained or
    applied twice."""
    import threading  # noqa: PLC0415

    names = env.nodes([{} for _ in range(8)])
    env.apply(nodeconfig("stress", env.prefix, rollout={"maxUnavailable": 2, "canary": {"nodes": 0}}))
    peers = [f"{env.prefix}-peer-{i:02d}" for i in range(50)]
    env.names.extend(peers)  # cleanup drops their finalizers if a test step fails
    churned: list[str] = []

    def churn() -> None:
        """Create every peer (each selects no node), then delete them all: passes that iterate the peers
        run all the while, in worker threads, on the NodeConfigs of the moment."""
        for peer in peers:
            body = nodeconfig(peer, f"{env.prefix}-none")
            env.custom.create_cluster_custom_object(protocol.GROUP, c.VERSION, c.PLURAL, body)
            time.sleep(0.02)
        for peer in peers:
            env.custom.delete_cluster_custom_object(protocol.GROUP, c.VERSION, c.PLURAL, peer)
            churned.append(peer)
            time.sleep(0.02)

    with (
        operator_running(env.cluster, NS, env.tmp) as op,
        ProtocolAgents(env.api, env.prefix, delay=2.0) as agents,
    ):
        wait_for(lambda: ("Applying", True) in env.node_states().values(), what="rollout under way")
        churner = threading.Thread(target=churn, name="churn")
        churner.start()
        churner.join(120)
        assert len(churned) == len(peers), churned
        waited = env.cluster.kubectl(
            "wait", "--for=condition=Available", "nodeconfig/stress", "--timeout=120s"
        )
        assert waited.returncode == 0, (waited.stderr, op.log()[-3000:])

        def peers_gone() -> bool:
            listed = plain(env.custom.list_cluster_custom_object(protocol.GROUP, c.VERSION, c.PLURAL))
            return not {item["metadata"]["name"] for item in listed["items"]} & set(peers)

        wait_for(peers_gone, what="every peer finalized by the operator", timeout=120)
        log = op.log()
    assert "changed size" not in log, log[-5000:]
    assert "Traceback" not in log, log[-5000:]
    for name in names:
        assert env.node_states()[name] == ("Done", False), name
        assert agents.applied[name] == 1, name  # the agent was asked once
        # Taken once: an empty node is cordoned and asked to apply in one write (no "Drained" Event), and
        # every take ends with one give-back.
        given_back = plain(
            env.core.list_namespaced_event(
                "default", field_selector=f"involvedObject.name={name},reason=Uncordoned"
            )
        )["items"]
        assert sum(event.get("count") or 1 for event in given_back) == 1, (name, given_back)


def operator_node_policy(env: Env) -> list[dict[str, Any]]:
    """The chart's operator policies and their bindings (node fields, the NodeConfig's taint key, NodeConfig
    spec), each renamed for this test, so the operator's real writes below are admitted (or denied) by
    them."""
    helm = build.ensure(("helm",))["helm"]
    rendered = subprocess.run(
        [str(helm), "template", "epo", str(chart_dir()), "-n", NS,
         "--show-only", "templates/operator-vap.yaml"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    docs = [d for d in yaml.safe_load_all(rendered) if d]

    def renamed(name: str) -> str:
        (suffix,) = [s for s in ("node-fields", "node-taint-key", "nodeconfig-spec") if name.endswith(s)]
        return f"{env.prefix}-{suffix}"

    for doc in docs:
        doc["metadata"]["name"] = renamed(doc["metadata"]["name"])
        if doc["kind"] == "ValidatingAdmissionPolicyBinding":
            doc["spec"]["policyName"] = renamed(doc["spec"]["policyName"])
    return docs


def readme_node_state_table(env: Env) -> dict[str, list[str]]:
    """Run the per-node state command exactly as the README documents it: node -> [state, since, reason]."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    (line,) = [ln for ln in readme.splitlines() if ln.startswith("kubectl get nodes -o custom-columns=")]
    argv = shlex.split(line.split("  #")[0])
    assert argv[0] == "kubectl"
    out = env.cluster.kubectl(*argv[1:], check=True).stdout.splitlines()
    assert out[0].split() == ["NAME", "STATE", "SINCE", "REASON"], out[0]
    return {row.split()[0]: row.split(None, 3)[1:] for row in out[1:]}


def test_autoscalers_leave_our_nodes_alone_and_the_users_values_stay(env: Env) -> None:
    """Mid-rollout a node we hold carries karpenter.sh/do-not-disrupt and cluster-autoscaler's
    scale-down-disabled (written with our cordon, admitted by the chart's policy); after the rollout ours
    are gone and the value the user had set before is still there."""
    karpenter, scale_down = protocol.AUTOSCALER_ANNOTATIONS
    policy = operator_node_policy(env)
    env.cluster.kubectl("apply", "-f", "-", stdin=json.dumps({"kind": "List", "apiVersion": "v1",
                        "items": policy}), check=True)  # fmt: skip
    try:
        held, free = env.nodes([{}, {}])
        as_operator = install_operator_rbac(env.cluster, NS)

        def policy_in_force() -> bool:
            denied = env.cluster.kubectl("annotate", "node", free, "example.com/x=1", kubeconfig=as_operator)
            return denied.returncode != 0 and "may change only eventedpleg.io/*" in denied.stderr

        wait_for(policy_in_force, what="the operator's node policy in force")
        patch = {"metadata": {"annotations": {scale_down: "true"}}}  # the user's, before the rollout
        env.core.patch_node(held, patch)
        pods = protect_with_pdb(env, held)
        env.apply(nodeconfig("scalers", env.prefix, rollout={"maxUnavailable": 2, "canary": {"nodes": 0}}))
        with operator_running(env.cluster, NS, env.tmp) as op, ProtocolAgents(env.api, env.prefix):
            wait_for(lambda: env.node_states()[held] == ("Draining", True), what="held node draining")
            mid = env.annotations(held)
            assert mid[karpenter] == "true" and mid[scale_down] == "true", mid
            assert mid[protocol.ANN_AUTOSCALER_HOLD] == karpenter  # ours to remove: only what we added
            assert readme_node_state_table(env)[held][0] == "Draining"
            wait_for(lambda: env.node_states()[free] == ("Done", False), what="free node done")
            assert karpenter not in env.annotations(free) and scale_down not in env.annotations(free)
            assert len(pods()) == 1
            client.PolicyV1Api(env.api).delete_namespaced_pod_disruption_budget("web-pdb", env.prefix)
            wait_for(
                lambda: env.condition("scalers", "Ready").get("status") == "True", what="Ready", timeout=90
            )
            after = env.annotations(held)
            assert env.node_states()[held] == ("Done", False), op.log()[-2000:]
            table = readme_node_state_table(env)
            assert table[held][0] == "Done" and table[free][0] == "Done", table
            assert karpenter not in after and protocol.ANN_AUTOSCALER_HOLD not in after, after
            assert after[scale_down] == "true"  # the user's value, untouched
            assert "Forbidden" not in op.log() and "denied" not in op.log()
    finally:
        for doc in reversed(policy):
            env.cluster.kubectl("delete", doc["kind"], doc["metadata"]["name"], "--ignore-not-found")


def test_a_budget_held_by_an_administrators_cordon_is_named_then_stalled(env: Env) -> None:
    """An administrator's cordon under maxUnavailable 1: the node is not taken (another maintenance may
    own it) and holds the budget. Status names it, the NodeConfig reports Stalled with what to do (after
    stallAfterSeconds, 0 here), and an uncordon lets the rollout take it and finish."""
    cordoned, *rest = env.nodes([{}, {}, {}])
    env.core.patch_node(cordoned, {"spec": {"unschedulable": True}})
    env.apply(nodeconfig("held", env.prefix, rollout={"canary": {"nodes": 0}, "stallAfterSeconds": 0}))
    with operator_running(env.cluster, NS, env.tmp) as op, ProtocolAgents(env.api, env.prefix):
        stalled = wait_for(
            lambda: (cond := env.condition("held", "Stalled")).get("status") == "True" and cond,
            what="Stalled",
        )
        assert stalled["reason"] == "BudgetHeldByOtherNodes", op.log()[-2000:]
        assert f"kubectl uncordon {cordoned}" in stalled["message"]
        assert "raise spec.rollout.maxUnavailable" in stalled["message"]
        status = env.nc("held")["status"]
        assert status["budgetHeldBy"] == [f"{cordoned} (cordoned)"] and status["budgetHeldSince"]
        assert env.condition("held", "Ready")["status"] == "False"
        assert env.node_states()[cordoned] == (None, True)  # not taken: someone else's cordon
        listed = {n["name"]: n for n in status["nodeStatuses"]}
        assert listed[cordoned]["reason"].startswith("waiting, not taken: cordoned by someone else")
        assert [env.node_states()[n][0] for n in rest] == [None, None]  # it still counts
        events = env.cluster.kubectl(
            "get", "events", "-n", "default", "--field-selector", "involvedObject.name=held", check=True
        ).stdout
        assert "BudgetHeldByOtherNodes" in events
        env.cluster.kubectl("uncordon", cordoned, check=True)
        wait_for(lambda: env.condition("held", "Ready").get("status") == "True", what="Ready", timeout=90)
        assert "budgetHeldBy" not in env.nc("held")["status"] or not env.nc("held")["status"]["budgetHeldBy"]
        assert env.node_states()[cordoned] == ("Done", False)


def eventedpleg(env: Env, *args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI as a user runs it, with the admin kubeconfig."""
    return subprocess.run(
        [sys.executable, "-m", "eventedpleg", *args],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "KUBECONFIG": str(env.cluster.kubeconfig)},
    )  # fmt: skip


def test_a_failed_node_is_retried_with_the_cli_once_the_cause_is_fixed(env: Env) -> None:
    """A node rolls back and halts the rollout; after the cause is fixed `eventedpleg retry` takes it
    again without anyone editing node annotations, and the rollout completes."""
    names = env.nodes([{} for _ in range(3)])
    bad = names[0]
    broken = {bad}

    def behaviour(name: str) -> str:
        return "RolledBack" if name in broken else "Done"

    env.apply(nodeconfig("again", env.prefix))
    with (
        operator_running(env.cluster, NS, env.tmp) as op,
        ProtocolAgents(env.api, env.prefix, behaviour=behaviour),
    ):
        wait_for(lambda: env.condition("again", "Degraded").get("status") == "True", what="Degraded")
        assert env.node_states()[bad] == ("RolledBack", False)
        refused = eventedpleg(env, "retry", "again", "--node", names[1])  # not failed: exit 2, one line
        assert refused.returncode == 2 and "is not in a failure of NodeConfig 'again'" in refused.stderr
        missing = eventedpleg(env, "retry", "again", "--node", "no-such-node")
        assert missing.returncode == 6 and "not found" in missing.stderr
        first = env.annotations(bad)[protocol.ANN_STATE_SINCE]
        assert eventedpleg(env, "retry", "again").returncode == 0  # not fixed yet: it fails again
        wait_for(
            lambda: (
                env.annotations(bad).get(protocol.ANN_STATE_SINCE) != first
                and env.node_states()[bad] == ("RolledBack", False)
            ),
            what="retried and rolled back again",
        )

        def rolled_back_events() -> int:
            listed = env.cluster.kubectl(
                "get", "events", "-n", "default", "-o", "json",
                "--field-selector", "involvedObject.name=again,reason=NodeRolledBack", check=True,
            ).stdout  # fmt: skip
            return len(json.loads(listed)["items"])

        wait_for(lambda: rolled_back_events() == 2, what="a second NodeRolledBack Event for the new failure")
        broken.clear()  # the cause is fixed
        asked = eventedpleg(env, "retry", "again")
        assert asked.returncode == 0, asked.stderr
        assert f"retry requested for 1 node(s): {bad}" in asked.stdout
        assert bad in json.loads(env.nc("again")["metadata"]["annotations"][protocol.ANN_RETRY])
        wait_for(lambda: env.condition("again", "Ready").get("status") == "True", what="Ready", timeout=120)
        assert all(state == ("Done", False) for state in env.node_states().values()), op.log()[-2000:]
        assert env.condition("again", "Degraded")["status"] == "False"
        nothing = eventedpleg(env, "retry", "again")
        assert nothing.returncode == 0 and "nothing to retry" in nothing.stdout


def test_a_drain_timed_out_on_a_pdb_is_retried_automatically_after_its_back_off(env: Env) -> None:
    """onTimeout: Fail with retries: the node is given back Failed saying when it is retried (status and a
    DrainTimeout Event), not counted as failed meanwhile; once the PDB is gone it is taken again."""
    (node,) = env.nodes([{}])
    protect_with_pdb(env, node)
    drain = {"timeoutSeconds": 3, "retries": 1, "retryBackoffSeconds": 10}
    env.apply(nodeconfig("backoff", env.prefix, drain=drain))
    with operator_running(env.cluster, NS, env.tmp) as op, ProtocolAgents(env.api, env.prefix):
        wait_for(lambda: env.node_states()[node] == ("Failed", False), what="given back Failed")
        ann = env.annotations(node)
        assert (
            ann[protocol.ANN_DRAIN_TIMEOUTS] == "1"
            and "automatic retry 1 of 1 in 10s" in ann[protocol.ANN_REASON]
        )
        assert env.condition("backoff", "Degraded")["status"] == "False"  # not a failure yet
        wait_for(
            lambda: "automatic retry pending" in env.condition("backoff", "Progressing")["message"],
            what="Progressing says the retry is pending",
            timeout=10,  # well within the 10 s back-off
        )
        events = env.cluster.kubectl(
            "get", "events", "-n", "default", "--field-selector", f"involvedObject.name={node}", check=True
        ).stdout
        assert "DrainTimeout" in events and "automatic retry 1 of 1" in events
        client.PolicyV1Api(env.api).delete_namespaced_pod_disruption_budget("web-pdb", env.prefix)
        wait_for(lambda: env.condition("backoff", "Ready").get("status") == "True", what="Ready", timeout=90)
        assert env.node_states()[node] == ("Done", False), op.log()[-2000:]
        assert protocol.ANN_DRAIN_TIMEOUTS not in env.annotations(node)
