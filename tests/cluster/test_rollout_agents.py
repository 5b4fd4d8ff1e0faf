"""The operator with the REAL agent on simulated hosts (the demo's wiring), on the real control plane."""

from __future__ import annotations

import json

import pytest

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg.k8s.client import api_client
from eventedpleg_lab.demo.simnodes import SimulatedAgents
from eventedpleg_lab.kube.fakenodes import FakeNode
from tests.cluster.rollout_harness import nodeconfig, operator_running, wait_for
from tests.cluster.test_rollout import NS, Env

pytestmark = pytest.mark.cluster


def test_real_agents_verify_and_one_node_rolls_back(env: Env) -> None:
    labels = {"rollout-test": env.prefix}
    fakes = [
        FakeNode(f"{env.prefix}-0", labels=labels),
        FakeNode(f"{env.prefix}-1", "v1.34.1", "cri-o://1.35.6", labels=labels),
        FakeNode(f"{env.prefix}-2", labels=labels),  # its kubelet will not start with the gate on
        FakeNode(f"{env.prefix}-3", "v1.37.2", labels=labels),
    ]
    names = env.cluster.add_nodes(fakes)
    agents = SimulatedAgents(api_client(str(env.cluster.kubeconfig), pool_size=8), env.tmp / "hosts", NS)
    agents.start(fakes)
    agents.hosts[names[2]].faults.kubelet.fails_when_evented = True
    env.apply(
        nodeconfig(
            "real", env.prefix, rollout={"maxUnavailable": 2, "maxFailedNodes": 2, "canary": {"nodes": 0}}
        )
    )
    try:
        with operator_running(env.cluster, NS, env.tmp) as op:

            def finished() -> bool:
                counts = env.nc("real").get("status", {}).get("nodes", {})
                return bool(
                    counts.get("updating") == 0 and counts.get("updated", 0) + counts.get("failed", 0) == 4
                )

            wait_for(finished, timeout=180, what="every node finished")
            status = env.nc("real")["status"]
            assert status["nodes"]["updated"] == 3, op.log()[-2000:]
            assert status["nodes"]["failed"] == 1
    finally:
        agents.stop()
    degraded = env.condition("real", "Degraded")
    assert degraded["status"] == "True" and names[2] in degraded["message"]
    states = env.node_states()
    assert states[names[2]] == ("RolledBack", False)  # rolled back, healthy, given back
    # `kubectl get nodes -L eventedpleg.io/state` shows each state, written by the agent with its report
    assert env.state_labels() == {name: state for name, (state, _) in states.items()}
    for name in (names[0], names[1], names[3]):
        assert states[name] == ("Done", False)
        evidence = json.loads(env.annotations(name)[protocol.ANN_EVIDENCE])
        assert evidence["result"] == "pass", evidence
    assert "no steady-state CPU saving" in env.annotations(names[3])[protocol.ANN_EVIDENCE]  # 1.37
    failed = json.loads(env.annotations(names[2])[protocol.ANN_EVIDENCE])
    assert "rollback" in failed and "failure" in failed
    # The simulated hosts hold what the agents report: our files on Done nodes, none after the rollback.
    crio_dropin = agents.hosts[names[1]].path(f"/{c.CRIO_DROPIN_DIR}/{c.CRIO_DROPIN_NAME}")
    assert "enable_pod_events = true" in crio_dropin.read_text()
    assert not list(agents.hosts[names[2]].root.rglob(c.KUBELET_DROPIN_NAME))
