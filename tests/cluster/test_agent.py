"""The node agent on the real control plane: its RBAC and admission policy, and full applies on kwok nodes.

Each agent authenticates with a ServiceAccount token bound to a Pod scheduled on its node (TokenRequest;
the token carries authentication.kubernetes.io/node-name, KEP-4193), exactly as in the DaemonSet. The
chart's agent-rbac.yaml and agent-vap.yaml are rendered by the real helm and applied unchanged.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg.agent import runner
from eventedpleg.agent.agent import Agent, AgentSettings
from eventedpleg.core import guardincidents as gi
from eventedpleg.core import render
from eventedpleg.core.agentoptions import AgentOptions
from eventedpleg.k8s import configmaps, nodes
from eventedpleg.k8s.agentapi import KubeAgentApi
from eventedpleg.k8s.client import api_client, send_json
from eventedpleg.k8s.errors import ApiError
from eventedpleg.protocol import NodeState
from eventedpleg_lab.kube.fakenodes import KWOK_TOLERATION, FakeNode
from eventedpleg_lab.localcluster.cluster import LocalCluster
from eventedpleg_lab.sim import profiles
from eventedpleg_lab.sim.clock import FakeClock
from eventedpleg_lab.sim.host import SimHost
from tests.chart.chartlib import CHART, helm

pytestmark = pytest.mark.cluster

OPERATOR_NS = "evented-pleg-system"
AGENT_NS = "evented-pleg-agent"  # values.yaml agent.namespace
AGENT_SA = "evented-pleg-agent"  # epo.agentName


def _render(template: str) -> str:
    args = ("template", "epo", str(CHART), "-n", OPERATOR_NS, "--show-only", f"templates/{template}")
    return helm(*args, check=True).stdout


def _kubectl_ok(
    cluster: LocalCluster, *args: str, kubeconfig: Path | None = None, stdin: str | None = None
) -> str:
    result = cluster.kubectl(*args, kubeconfig=kubeconfig, stdin=stdin)
    assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result.stdout


def _denied(
    cluster: LocalCluster, kubeconfig: Path, *args: str, because: str, stdin: str | None = None
) -> None:
    result = cluster.kubectl(*args, kubeconfig=kubeconfig, stdin=stdin)
    assert result.returncode != 0, f"kubectl {' '.join(args)} was allowed"
    assert because in result.stderr, result.stderr


@dataclass
class AgentEnv:
    cluster: LocalCluster
    node_a: str
    node_b: str
    kubeconfig: Path  # the agent SA, token bound to a pod on node A
    unbound: Path  # the agent SA, token not bound to any pod
    admin: client.ApiClient

    def node(self, name: str) -> dict[str, Any]:
        node: dict[str, Any] = json.loads(_kubectl_ok(self.cluster, "get", "node", name, "-o", "json"))
        return node

    def annotations(self, name: str) -> dict[str, str]:
        return dict(self.node(name)["metadata"].get("annotations") or {})

    def state_label(self, name: str) -> str | None:
        labels: dict[str, str] = self.node(name)["metadata"].get("labels") or {}
        return labels.get(protocol.LABEL_STATE)

    def annotate(self, name: str, changes: dict[str, str | None]) -> None:
        client.CoreV1Api(self.admin).patch_node(name, {"metadata": {"annotations": changes}})

    def events_about(self, name: str) -> list[dict[str, Any]]:
        selector = f"involvedObject.name={name}"
        out = _kubectl_ok(
            self.cluster, "get", "events", "-n", "default", "--field-selector", selector, "-o", "json"
        )
        items: list[dict[str, Any]] = json.loads(out)["items"]
        return items


def _bound_pod(cluster: LocalCluster, node: str) -> str:
    pod = f"agent-{node}"
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod, "namespace": AGENT_NS},
        "spec": {
            "serviceAccountName": AGENT_SA,
            "nodeName": node,
            "tolerations": [KWOK_TOLERATION],
            "containers": [{"name": "agent", "image": "registry.invalid/evented-pleg-operator:test"}],
        },
    }
    _kubectl_ok(cluster, "apply", "-f", "-", stdin=yaml.safe_dump(manifest))
    return pod


@pytest.fixture(scope="module")
def agent_env(cluster: LocalCluster) -> Iterator[AgentEnv]:
    for ns in (OPERATOR_NS, AGENT_NS):
        cluster.kubectl("create", "namespace", ns)  # may exist already (other modules)
    for template in ("agent-rbac.yaml", "agent-vap.yaml"):
        _kubectl_ok(cluster, "apply", "-f", "-", stdin=_render(template))
    suffix = uuid.uuid4().hex[:5]
    profile = profiles.kubeadm_containerd()
    names = cluster.add_nodes(
        [
            FakeNode(
                f"agent-{suffix}-{x}",
                kubelet_version=profile.kubelet_version,
                container_runtime_version=profile.runtime,
            )
            for x in "ab"
        ]
    )
    pod = _bound_pod(cluster, names[0])
    kubeconfig = cluster.service_account_kubeconfig(AGENT_NS, AGENT_SA, bound_pod=pod, create=False)
    unbound = cluster.service_account_kubeconfig(AGENT_NS, AGENT_SA, create=False)
    with cluster.api() as admin:
        env = AgentEnv(cluster, names[0], names[1], kubeconfig, unbound, admin)
        # The policies take a moment to reach the admission plugin: wait until a foreign patch is denied.
        deadline = time.monotonic() + 30
        patch = json.dumps({"metadata": {"annotations": {protocol.ANN_STATE: "Probe"}}})
        while cluster.kubectl("patch", "node", names[1], "-p", patch, kubeconfig=kubeconfig).returncode == 0:
            assert time.monotonic() < deadline, "the ValidatingAdmissionPolicy never took effect"
            time.sleep(0.5)
        env.annotate(names[1], {protocol.ANN_STATE: None})
        yield env
    cluster.kubectl("delete", "pod", "-n", AGENT_NS, pod, "--wait=false")
    cluster.delete_nodes(names)


# --- security: RBAC + ValidatingAdmissionPolicy ----------------------------------------------------------


def test_token_is_bound_to_node_a(agent_env: AgentEnv) -> None:
    out = _kubectl_ok(agent_env.cluster, "auth", "whoami", "-o", "json", kubeconfig=agent_env.kubeconfig)
    info = json.loads(out)["status"]["userInfo"]
    assert info["username"] == f"system:serviceaccount:{AGENT_NS}:{AGENT_SA}"
    assert info["extra"]["authentication.kubernetes.io/node-name"] == [agent_env.node_a]


def test_agent_of_node_a_cannot_patch_node_b(agent_env: AgentEnv) -> None:
    patch = json.dumps({"metadata": {"annotations": {protocol.ANN_STATE: "Done"}}})
    _denied(
        agent_env.cluster,
        agent_env.kubeconfig,
        "patch", "node", agent_env.node_b, "-p", patch,
        because=f"may only change its own Node, not {agent_env.node_b}",
    )  # fmt: skip
    assert protocol.ANN_STATE not in agent_env.annotations(agent_env.node_b)


@pytest.mark.parametrize(
    ("patch", "because"),
    [
        ({"metadata": {"labels": {"pwned": "true"}}}, "labels may not change, but eventedpleg.io/state"),
        ({"spec": {"unschedulable": True}}, "may not change the Node's spec"),
        ({"spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}}, "may not change the Node's spec"),
        (
            {"metadata": {"annotations": {"example.com/other": "x"}}},
            "may only change eventedpleg.io/* annotations",
        ),
        ({"metadata": {"annotations": {"kwok.x-k8s.io/node": None}}}, "may only change eventedpleg.io/*"),
    ],
)
def test_agent_cannot_change_anything_else_on_its_own_node(
    agent_env: AgentEnv, patch: dict[str, Any], because: str
) -> None:
    before = agent_env.node(agent_env.node_a)
    _denied(
        agent_env.cluster,
        agent_env.kubeconfig,
        "patch", "node", agent_env.node_a, "-p", json.dumps(patch),
        because=because,
    )  # fmt: skip
    after = agent_env.node(agent_env.node_a)
    assert after["spec"] == before["spec"]
    assert after["metadata"]["labels"] == before["metadata"]["labels"]


def test_agent_can_change_its_own_eventedpleg_annotations(agent_env: AgentEnv) -> None:
    patch = json.dumps({"metadata": {"annotations": {protocol.ANN_REASON: "probe from the agent"}}})
    _kubectl_ok(
        agent_env.cluster, "patch", "node", agent_env.node_a, "-p", patch, kubeconfig=agent_env.kubeconfig
    )
    assert agent_env.annotations(agent_env.node_a)[protocol.ANN_REASON] == "probe from the agent"
    remove = json.dumps({"metadata": {"annotations": {protocol.ANN_REASON: None}}})
    _kubectl_ok(
        agent_env.cluster, "patch", "node", agent_env.node_a, "-p", remove, kubeconfig=agent_env.kubeconfig
    )
    assert protocol.ANN_REASON not in agent_env.annotations(agent_env.node_a)


def _status_patch(agent_client: client.ApiClient, node: str, body: dict[str, Any]) -> None:
    """A strategic merge patch of nodes/status, sent as the agent's own call sends it."""
    path = f"/api/v1/nodes/{node}/status"
    send_json(agent_client, "PATCH", path, body, content_type=nodes.STRATEGIC_MERGE_PATCH)


