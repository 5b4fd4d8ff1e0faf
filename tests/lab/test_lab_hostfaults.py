"""Host faults on real nodes (issue "fail safe on every node"), the three the simulated fault matrix
(tests/agent/test_fault_matrix.py) is least sure of, because each depends on the real kernel and the real
agent pod's view of its host (the host root mounted into its container):
- a FIFO where the CRI-O drop-in goes (an open that would block for ever without O_NONBLOCK);
- a symbolic link at the kubelet drop-in leading out of the host root (the container's own files lie
  beyond it);
- an immutable kubelet drop-in directory (`chattr +i`, as hardening guides set: EPERM from ext4, which the
  simulation can only raise by the man pages' rules).
The first two faults are found by the agent's host check, so the node is Skipped and never cordoned; the
third only shows when the agent writes, so the node is taken, rolled back and given back, and the halted
NodeConfig is then deleted (a real Prometheus over the chart's rules fires EventedPlegRolloutDegraded for
the halt, with its runbook link, first). Each fault ends in one report naming the path, the errno and the
fix, and no traceback in the agent's log. Each test plants its fault in the node's root on this host and
removes it after, and restarts the node's agent so that its next host check is clean for the tests that
follow. A kubelet drop-in directory on a mount of its own (a read-only bind mount, a full tmpfs, a
writable tmpfs) is written in place: the first two end with that filesystem's refusal (EROFS, ENOSPC,
never EXDEV) and the node given back unchanged, the third ends Done. And a node the agent DaemonSet cannot
run on (an architecture the image lacks or a taint the agent does not tolerate would keep it off) is never
cordoned; status and `eventedpleg status` name it with why, and the rollout goes on with the other node.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg.cli.failures import EXIT_PARTIAL
from eventedpleg.core import hostcheck
from eventedpleg_lab import prometheus
from eventedpleg_lab.demo.harness import NAMESPACE
from eventedpleg_lab.lab import chart, machine
from eventedpleg_lab.lab.lab import Lab
from eventedpleg_lab.lab.nodes import LabRuntime, NodeSpec

pytestmark = [pytest.mark.lab, pytest.mark.slow]

NAME = "hostfault"
KUBELET_DROPIN_DIR = "/etc/kubernetes/kubelet.conf.d"
KUBELET_DROPIN = f"{KUBELET_DROPIN_DIR}/{c.KUBELET_DROPIN_NAME}"
CRIO_DROPIN = f"/{c.CRIO_DROPIN_DIR}/{c.CRIO_DROPIN_NAME}"


def _rootfs(lab: Lab, node: str) -> Path:
    return lab.node_dir(node) / "rootfs"  # the node's / on this host


def _annotations(lab: Lab, node: str) -> dict[str, str]:
    annotations: dict[str, str] = lab.nodes()[node]["metadata"].get("annotations", {})
    return annotations


def _restart_agent(lab: Lab, node: str, until: Callable[[hostcheck.HostCheck], bool], what: str) -> None:
    """Replace the node's agent pod and wait for the new agent's host check to say `what`."""
    (old,) = chart.wait_for("one ready agent pod", lambda: chart.agent_pods(lab, node), timeout=120)
    chart.kubectl_ok(lab, "delete", "pod", old, "-n", chart.AGENT_NAMESPACE, "--wait=false")

    def published() -> bool:
        check = hostcheck.parse(_annotations(lab, node).get(protocol.ANN_HOST_CHECK))
        new = [pod for pod in chart.agent_pods(lab, node) if pod != old]  # the next agent, Ready
        return check is not None and check.stopped is None and until(check) and bool(new)

    chart.wait_for(what, published, timeout=180)


def _refusing(path: str) -> Callable[[hostcheck.HostCheck], bool]:
    return lambda check: any(path in refusal for refusal in check.refusals.values())


def _as_before(lab: Lab, node: str) -> Callable[[hostcheck.HostCheck], bool]:
    """A check that says what the node's check says now (before a fault is planted)."""
    now = hostcheck.parse(_annotations(lab, node).get(protocol.ANN_HOST_CHECK))
    assert now is not None and now.stopped is None, "no live agent on the node before the test"
    return lambda check: dict(check.refusals) == dict(now.refusals)


