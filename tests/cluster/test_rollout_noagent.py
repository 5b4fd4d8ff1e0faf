"""Nodes without a live agent, and deletions that must finish, on the real control plane: an agent-less
node is never cordoned and status names it; deleting a NodeConfig with a Failed (halted), a Skipped and an
agent-less node finishes with every node given back."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from eventedpleg import protocol
from eventedpleg.core import hostcheck
from eventedpleg.core.rollout.planner.taking import NO_AGENT
from eventedpleg_lab.demo.harness import AGENT_NAMESPACE
from eventedpleg_lab.demo.protocolagents import ProtocolAgents
from eventedpleg_lab.kube import workloads
from eventedpleg_lab.kube.fakenodes import KWOK_TOLERATION
from tests.cluster.rollout_harness import nodeconfig, operator_running, plain, wait_for
from tests.cluster.test_health_gate import set_ready
from tests.cluster.test_rollout import NS, Env

pytestmark = pytest.mark.cluster


def agents_for(env: Env, behaviour: dict[str, str] | None = None) -> ProtocolAgents:
    """Stand-in agents on the nodes labelled agent=yes only: the others have none."""
    verdicts = behaviour or {}
    return ProtocolAgents(
        env.api,
        label_selector=f"rollout-test={env.prefix},agent=yes",
        apply_seconds=0.3,
        behaviour=lambda node: verdicts.get(node, "Done"),
    )


def notes(env: Env, name: str) -> dict[str, str]:
    return {n["name"]: n["reason"] for n in (env.nc(name).get("status") or {}).get("nodeStatuses") or []}


def test_a_node_without_an_agent_is_not_cordoned_and_status_names_it(env: Env) -> None:
    live, lone = env.nodes([{"labels": {"agent": "yes"}}, {}])
    env.apply(nodeconfig("noagent", env.prefix, rollout={"maxUnavailable": 2, "canary": {"nodes": 0}}))
    with operator_running(env.cluster, NS, env.tmp) as op, agents_for(env):
        wait_for(lambda: env.node_states()[live] == ("Done", False), what="the node with an agent Done")
        wait_for(lambda: lone in notes(env, "noagent"), what="status names the node without an agent")
        assert notes(env, "noagent")[lone].startswith(NO_AGENT), notes(env, "noagent")
        assert "no host check" in notes(env, "noagent")[lone]
        assert env.node_states()[lone] == (None, False), op.log()[-2000:]  # never taken
        progressing = env.condition("noagent", "Progressing")
        print(f"{lone}: {notes(env, 'noagent')[lone]}\nProgressing: {progressing['message']}")
        assert f"for a live eventedpleg agent: {lone}" in progressing["message"], progressing
        assert env.condition("noagent", "Ready")["status"] == "False"


def test_deleting_with_failed_skipped_and_agentless_nodes_finishes_with_every_node_uncordoned(
    env: Env,
) -> None:
    failed, skipped, lone = env.nodes([{"labels": {"agent": "yes"}}, {"labels": {"agent": "yes"}}, {}])
    spec = {"maxUnavailable": 3, "maxFailedNodes": 1, "canary": {"nodes": 0}}
    with agents_for(env, {failed: "Failed"}):
        # The skipped node's agent says it would refuse the change (published over the stand-in's check).
        wait_for(
            lambda: protocol.ANN_HOST_CHECK in env.annotations(skipped), what="the stand-in's host check"
        )
        refusal = hostcheck.HostCheck(datetime.now(UTC), {"DropInOnly": "test: refused"}, 3600.0)
        env.core.patch_node(
            skipped, {"metadata": {"annotations": {protocol.ANN_HOST_CHECK: refusal.to_json()}}}
        )
        env.apply(nodeconfig("h2", env.prefix, rollout=spec))
        with operator_running(env.cluster, NS, env.tmp) as op:
            wait_for(
                lambda: env.node_states()[failed] == ("Failed", True), what="a Failed node left cordoned"
            )
            wait_for(lambda: env.node_states()[skipped] == ("Skipped", False), what="a Skipped node")
            wait_for(lambda: lone in notes(env, "h2"), what="the agent-less node named")
            # Status follows the node's annotations by a pass: wait for it, then read what it says.
            halted = lambda: env.condition("h2", "Degraded")["reason"] == "RolloutHalted"  # noqa: E731
            wait_for(halted, what="h2 halted in status")
            degraded = env.condition("h2", "Degraded")
            assert degraded["message"].startswith("halted after 1 failed node(s)"), degraded  # no empty field
            env.cluster.kubectl("delete", "nodeconfig", "h2", "--wait=false", check=True)

            def gone() -> bool:
                return env.cluster.kubectl("get", "nodeconfig", "h2").returncode != 0

            deleting = time.monotonic()
            wait_for(gone, what="NodeConfig h2 finalized", timeout=60)
            print(f"halted NodeConfig h2 deleted in {time.monotonic() - deleting:.1f} s")
            for node, (state, cordoned) in env.node_states().items():
                assert not cordoned, (node, op.log()[-3000:])
                assert state is None, node
                assert protocol.ANN_OWNER not in env.annotations(node), node
            lines = op.log().splitlines()
            assert not [line for line in lines if "steps in flight" in line], lines[-40:]
            events = env.cluster.kubectl(
                "get", "events", "-A", "--field-selector", f"involvedObject.name={failed}", "-o", "json"
            )
            reasons = [e["reason"] for e in json.loads(events.stdout)["items"]]
            assert "ReleasedAsIs" in reasons, reasons


def _agent_daemonset(env: Env, node: str) -> dict[str, Any]:
    """A DaemonSet with the agent's labels on `node` alone (kwok runs its pod), in the agent's namespace:
    what the operator's agent pod watch sees of a real agent."""
    labels = {"app.kubernetes.io/component": "agent", "rollout-test": env.prefix}
    return workloads.daemonset(
        f"agent-{env.prefix}",
        AGENT_NAMESPACE,
        labels=labels,
        pod_spec={
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [KWOK_TOLERATION],
            "containers": [{"name": "agent", "image": "registry.invalid/agent:1"}],
        },
    )


