"""Rollout controls on a real API server, with the operator and the protocol agents: a pod that asks the
autoscalers not to be disrupted keeps its node uncordoned (preflight names it as the operator does), and
spec.rollout.approval: Manual holds each node in service until `eventedpleg approve`."""

from __future__ import annotations

import json

import pytest
import yaml

from eventedpleg import protocol
from eventedpleg_lab.kube import workloads
from eventedpleg_lab.kube.fakenodes import KWOK_TOLERATION
from tests.cluster.rollout_harness import ProtocolAgents, nodeconfig, operator_running, plain, wait_for
from tests.cluster.test_rollout import NS, Env, eventedpleg, node_events

pytestmark = pytest.mark.cluster


def pinned_deployment(env: Env, name: str, node: str, annotations: dict[str, str]) -> None:
    """One Deployment pod on `node` whose pod template carries `annotations`; waits for it to run."""
    pod_spec = {
        "nodeSelector": {"kubernetes.io/hostname": node},
        "tolerations": [KWOK_TOLERATION],
        "containers": [{"name": name, "image": f"registry.invalid/{name}:1"}],
    }
    deployment = workloads.deployment(name, env.prefix, replicas=1, pod_spec=pod_spec)
    deployment["spec"]["template"]["metadata"]["annotations"] = annotations
    manifests = [workloads.namespace(env.prefix), deployment]
    env.cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(manifests), check=True)

    def running() -> bool:
        pods = plain(env.core.list_namespaced_pod(env.prefix, label_selector=f"app={name}"))["items"]
        return bool(pods) and all(p["status"].get("phase") == "Running" for p in pods)

    wait_for(running, what=f"{name} running on {node}")


def test_a_pod_that_asks_not_to_be_disrupted_keeps_its_node_uncordoned_and_is_named(env: Env) -> None:
    kept, free = env.nodes([{}, {}])
    pinned_deployment(env, "train", kept, {"karpenter.sh/do-not-disrupt": "true"})
    env.apply(nodeconfig("asks", env.prefix, rollout={"paused": True, "canary": {"nodes": 0}}))
    looked = eventedpleg(env, "preflight", "--nodeconfig", "asks", "-o", "wide")
    print(looked.stdout)  # what a user sees (pytest -s or -rA)
    row = next(line for line in looked.stdout.splitlines() if line.startswith(kept))
    assert "never finishes" in row and f"{env.prefix}/train-" in row
    assert 'annotated karpenter.sh/do-not-disrupt: "true"' in row
    unpause = '{"spec":{"rollout":{"paused":false}}}'
    env.cluster.kubectl("patch", "nodeconfig", "asks", "--type=merge", "-p", unpause, check=True)
    with operator_running(env.cluster, NS, env.tmp) as op, ProtocolAgents(env.api, env.prefix):

        def ready() -> bool:
            assert not env.node_states()[kept][1], f"{kept} was cordoned"
            return env.condition("asks", "Ready").get("status") == "True"

        wait_for(ready, what="Ready", timeout=90)
        assert env.node_states() == {kept: ("Skipped", False), free: ("Done", False)}, op.log()[-2000:]
    reason = env.annotations(kept)[protocol.ANN_REASON]
    assert reason.startswith("not cordoned: the drain could never finish: ")
    assert 'annotated karpenter.sh/do-not-disrupt: "true"' in reason
    assert "DrainBlocked" in node_events(env, kept)
    pods = plain(env.core.list_namespaced_pod(env.prefix, label_selector="app=train"))["items"]
    assert [p["status"]["phase"] for p in pods] == ["Running"]  # nothing evicted or deleted
    assert "deletionTimestamp" not in pods[0]["metadata"]


def test_manual_approval_holds_each_node_in_service_until_approved_with_the_cli(env: Env) -> None:
    first, second = env.nodes([{}, {}])
    env.apply(nodeconfig("manual", env.prefix, rollout={"approval": "Manual", "canary": {"nodes": 0}}))
    with operator_running(env.cluster, NS, env.tmp) as op, ProtocolAgents(env.api, env.prefix):
        progressing = wait_for(
            lambda: (
                (cond := env.condition("manual", "Progressing")).get("reason") == "AwaitingApproval" and cond
            ),
            what="Progressing says AwaitingApproval",
        )
        assert first in progressing["message"] and second in progressing["message"]
        assert env.node_states() == {first: (None, False), second: (None, False)}
        wait_for(lambda: "AwaitingApproval" in node_events(env, first), what="the node's Event")
        status = env.nc("manual")["status"]
        assert status["nodes"]["awaitingApproval"] == 2
        assert {n["name"]: n["state"] for n in status["nodeStatuses"]} == {
            first: "AwaitingApproval",
            second: "AwaitingApproval",
        }
        shown = eventedpleg(env, "status", "manual")
        assert "2 awaiting approval" in shown.stdout and "AwaitingApproval" in shown.stdout
        approved = eventedpleg(env, "approve", first, "--nodeconfig", "manual")
        assert approved.returncode == 0, approved.stderr
        config = status["renderedHash"]
        assert f"node {first} approved for config {config} of NodeConfig manual" in approved.stdout
        wait_for(lambda: env.node_states()[first] == ("Done", False), what=f"{first} Done")
        assert env.node_states()[second] == (None, False)  # still waiting for its own approval
        approvals = json.loads(env.nc("manual")["metadata"]["annotations"][protocol.ANN_APPROVED])
        assert approvals == {first: config} and protocol.ANN_APPROVED not in env.annotations(first)
        missing = eventedpleg(env, "approve", "no-such-node", "--nodeconfig", "manual")
        assert missing.returncode == 6 and "not found" in missing.stderr
        assert eventedpleg(env, "approve", second, "--nodeconfig", "manual").returncode == 0
        wait_for(lambda: env.condition("manual", "Ready").get("status") == "True", what="Ready", timeout=90)
        assert env.node_states() == {first: ("Done", False), second: ("Done", False)}, op.log()[-2000:]
        assert env.nc("manual")["status"]["nodes"]["awaitingApproval"] == 0