def test_agent_sets_its_own_nodes_guard_condition_and_only_that(agent_env: AgentEnv) -> None:
    """The guard's condition (core.guardincidents) through the product's own call, with the agent's token;
    another condition, another field of status, or another Node's status refused."""
    mine, other = agent_env.node_a, agent_env.node_b
    said = gi.condition(False, gi.HealthReason.WEDGED, "probe from the agent", datetime.now(UTC))
    because = "in the Node's status the agent may change only its EventedPLEGHealthy condition"
    with api_client(str(agent_env.kubeconfig)) as agent_client:
        KubeAgentApi(agent_client, host=mine).set_node_condition(mine, said)
        conditions = {x["type"]: x for x in agent_env.node(mine)["status"].get("conditions", [])}
        assert conditions[gi.CONDITION_TYPE]["status"] == "False"
        assert conditions[gi.CONDITION_TYPE]["message"] == "probe from the agent"
        for body in (
            {"status": {"conditions": [{**said, "type": "Ready"}]}},  # another condition type
            {"status": {"capacity": {"pods": "1"}}},  # another field of status
        ):
            before = agent_env.node(mine)
            with pytest.raises(ApiException) as denied:
                _status_patch(agent_client, mine, body)
            assert denied.value.status == 403
            assert because in str(denied.value.body)
            after = agent_env.node(mine)
            assert after["status"].get("conditions") == before["status"].get("conditions")
            assert after["status"].get("capacity") == before["status"].get("capacity")
        with pytest.raises(ApiError) as refused:
            KubeAgentApi(agent_client, host=mine).set_node_condition(other, said)
        assert f"may only change its own Node, not {other}" in refused.value.message
    assert gi.CONDITION_TYPE not in {x["type"] for x in agent_env.node(other)["status"].get("conditions", [])}


