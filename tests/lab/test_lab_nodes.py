"""Real nodes: Ready with the kubelet and runtime they were given, systemd as PID 1, NodeRestriction,
pods that reach each other across nodes, the administrator's CRI-O policy in effect, nothing left after
`lab down`."""

from __future__ import annotations

import json
import time

import pytest

from eventedpleg_lab.lab import machine
from eventedpleg_lab.lab.lab import Lab, node_ready
from eventedpleg_lab.lab.nodefiles import BUSYBOX_IMAGE
from eventedpleg_lab.lab.nodes import LabRuntime, NodeSpec

pytestmark = [pytest.mark.lab, pytest.mark.slow]

KUBELET_VERSIONS = {"1.36": "v1.36.4", "1.37": "v1.37.2"}
RUNTIME_VERSIONS = {
    LabRuntime.CONTAINERD_22: "containerd://2.2.9",  # seen on the real Node (the build stamps v2.2.9)
    LabRuntime.CONTAINERD_17: "containerd://1.7.35",  # seen on the real Node (the build stamps v1.7.35)
    LabRuntime.CONTAINERD_16: "containerd://1.6.20",
    LabRuntime.CRIO_134: "cri-o://1.34.0",
    LabRuntime.CRIO_136: "cri-o://1.36.3",
}


def _ok(lab: Lab, *args: str) -> str:
    done = lab.kubectl(*args, timeout=120)
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


def test_nodes_are_ready_with_their_kubelet_and_runtime(lab: Lab, lab_specs: tuple[NodeSpec, ...]) -> None:
    api = lab.nodes()
    assert sorted(api) == sorted(s.name for s in lab_specs)
    for spec in lab_specs:
        node = api[spec.name]
        info = node["status"]["nodeInfo"]
        assert node_ready(node), spec.name
        assert info["kubeletVersion"] == KUBELET_VERSIONS[spec.kubelet], spec.name
        assert info["containerRuntimeVersion"] == RUNTIME_VERSIONS[spec.runtime], spec.name
        addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
        assert addresses["InternalIP"] == spec.ip


def test_systemd_is_pid_1_and_runs_the_units(lab: Lab, lab_specs: tuple[NodeSpec, ...]) -> None:
    """The agent's path: nsenter into the node's PID 1, systemctl, journalctl -u kubelet."""
    for spec in lab_specs:
        init = lab.init_pid(spec.name)
        assert init is not None, spec.name
        comm = machine.nsenter(init, ["cat", "/proc/1/comm"]).stdout.strip()
        assert comm == "systemd", spec.name
        runtime_unit = "crio" if spec.runtime.is_crio else "containerd"
        active = machine.nsenter(init, ["systemctl", "is-active", "kubelet", runtime_unit])
        assert active.stdout.split() == ["active", "active"], (spec.name, active.stdout, active.stderr)
        journal = machine.nsenter(init, ["journalctl", "-u", "kubelet", "-o", "cat", "--no-pager"])
        assert "Successfully registered node" in journal.stdout, spec.name


def test_each_kubelet_may_only_change_its_own_node(lab: Lab, lab_specs: tuple[NodeSpec, ...]) -> None:
    """NodeRestriction is on: a node identity cannot label another node (but can its own)."""
    first, *rest = lab_specs
    if not rest:
        pytest.skip("needs two nodes")
    other = rest[0]
    as_first = [f"--as=system:node:{first.name}", "--as-group=system:nodes"]
    own = lab.kubectl(*as_first, "label", "node", first.name, "lab.eventedpleg.io/probe=own", "--overwrite")
    assert own.returncode == 0, own.stderr
    theirs = lab.kubectl(*as_first, "label", "node", other.name, "lab.eventedpleg.io/probe=theirs")
    assert theirs.returncode != 0
    assert "forbidden" in theirs.stderr.lower(), theirs.stderr


def _web_pod(name: str, node: str) -> dict[str, object]:
    script = f"mkdir -p /www && echo hello-from-{name} > /www/index.html && exec httpd -f -p 8080 -h /www"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "lab-web"}},
        "spec": {
            "nodeName": node,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "web",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["/bin/sh", "-c", script],
                }
            ],
        },
    }


def test_pods_reach_each_other_across_nodes(lab: Lab, lab_specs: tuple[NodeSpec, ...]) -> None:
    names = {spec.name: f"web-{spec.name}" for spec in lab_specs}
    items = [_web_pod(pod, node) for node, pod in names.items()]
    path = lab.directory / "web-pods.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    _ok(lab, "apply", "-f", str(path))
    try:
        _ok(lab, "wait", "--for=condition=Ready", "pod", "-l", "app=lab-web", "--timeout=180s")
        pods = json.loads(_ok(lab, "get", "pods", "-l", "app=lab-web", "-o", "json"))["items"]
        ip = {p["spec"]["nodeName"]: p["status"]["podIP"] for p in pods}
        for spec in lab_specs:
            assert ip[spec.name].startswith(spec.pod_subnet.rsplit(".", 2)[0] + "."), (
                spec.name,
                ip[spec.name],
            )
        # Each pod fetches the page of the pod on the next node (a ring), through the routes between them.
        order = [s.name for s in lab_specs]
        for i, node in enumerate(order):
            target = order[(i + 1) % len(order)]
            request = f"printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {ip[target]} 8080"
            body = ""
            for _ in range(10):  # the first packets can race the other node's ARP entry
                body = lab.kubectl("exec", names[node], "--", "sh", "-c", request, timeout=60).stdout
                if f"hello-from-{names[target]}" in body:
                    break
                time.sleep(1)
            assert f"hello-from-{names[target]}" in body, (node, target, body)
    finally:  # bare pods: a later drain would rightly refuse to evict them (no controller)
        lab.kubectl("delete", "pods", "-l", "app=lab-web", "--wait=false")


def test_crio_admin_policy_is_in_effect(lab: Lab, lab_specs: tuple[NodeSpec, ...]) -> None:
    crio = [s for s in lab_specs if s.runtime.is_crio]
    if not crio:
        pytest.skip("no CRI-O node in this node set")
    for spec in crio:
        init = lab.init_pid(spec.name)
        assert init is not None
        config = machine.nsenter(init, ["crio", "status", "config"]).stdout
        expected = "enable_pod_events = false" if spec.admin_pod_events_off else "enable_pod_events = "
        assert expected in config, spec.name