def test_a_node_whose_agent_pod_is_not_ready_is_not_taken_and_status_gives_the_pods_reason(env: Env) -> None:
    """A fresh host check is not enough: the operator watches the agent pods, and a node whose agent pod
    is not Ready (a crash-looping agent) is not cordoned, named with the pod; once Ready it is taken."""
    crashing, fine = env.nodes([{"labels": {"agent": "yes"}}, {"labels": {"agent": "yes"}}])
    manifests = [workloads.namespace(AGENT_NAMESPACE), _agent_daemonset(env, crashing)]
    env.cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(manifests), check=True)
    try:
        pod = wait_for(lambda: _running_pod(env, crashing), what="the agent pod running on its node")
        set_ready(env, pod, False, namespace=AGENT_NAMESPACE)
        env.apply(nodeconfig("podready", env.prefix, rollout={"maxUnavailable": 2, "canary": {"nodes": 0}}))
        with operator_running(env.cluster, NS, env.tmp) as op, agents_for(env):
            wait_for(lambda: env.node_states()[fine] == ("Done", False), what="the other node Done")
            said = f"agent pod {AGENT_NAMESPACE}/{pod} on node {crashing} not Ready since "
            wait_for(
                lambda: said in notes(env, "podready").get(crashing, ""), what="status names the agent pod"
            )
            print(f"{crashing}: {notes(env, 'podready')[crashing]}")
            assert notes(env, "podready")[crashing].startswith(NO_AGENT)
            assert env.node_states()[crashing] == (None, False), op.log()[-2000:]  # never taken
            set_ready(env, pod, True, namespace=AGENT_NAMESPACE)
            wait_for(
                lambda: env.node_states()[crashing] == ("Done", False),
                what="taken once its agent pod is Ready",
            )
    finally:  # the agent namespace outlives the test
        env.cluster.kubectl(
            "delete", "daemonset", "-n", AGENT_NAMESPACE, f"agent-{env.prefix}", "--wait=false"
        )


def _running_pod(env: Env, node: str) -> str:
    selector = f"app.kubernetes.io/component=agent,rollout-test={env.prefix}"
    pods = plain(env.core.list_namespaced_pod(AGENT_NAMESPACE, label_selector=selector))
    for pod in pods["items"]:
        running = pod["status"].get("phase") == "Running" and "deletionTimestamp" not in pod["metadata"]
        if pod["spec"].get("nodeName") == node and running:
            return str(pod["metadata"]["name"])
    return ""