def test_a_token_not_bound_to_a_pod_changes_nothing(agent_env: AgentEnv) -> None:
    patch = json.dumps({"metadata": {"annotations": {protocol.ANN_REASON: "x"}}})
    _denied(
        agent_env.cluster,
        agent_env.unbound,
        "patch", "node", agent_env.node_a, "-p", patch,
        because="must authenticate with a token bound to its pod",
    )  # fmt: skip


def test_rbac_is_exactly_what_the_agent_needs(agent_env: AgentEnv) -> None:
    cluster, kubeconfig = agent_env.cluster, agent_env.kubeconfig

    def can(*args: str) -> str:
        return cluster.kubectl("auth", "can-i", *args, kubeconfig=kubeconfig).stdout.strip()

    assert can("get", "nodes") == "yes"
    assert can("watch", "nodes") == "yes"
    assert can("patch", "nodes") == "yes"
    assert can("get", "nodes", "--subresource=metrics") == "yes"
    assert can("patch", "nodes", "--subresource=status") == "yes"  # the guard's condition (agent-vap.yaml)
    assert can("get", "configmaps", "-n", OPERATOR_NS) == "yes"
    assert can("create", "events", "-n", "default") == "yes"
    for args in (
        ("list", "nodes"),
        ("delete", "nodes"),
        ("update", "nodes", "--subresource=status"),
        ("get", "configmaps", "-n", "kube-system"),
        ("list", "configmaps", "-n", OPERATOR_NS),
        ("get", "secrets", "-n", OPERATOR_NS),
        ("list", "pods", "-A"),
        ("create", "pods/eviction", "-n", "default"),
        ("create", "events", "-n", "kube-system"),
    ):
        assert can(*args) == "no", args


