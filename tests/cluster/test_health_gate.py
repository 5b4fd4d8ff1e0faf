"""spec.rollout.healthGate on a real API server, with the operator and the protocol agents: a node whose
guarded pod is not Ready stays in service, named (with the pod) by preflight, status and `eventedpleg
status`, while the rollout goes on with the other node; once the pod is Ready the node is taken, and its
pod, evicted and scheduled back after the uncordon, is Ready within afterSeconds, so nothing halts.

kwok makes a pod Ready once (its pod-ready stage matches only pods without a podIP), so a Ready condition
patched to False through the status subresource stays False until the test sets it back."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from eventedpleg_lab.kube import workloads
from eventedpleg_lab.kube.fakenodes import KWOK_TOLERATION
from tests.cluster.rollout_harness import ProtocolAgents, nodeconfig, operator_running, plain, wait_for
from tests.cluster.test_rollout import NS, Env, eventedpleg

pytestmark = pytest.mark.cluster


def api_pod(env: Env) -> dict[str, Any]:
    pods = plain(env.core.list_namespaced_pod(env.prefix, label_selector="app=api"))["items"]
    running = [
        p for p in pods if p["status"].get("phase") == "Running" and "deletionTimestamp" not in p["metadata"]
    ]
    assert len(running) <= 1, running
    return running[0] if running else {}


def set_ready(env: Env, pod: str, ready: bool, *, namespace: str = "") -> None:
    """The pod's Ready condition, as a kubelet would write it (in the test's namespace unless given)."""
    condition = {"type": "Ready", "status": "True" if ready else "False"}
    patch = json.dumps({"status": {"conditions": [condition]}})
    env.cluster.kubectl(
        "patch",
        "pod",
        pod,
        "-n",
        namespace or env.prefix,
        "--subresource=status",
        "--type=strategic",
        "-p",
        patch,
        check=True,
    )


def test_a_node_whose_guarded_pod_is_not_ready_waits_in_service_and_is_taken_once_it_is(env: Env) -> None:
    kept, free = env.nodes([{}, {}])
    pod_spec = {
        "nodeSelector": {"kubernetes.io/hostname": kept},
        "tolerations": [KWOK_TOLERATION],
        "containers": [{"name": "api", "image": "registry.invalid/api:1"}],
    }
    manifests = [
        workloads.namespace(env.prefix),
        workloads.deployment("api", env.prefix, replicas=1, pod_spec=pod_spec),
    ]
    env.cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(manifests), check=True)
    name = wait_for(lambda: api_pod(env).get("metadata", {}).get("name"), what="api running")
    set_ready(env, name, False)
    gate = {"podSelector": {"matchLabels": {"app": "api"}}, "namespaces": [env.prefix], "afterSeconds": 30}
    env.apply(nodeconfig("guarded", env.prefix, rollout={"canary": {"nodes": 0}, "healthGate": gate}))
    looked = eventedpleg(env, "preflight", "--nodeconfig", "guarded", "-o", "wide")
    print(looked.stdout)  # what a user sees (pytest -s or -rA)
    row = next(line for line in looked.stdout.splitlines() if line.startswith(kept))
    assert f"waits, pods not Ready (rollout.healthGate): {env.prefix}/{name}" in row
    with operator_running(env.cluster, NS, env.tmp) as op, ProtocolAgents(env.api, env.prefix):
        wait_for(lambda: env.node_states()[free] == ("Done", False), what=f"{free} Done")
        assert env.node_states()[kept] == (None, False), op.log()[-2000:]  # never cordoned
        notes = {n["name"]: n for n in env.nc("guarded")["status"].get("nodeStatuses", [])}
        assert notes[kept]["state"] == "Pending"
        assert (
            notes[kept]["reason"]
            == f"waiting, not cordoned: pods not Ready (rollout.healthGate): {env.prefix}/{name}"
        )
        # Status follows the nodes by a pass: wait for the condition to name the held node and its pod.
        wait_for(
            lambda: (
                f"{kept} ({env.prefix}/{name})" in env.condition("guarded", "Progressing").get("message", "")
            ),
            what="Progressing names the held node and its pod",
        )
        shown = eventedpleg(env, "status", "guarded")
        assert "pods not Ready (rollout.healthGate)" in shown.stdout
        set_ready(env, name, True)
        # taken, drained (its pod evicted, scheduled back on it after the uncordon, Ready again in time)
        wait_for(lambda: env.condition("guarded", "Ready").get("status") == "True", what="Ready", timeout=180)
        assert env.node_states() == {kept: ("Done", False), free: ("Done", False)}, op.log()[-2000:]

        def back_and_ready() -> bool:
            pod = api_pod(env)
            conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
            return pod.get("spec", {}).get("nodeName") == kept and conditions.get("Ready") == "True"

        wait_for(back_and_ready, what="api back on its node and Ready")
        assert env.condition("guarded", "Degraded").get("status") == "False", op.log()[-2000:]