def _apply(lab: Lab, node: str) -> None:
    body = json.loads(chart.nodeconfig(True, name=NAME))
    body["spec"]["nodeSelector"] = {"matchLabels": {"kubernetes.io/hostname": node}}
    body["spec"]["verification"] = {"timeoutSeconds": 120}
    chart.kubectl_ok(lab, "apply", "-f", "-", stdin=json.dumps(body))


def _skipped_before_the_cordon(lab: Lab, node: str, *words: str) -> str:
    """Apply a NodeConfig for `node` alone; it must end Skipped, with `words` in its reason, and never be
    cordoned on the way. The reason."""
    cordoned: list[bool] = []
    _apply(lab, node)

    def skipped() -> str:
        cordoned.append(chart.cordoned(lab, node))
        entry = chart.node_status(lab, NAME, node)
        return str(entry.get("reason", "")) if entry.get("state") == protocol.NodeState.SKIPPED.value else ""

    reason = chart.wait_for(f"{node} Skipped by its host check", skipped, timeout=120, interval=0.5)
    print(f"{node}: Skipped: {reason}")
    assert not any(cordoned), "the node was cordoned"
    for word in words:
        assert word in reason, (word, reason)
    assert "Traceback" not in chart.agent_log(lab, node)
    return reason


@pytest.fixture
def crio_node(installed: Lab, lab_specs: tuple[NodeSpec, ...]) -> Iterator[str]:
    yield next(s.name for s in lab_specs if s.runtime is LabRuntime.CRIO_136)
    chart.delete_nodeconfig(installed, name=NAME, timeout=300)


@pytest.fixture
def containerd_node(installed: Lab, lab_specs: tuple[NodeSpec, ...]) -> Iterator[str]:
    yield next(s.name for s in lab_specs if s.runtime is LabRuntime.CONTAINERD_22 and s.kubelet == "1.36")
    chart.delete_nodeconfig(installed, name=NAME, timeout=300)


def test_a_fifo_at_the_crio_drop_in_is_refused_before_the_cordon(installed: Lab, crio_node: str) -> None:
    fifo = _rootfs(installed, crio_node) / CRIO_DROPIN.lstrip("/")
    clean = _as_before(installed, crio_node)
    made = not fifo.parent.exists()  # no CRI-O drop-in directory until someone writes one
    fifo.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(fifo)
    try:
        _restart_agent(
            installed, crio_node, _refusing(CRIO_DROPIN), "the agent's host check to refuse the FIFO"
        )
        _skipped_before_the_cordon(installed, crio_node, CRIO_DROPIN, "FIFO", "ENXIO", "remove or rename")
        assert fifo.is_fifo()  # left as it was: the agent never opened it for writing or removed it
    finally:
        fifo.unlink(missing_ok=True)
        if made:
            fifo.parent.rmdir()
        _restart_agent(installed, crio_node, clean, "the host check from before the test again")