def test_agent_can_only_record_events_about_its_own_node(agent_env: AgentEnv) -> None:
    def event(node: str) -> str:
        return yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"generateName": f"{node}.", "namespace": "default"},
                "involvedObject": {"kind": "Node", "name": node, "apiVersion": "v1"},
                "reason": "Probe",
                "message": "probe",
                "type": "Normal",
            }
        )

    _denied(
        agent_env.cluster,
        agent_env.kubeconfig,
        "create", "-f", "-",
        stdin=event(agent_env.node_b),
        because="may only record Events about its own Node",
    )  # fmt: skip
    _kubectl_ok(
        agent_env.cluster, "create", "-f", "-", kubeconfig=agent_env.kubeconfig, stdin=event(agent_env.node_a)
    )


# --- the agent itself, out of cluster, against a simulated host ------------------------------------------


def _request(env: AgentEnv, rendered: render.RenderedConfig, options: AgentOptions | None = None) -> None:
    """The operator's step 3 (admin credentials): the ConfigMap, then agent-options + desired + Applying."""
    configmaps.ensure(env.admin, OPERATOR_NS, rendered)
    env.annotate(
        env.node_a,
        {
            protocol.ANN_AGENT_OPTIONS: (options or AgentOptions()).to_json(),
            protocol.ANN_DESIRED: rendered.hash,
            protocol.ANN_STATE: NodeState.APPLYING.value,
        },
    )


def test_agent_applies_verifies_rolls_back_and_detects_drift_through_the_real_api(
    agent_env: AgentEnv, tmp_path: Path
) -> None:
    clock = FakeClock()
    host = SimHost(tmp_path / "root", profiles.kubeadm_containerd(), clock)
    with api_client(str(agent_env.kubeconfig)) as agent_client:
        agent = Agent(
            agent_env.node_a,
            host,
            KubeAgentApi(agent_client, host=agent_env.node_a),
            AgentSettings(OPERATOR_NS),
        )
        on = render.render(
            enabled=True, owner=f"agent-test-{uuid.uuid4().hex[:4]}", kubelet_config_mode="DropInOnly"
        )
        _request(agent_env, on)
        runner.run(agent, stop=lambda: False, once=True)

        ann = agent_env.annotations(agent_env.node_a)
        assert ann[protocol.ANN_STATE] == NodeState.DONE, ann.get(protocol.ANN_REASON)
        assert agent_env.state_label(agent_env.node_a) == NodeState.DONE  # in the same write, admitted
        assert ann[protocol.ANN_CURRENT] == on.hash
        assert json.loads(ann[protocol.ANN_EVIDENCE])["checks"]["relist"].startswith("ok: 0 relists")
        assert host.path(f"{profiles.CONFIG_DIR}/{c.KUBELET_DROPIN_NAME}").read_text() == on.file(
            c.CM_KEY_KUBELET
        )
        reasons = [e["reason"] for e in agent_env.events_about(agent_env.node_a)]
        assert "Applying" in reasons and "Verified" in reasons

        # A new render whose kubelet will not start: rolled back, current-config still the verified one.
        host.faults.kubelet.fails_when_evented = True
        again = render.render(
            enabled=True, owner=f"agent-test-{uuid.uuid4().hex[:4]}", kubelet_config_mode="DropInOnly"
        )
        # Our file removed by hand (the running kubelet still has the gate): the rollback must come back to
        # what the files say, gate off.
        host.path(f"{profiles.CONFIG_DIR}/{c.KUBELET_DROPIN_NAME}").unlink()
        _request(agent_env, again)
        runner.run(agent, stop=lambda: False, once=True)
        ann = agent_env.annotations(agent_env.node_a)
        assert ann[protocol.ANN_STATE] == NodeState.ROLLED_BACK, ann.get(protocol.ANN_REASON)
        assert agent_env.state_label(agent_env.node_a) == NodeState.ROLLED_BACK
        assert ann[protocol.ANN_CURRENT] == on.hash
        assert "kubelet did not start" in ann[protocol.ANN_REASON]
        assert json.loads(ann[protocol.ANN_EVIDENCE])["rollback"]["result"] == "pass"
        assert "RolledBack" in [e["reason"] for e in agent_env.events_about(agent_env.node_a)]

        # Back on the verified hash and Done; then our file disappears: Drifted, current-config withdrawn.
        host.faults.kubelet.fails_when_evented = False
        _request(agent_env, on)
        runner.run(agent, stop=lambda: False, once=True)
        assert agent_env.annotations(agent_env.node_a)[protocol.ANN_STATE] == NodeState.DONE
        host.path(f"{profiles.CONFIG_DIR}/{c.KUBELET_DROPIN_NAME}").unlink()
        runner.run(agent, stop=lambda: False, once=True)
        ann = agent_env.annotations(agent_env.node_a)
        assert ann[protocol.ANN_STATE] == NodeState.DRIFTED
        assert agent_env.state_label(agent_env.node_a) == NodeState.DRIFTED
        assert protocol.ANN_CURRENT not in ann