def test_a_symlink_out_of_the_host_root_at_the_kubelet_drop_in_is_refused(
    installed: Lab, containerd_node: str
) -> None:
    link = _rootfs(installed, containerd_node) / KUBELET_DROPIN.lstrip("/")
    clean = _as_before(installed, containerd_node)
    # Relative, with more `..` than the path is deep: inside the agent's container it leads past the host
    # root (mounted at the agent's --host-root) into the container's own /etc.
    link.symlink_to("../" * 12 + "etc/os-release")
    try:
        _restart_agent(
            installed, containerd_node, _refusing(KUBELET_DROPIN), "a host check refusing the link"
        )
        _skipped_before_the_cordon(installed, containerd_node, KUBELET_DROPIN, "ELOOP", "symbolic link")
        assert link.is_symlink()
    finally:
        link.unlink(missing_ok=True)
        _restart_agent(installed, containerd_node, clean, "the host check from before the test again")


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_an_immutable_drop_in_directory_is_rolled_back_given_back_and_its_halted_nodeconfig_deleted(
    installed: Lab, containerd_node: str, tmp_path: Path
) -> None:
    node = containerd_node
    kubernetes = _rootfs(installed, node) / "etc/kubernetes"
    dropins = kubernetes / "kubelet.conf.d"
    before = _tree(kubernetes)
    subprocess.run(["chattr", "+i", str(dropins)], check=True)
    try:
        _apply(installed, node)
        ends = {
            protocol.NodeState.ROLLED_BACK.value,
            protocol.NodeState.FAILED.value,
            protocol.NodeState.DONE.value,
        }
        end = chart.wait_for(
            "the agent's report",
            lambda: ((s := _annotations(installed, node).get(protocol.ANN_STATE)) in ends and s) or "",
            timeout=420,
        )
        reason = _annotations(installed, node).get(protocol.ANN_REASON, "")
        print(f"{node}: {end}: {reason}")
        assert end == protocol.NodeState.ROLLED_BACK.value, reason
        for word in ("write", KUBELET_DROPIN, "EPERM", "Operation not permitted", "immutable", "rolled back"):
            assert word in reason, (word, reason)
        chart.wait_for("the node given back", lambda: not chart.cordoned(installed, node), timeout=120)
        assert _tree(kubernetes) == before  # byte-identical: nothing half-written, nothing left behind
        log = chart.agent_log(installed, node)  # the agent tells the fault and the rollback in its own log
        print(f"--- the agent's log on {node}:\n{log}")
        assert "Traceback" not in log and f"{protocol.NodeState.ROLLED_BACK.value}: " in log, log

        def halted() -> dict[str, Any] | None:
            body = chart.get_json(installed, "nodeconfig", NAME)
            return body if chart.conditions(body).get("Degraded") == "True" else None

        body = chart.wait_for("the NodeConfig halted", halted, timeout=120)
        assert body is not None
        print(
            "halted:",
            [cond["message"] for cond in body["status"]["conditions"] if cond["type"] == "Progressing"],
        )
        # The halt as on-call sees it: a real Prometheus over the chart's rules, scraping the operator's
        # pods, fires EventedPlegRolloutDegraded with its runbook (its `for:` shortened for this Prometheus
        # only, through the chart's own value; the installed chart keeps its default).
        with prometheus.watching_operator(
            installed.kubeconfig,
            NAMESPACE,
            tmp_path / "prometheus",
            values={"prometheusRule.degradedFor": "10s"},
        ) as prom:
            (alert,) = prom.wait_firing("EventedPlegRolloutDegraded", timeout=180)
        print("firing:", json.dumps({k: alert[k] for k in ("labels", "annotations", "activeAt")}))
        assert alert["labels"]["nodeconfig"] == NAME
        assert alert["annotations"]["runbook_url"].endswith("docs/runbooks.md#eventedplegrolloutdegraded")
        started = time.monotonic()
        chart.delete_nodeconfig(installed, name=NAME, timeout=300)
        took = time.monotonic() - started
        print(f"deleting the halted NodeConfig took {took:.1f} s")
        assert not chart.cordoned(installed, node)
        left = {k for k in _annotations(installed, node) if k.startswith(protocol.GROUP)}
        assert left <= {protocol.ANN_HOST_CHECK}, left
    finally:
        subprocess.run(["chattr", "-i", str(dropins)], check=True)


def _keep_agent_off(lab: Lab, node: str) -> Callable[[], None]:
    """Keep the agent DaemonSet off `node`, as an architecture the image lacks, a taint the agent does not
    tolerate or a full node would: a required node affinity term it cannot meet there. The DaemonSet is
    set to OnDelete meanwhile so the other nodes keep their agents (the controller still deletes the pod of
    a node the DaemonSet no longer runs on). Waits until `node` has no agent pod at all; returns what puts
    the DaemonSet back as it was (the same template, so the other agents are current again at once)."""
    daemonset = chart.get_json(lab, "daemonset", chart.AGENT_DAEMONSET, "-n", chart.AGENT_NAMESPACE)
    spec = daemonset["spec"]
    terms = "/spec/template/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution"
    terms += "/nodeSelectorTerms"
    count = len(spec["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"])  # fmt: skip
    off = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": [node]}

    def patch(ops: list[dict[str, Any]]) -> None:
        chart.kubectl_ok(lab, "patch", "daemonset", chart.AGENT_DAEMONSET, "-n", chart.AGENT_NAMESPACE,
                         "--type=json", "-p", json.dumps(ops))  # fmt: skip

    patch(
        [{"op": "replace", "path": "/spec/updateStrategy", "value": {"type": "OnDelete"}}]
        + [{"op": "add", "path": f"{terms}/{i}/matchExpressions/-", "value": off} for i in range(count)]
    )
    chart.wait_for(
        f"no agent pod on {node}", lambda: not chart.agent_pods(lab, node, ready=False), timeout=120
    )

    def undo() -> None:
        patch([
            {"op": "replace", "path": "/spec/template", "value": spec["template"]},
            {"op": "replace", "path": "/spec/updateStrategy", "value": spec["updateStrategy"]},
        ])  # fmt: skip
        chart.kubectl_ok(lab, "rollout", "status", "daemonset", chart.AGENT_DAEMONSET, "-n",
                         chart.AGENT_NAMESPACE, "--timeout=300s", timeout=330)  # fmt: skip

    return undo


def test_a_node_without_an_agent_is_not_taken_and_the_rollout_goes_on(
    installed: Lab, containerd_node: str, lab_specs: tuple[NodeSpec, ...]
) -> None:
    node = containerd_node
    other = next(s.name for s in lab_specs if s.runtime is LabRuntime.CONTAINERD_22 and s.kubelet == "1.37")
    undo = _keep_agent_off(installed, node)
    try:
        body = json.loads(chart.nodeconfig(True, name=NAME))
        body["spec"]["nodeSelector"] = {
            "matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node, other]}]
        }
        chart.kubectl_ok(installed, "apply", "-f", "-", stdin=json.dumps(body))
        cordoned: list[bool] = []

        def other_done() -> dict[str, Any]:
            cordoned.append(chart.cordoned(installed, node))
            # status lists only the nodes with something to say: a Done node is read from its own marks
            done = _annotations(installed, other).get(protocol.ANN_STATE) == protocol.NodeState.DONE.value
            return chart.node_status(installed, NAME, node) if done else {}

        try:
            entry = chart.wait_for(f"{other} Done beside the agent-less {node}", other_done, timeout=420)
        except Exception:
            print(chart.kubectl_ok(installed, "get", "nodeconfig", NAME, "-o", "yaml"))
            for name in (node, other):
                print(
                    name,
                    {k: v for k, v in _annotations(installed, name).items() if k.startswith(protocol.GROUP)},
                )
            print(chart.kubectl_ok(installed, "get", "pods", "-A", "-o", "wide"))
            raise
        print(f"{node}: {entry.get('state')}: {entry.get('reason')}")
        assert not any(cordoned), f"{node} was cordoned without an agent"
        reason = str(entry.get("reason", ""))
        assert "no live agent" in reason and "stopped" in reason, reason
        nodeconfig = chart.get_json(installed, "nodeconfig", NAME)
        progressing = next(
            cond for cond in nodeconfig["status"]["conditions"] if cond["type"] == "Progressing"
        )
        print("Progressing:", progressing["reason"], progressing["message"])
        assert node in progressing["message"] and "live eventedpleg agent" in progressing["message"]
        status = subprocess.run(
            [sys.executable, "-m", "eventedpleg", "status", NAME, "--kubeconfig", str(installed.kubeconfig)],
            capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        print(status.stdout)
        assert status.returncode == EXIT_PARTIAL, status.stderr  # a rollout not complete: one node waits
        assert any(node in line and "no live agent" in line for line in status.stdout.splitlines())
        started = time.monotonic()
        chart.delete_nodeconfig(installed, name=NAME, timeout=300)
        print(f"deleting the NodeConfig with an agent-less node took {time.monotonic() - started:.1f} s")
        assert not chart.cordoned(installed, node) and not chart.cordoned(installed, other)
    finally:
        undo()
        chart.wait_for(
            f"a live agent on {node} again",
            lambda: not hostcheck.absence(_annotations(installed, node).get(protocol.ANN_HOST_CHECK), _now()),
            timeout=180,
        )


def _now() -> datetime:
    return datetime.now(UTC)


# --- drop-in directories on their own mounts -----------------------------------------------------------
# The kubelet's drop-in directory as a mount of its own inside the node (made through nsenter, in the
# node's mount namespace, where its kubelet and the agent's host root see it): a read-only bind mount of
# itself, a tmpfs holding its files that is full, and a writable tmpfs holding its files. The agent writes
# in the directory itself, so the first two are refused with that filesystem's own errno (never a
# cross-device rename) and the third is written like any directory.
_STAGE = "/run/eventedpleg-lab-dropins"
MOUNTS = {
    "read-only": f"mount --bind {KUBELET_DROPIN_DIR} {KUBELET_DROPIN_DIR}"
    f" && mount -o remount,bind,ro {KUBELET_DROPIN_DIR}",
    "full": f"mkdir -p {_STAGE} && cp -a {KUBELET_DROPIN_DIR}/. {_STAGE}/"
    f" && mount -t tmpfs -o size=64k,mode=0755 eventedpleg-lab {KUBELET_DROPIN_DIR}"
    f" && cp -a {_STAGE}/. {KUBELET_DROPIN_DIR}/ && rm -rf {_STAGE}"
    # the kubelet reads only *.conf there: the filler is not configuration
    f" && {{ dd if=/dev/zero of={KUBELET_DROPIN_DIR}/zz-filler bs=4k 2>/dev/null || true; }}",
    "writable": f"mkdir -p {_STAGE} && cp -a {KUBELET_DROPIN_DIR}/. {_STAGE}/"
    f" && mount -t tmpfs -o size=1m,mode=0755 eventedpleg-lab {KUBELET_DROPIN_DIR}"
    f" && cp -a {_STAGE}/. {KUBELET_DROPIN_DIR}/ && rm -rf {_STAGE}",
}


def _in_node(lab: Lab, node: str, script: str) -> str:
    init = lab.init_pid(node)
    assert init is not None, f"{node} is not running"
    done = machine.nsenter(init, ["sh", "-c", script], timeout=60)
    assert done.returncode == 0, (script, done.stdout, done.stderr)
    return done.stdout


def _dropins(lab: Lab, node: str) -> str:
    """The drop-in directory as the node sees it (through its mount): each file's sha256."""
    return _in_node(lab, node, f"cd {KUBELET_DROPIN_DIR} && find . -type f | sort | xargs -r sha256sum")


@pytest.mark.parametrize("layout", list(MOUNTS))
def test_a_drop_in_directory_on_its_own_mount_is_written_or_refused_by_its_own_errno(
    installed: Lab, containerd_node: str, layout: str
) -> None:
    node = containerd_node
    clean = _as_before(installed, node)
    _in_node(installed, node, MOUNTS[layout])
    try:
        mounted = _in_node(installed, node, f"findmnt -n -o FSTYPE,OPTIONS {KUBELET_DROPIN_DIR}")
        print(f"{node}: {KUBELET_DROPIN_DIR} mounted: {mounted.strip()}")
        # A new agent pod: its host root is mounted with the node's mounts as they are now.
        _restart_agent(installed, node, lambda check: True, "a host check by an agent that sees the mount")
        before = _dropins(installed, node)
        assert protocol.ANN_STATE not in _annotations(
            installed, node
        )  # no report of an earlier test to be read
        _apply(installed, node)
        ends = {protocol.NodeState.SKIPPED.value, protocol.NodeState.ROLLED_BACK.value,
                protocol.NodeState.FAILED.value, protocol.NodeState.DONE.value}  # fmt: skip
        end = chart.wait_for(
            "the agent's report",
            lambda: ((s := _annotations(installed, node).get(protocol.ANN_STATE)) in ends and s) or "",
            timeout=420,
        )
        reason = _annotations(installed, node).get(protocol.ANN_REASON, "")
        print(f"{node}: {layout} drop-in directory: {end}: {reason}")
        assert "EXDEV" not in reason and "Traceback" not in chart.agent_log(installed, node)
        if layout == "writable":
            assert end == protocol.NodeState.DONE.value, reason
            assert c.KUBELET_DROPIN_NAME in _dropins(installed, node)
            chart.wait_for("the node given back", lambda: not chart.cordoned(installed, node), timeout=120)
            chart.delete_nodeconfig(installed, name=NAME, timeout=300)  # onDelete: Revert takes it off
            assert c.KUBELET_DROPIN_NAME not in _dropins(installed, node)
        else:
            assert end in (protocol.NodeState.SKIPPED.value, protocol.NodeState.ROLLED_BACK.value), reason
            code = {"read-only": errno.EROFS, "full": errno.ENOSPC}[layout]
            for word in (KUBELET_DROPIN, errno.errorcode[code], os.strerror(code)):
                assert word in reason, (word, reason)
            chart.wait_for("the node given back", lambda: not chart.cordoned(installed, node), timeout=120)
            assert _dropins(installed, node) == before  # nothing half-written, nothing left behind
            chart.delete_nodeconfig(installed, name=NAME, timeout=300)
    finally:
        _in_node(installed, node, f"umount {KUBELET_DROPIN_DIR}")
        _restart_agent(installed, node, clean, "the host check from before the test again")