def test_missing_configmap_through_the_real_api(agent_env: AgentEnv, tmp_path: Path) -> None:
    clock = FakeClock()
    host = SimHost(tmp_path / "root", profiles.kubeadm_containerd(), clock)
    agent_env.annotate(
        agent_env.node_a, {protocol.ANN_DESIRED: "000000000000", protocol.ANN_STATE: NodeState.APPLYING.value}
    )
    with api_client(str(agent_env.kubeconfig)) as agent_client:
        agent = Agent(agent_env.node_a, host, KubeAgentApi(agent_client), AgentSettings(OPERATOR_NS))
        runner.run(agent, stop=lambda: False, once=True)
    ann = agent_env.annotations(agent_env.node_a)
    assert ann[protocol.ANN_STATE] == NodeState.ROLLED_BACK
    assert f"ConfigMap {OPERATOR_NS}/{c.CONFIGMAP_PREFIX}000000000000" in ann[protocol.ANN_REASON]
    # Nothing touched: the only commands are the host check's read-only looks at the kubelet binary, made
    # once the rejected request no longer held the node (no restart, no systemctl).
    assert {argv[1:] for argv in host.commands} <= {("--version",), ("--help",)}, host.commands


def _sim_agent(agent_env: AgentEnv, root: Path, *extra: str) -> list[str]:
    """`eventedpleg sim-agent` for node A on a kubeadm-containerd host laid out under `root`."""
    return [
        sys.executable, "-m", "eventedpleg", "sim-agent",
        "--node", agent_env.node_a,
        "--kubeconfig", str(agent_env.kubeconfig),
        "--namespace", OPERATOR_NS,
        "--profile", "kubeadm-containerd",
        "--host-root", str(root),
        *extra,
    ]  # fmt: skip


def test_agent_cli_process_with_a_simulated_host(agent_env: AgentEnv, tmp_path: Path) -> None:
    """The lab's `eventedpleg sim-agent ... --once` (the production agent code on a simulated host) as a real
    process, real clock, bound token."""
    rendered = render.render(
        enabled=True, owner=f"agent-cli-{uuid.uuid4().hex[:4]}", kubelet_config_mode="DropInOnly"
    )
    _request(agent_env, rendered, AgentOptions(verify_timeout_seconds=60))
    root = tmp_path / "host"
    argv = _sim_agent(agent_env, root, "--poll-seconds", "0.5", "--min-window-seconds", "12", "--once")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    ann = agent_env.annotations(agent_env.node_a)
    assert ann[protocol.ANN_STATE] == NodeState.DONE, ann.get(protocol.ANN_REASON)
    assert ann[protocol.ANN_CURRENT] == rendered.hash
    assert (root / profiles.CONFIG_DIR.lstrip("/") / c.KUBELET_DROPIN_NAME).is_file()


def test_agent_process_stops_at_once_on_sigterm_while_idle(agent_env: AgentEnv, tmp_path: Path) -> None:
    """SIGTERM while the agent only waits on the watch of its Node ends it at once, not when the watch
    next ends (here 300 s): the pod's grace period must not run out into SIGKILL."""
    argv = _sim_agent(agent_env, tmp_path / "host", "--check-interval-seconds", "300", "--verbose")
    log = tmp_path / "agent.log"
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        # Up and waiting: the node needs nothing, so the loop reads it and starts the watch.
        deadline = time.monotonic() + 60
        while "watching node" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(2)  # into the watch's wait
        assert proc.poll() is None, log.read_text()
        proc.terminate()
        code = proc.wait(timeout=30)  # the watch would not end for 300 s
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 0, log.read_text()
    assert "stopped by signal while idle" in log.read_text()
