"""The product on real nodes, installed as an administrator installs it: the image built from the
Dockerfile and pushed with the packaged chart to the lab's registry, the chart installed from there with
`helm install oci://` and the image pinned by digest. The operator and agent pods run on the lab's nodes
and the agent uses the production host path (nsenter into the node's systemd, systemctl, journalctl, the
kubelet's /metrics). Then a NodeConfig rolls out to
Available while a Deployment guarded by a PodDisruptionBudget keeps serving, CRI-O gets its drop-in;
every node ends as docs/compatibility.md says; `eventedPleg: false` takes every drop-in away again.

Each rollout also takes a fault while a node is observably Draining (the web pods' preStop keeps a drain
going for seconds): the forward one has the Lease-holding operator pod force-deleted, the revert one has
the leading operator's process killed with SIGKILL from inside its node, as a node administrator would.
Both must still converge: nothing violated, nothing left cordoned or half-applied, the Lease led again.

The tests in this module run in order and share the installed product (the `installed` fixture);
test_lab_teardown.py uninstalls it."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg.core import hostcheck
from eventedpleg_lab import image, periodic, release
from eventedpleg_lab.demo.harness import NAMESPACE, chart_dir
from eventedpleg_lab.kube import workloads
from eventedpleg_lab.lab import chart, machine
from eventedpleg_lab.lab.lab import Lab, LabError
from eventedpleg_lab.lab.nodes import REGISTRY, NodeSpec
from eventedpleg_lab.localcluster import cluster as lc

pytestmark = [pytest.mark.lab, pytest.mark.slow]

ROLLOUT_TIMEOUT = 900.0
KUBELET_DROPIN = f"/etc/kubernetes/kubelet.conf.d/{c.KUBELET_DROPIN_NAME}"
CRIO_DROPIN = f"/{c.CRIO_DROPIN_DIR}/{c.CRIO_DROPIN_NAME}"


@dataclass
class Watch:
    """Samples taken every second while a rollout runs: Ready web pods, who holds the Lease, and the node
    each holder ran on when it was first seen holding it."""

    lab: Lab
    min_ready: int = 1_000
    holders: list[str] = field(default_factory=list)
    where: dict[str, str | None] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.wait(1.0):
            try:
                self.min_ready = min(self.min_ready, len(chart.ready_workload_pods(self.lab)))
                holder = chart.lease_holder(self.lab)
            except Exception:  # an API hiccup is not a sample
                continue
            if holder and (not self.holders or self.holders[-1] != holder):
                self.holders.append(holder)
            if holder and holder not in self.where:
                with contextlib.suppress(Exception):  # its pod may be gone already
                    self.where[holder] = chart.pod_node(self.lab, NAMESPACE, holder)


# A fault: (the lab, the Lease holder's pod) -> what was done. Raises when it could not be done.
Act = Callable[[Lab, str], str]


@dataclass
class Fault:
    """Done once, the first time a node is seen Draining with a web pod still on it (terminating or not:
    its preStop keeps that drain going for WORKLOAD_STOP_SECONDS) while some pod holds the Lease; then that
    node's state is read again: still Draining means the fault landed mid-drain. A node without a web pod
    is not chosen: its drain may be over at once, e.g. when the force-deleted leader was its only pod."""

    lab: Lab
    act: Act
    node: str = ""  # the node that was Draining
    victim: str = ""  # the Lease holder's pod
    done: str = ""  # what `act` did
    at: datetime | None = None
    state_after: str | None = None
    error: str = ""

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(0.3):
            try:
                draining = sorted(
                    name
                    for name, node in self.lab.nodes().items()
                    if node["metadata"].get("annotations", {}).get(protocol.ANN_STATE)
                    == protocol.NodeState.DRAINING.value
                )
                with_web = _web_pod_nodes(self.lab) if draining else set()  # one LIST per sample
                draining = [name for name in draining if name in with_web]
                holder = chart.lease_holder(self.lab) if draining else None
            except Exception:  # an API hiccup is not a sample
                continue
            if not draining or not holder:
                continue
            self.node, self.victim, self.at = draining[0], holder, datetime.now(UTC)
            try:
                self.done = self.act(self.lab, holder)
            except Exception as error:  # reported by the test
                self.error = f"{type(error).__name__}: {error}"
                return
            annotations = self.lab.nodes().get(self.node, {}).get("metadata", {}).get("annotations", {})
            self.state_after = annotations.get(protocol.ANN_STATE)
            return


def _web_pod_nodes(lab: Lab) -> set[str]:
    """The nodes any web pod is on, Ready, terminating or neither."""
    pods = chart.get_json(lab, "pods", "-n", chart.WORKLOAD_NAMESPACE, "-l", chart.WORKLOAD_SELECTOR)["items"]
    return {str(p["spec"]["nodeName"]) for p in pods if p["spec"].get("nodeName")}


def _rollout(lab: Lab, evented_pleg: bool, act: Act | None = None) -> tuple[dict[str, Any], Watch, Fault]:
    watch = Watch(lab)
    fault = Fault(lab, act or (lambda _lab, _pod: ""))
    threads = [threading.Thread(target=watch.run, daemon=True)]
    if act is not None:
        threads.append(threading.Thread(target=fault.run, args=(watch.stop,), daemon=True))
    for thread in threads:
        thread.start()
    try:
        chart.apply_nodeconfig(lab, evented_pleg)
        body = chart.wait_for("the NodeConfig to settle", lambda: chart.settled(lab), timeout=ROLLOUT_TIMEOUT)
    finally:
        watch.stop.set()
        for thread in threads:
            thread.join()
    assert body is not None
    return body, watch, fault


def _force_delete(lab: Lab, pod: str) -> str:
    chart.kubectl_ok(lab, "delete", "pod", pod, "-n", NAMESPACE, "--force", "--grace-period=0")
    return f"force-deleted {pod}"


def _kill_from_its_node(lab: Lab, pod: str) -> str:
    """SIGKILL the operator's process from inside the node its pod runs on (nsenter into the node's
    systemd, `kill -9`), as a node administrator would. The process is found by the pod's UID in its
    cgroup path (cgroupfs: pod<uid>, systemd driver: pod<uid with _>) and by being its container's
    PID 1; NSpid gives its PID in the node's own PID namespace."""
    body = chart.get_json(lab, "pod", pod, "-n", NAMESPACE)
    node, uid = body["spec"]["nodeName"], body["metadata"]["uid"]
    marks = (f"pod{uid}", f"pod{uid.replace('-', '_')}")
    found: list[tuple[int, int]] = []  # (host pid, pid in the node)
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if not any(mark in (proc / "cgroup").read_text() for mark in marks):
                continue
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            nspid = next(
                line.split()[1:]
                for line in (proc / "status").read_text().splitlines()
                if line.startswith("NSpid:")
            )
        except (OSError, StopIteration):
            continue
        if "eventedpleg" in cmdline and len(nspid) == 3 and nspid[-1] == "1":  # host, node, container
            found.append((int(proc.name), int(nspid[1])))
    if len(found) != 1:
        raise LabError(f"{pod} on {node}: want one operator process, found {found}")
    host_pid, node_pid = found[0]
    init = lab.init_pid(node)
    assert init is not None, node
    done = machine.nsenter(init, ["sh", "-c", f"kill -9 {node_pid}"])  # the shell's own kill
    if done.returncode != 0:
        raise LabError(f"kill -9 {node_pid} on {node}: {done.stderr.strip()}")
    chart.wait_for(f"pid {host_pid} to end", lambda: _ended(host_pid), timeout=10, interval=0.1)
    return f"kill -9 {node_pid} on {node} (host pid {host_pid}, {pod})"


def _ended(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _in_progress_or_half_applied(lab: Lab) -> list[str]:
    """Nodes still in a step (Draining, Applying, Verifying), Failed, or Done with a config other than the
    one asked for; and any node left cordoned."""
    found = []
    for name, node in lab.nodes().items():
        annotations = node["metadata"].get("annotations", {})
        state = annotations.get(protocol.ANN_STATE)
        if state in {"Draining", "Applying", "Verifying", "Failed"}:
            found.append(f"{name}: {state}")
        if state == protocol.NodeState.DONE.value and annotations.get(
            protocol.ANN_CURRENT
        ) != annotations.get(protocol.ANN_DESIRED):
            found.append(
                f"{name}: Done with {annotations.get(protocol.ANN_CURRENT)} "
                f"for {annotations.get(protocol.ANN_DESIRED)}"
            )
        if node["spec"].get("unschedulable"):
            found.append(f"{name}: cordoned")
    return found


def _operator_pods(lab: Lab) -> dict[str, dict[str, Any]]:
    pods = chart.get_json(lab, "pods", "-n", NAMESPACE)["items"]
    return {p["metadata"]["name"]: p for p in pods if not p["metadata"].get("deletionTimestamp")}


def _report(fault: Fault, watch: Watch) -> None:
    """What happened, in the test's output (pytest -rA shows it): the fault, and who held the Lease."""
    print(f"fault: {fault.done or fault.error} while {fault.node} was Draining (after: {fault.state_after})")
    print(
        f"Lease holders (pod, node): {[(h, watch.where.get(h)) for h in watch.holders]}; "
        f"min Ready web pods {watch.min_ready}"
    )


def _assert_fault_mid_drain(fault: Fault) -> None:
    assert not fault.error, fault.error
    assert fault.done, (
        "no node was seen Draining with a web pod on it while the Lease was held: the fault never ran"
    )
    assert fault.state_after == protocol.NodeState.DRAINING.value, (fault.node, fault.state_after, fault.done)


def _assert_lease_led_after(lab: Lab, fault: Fault) -> str:
    """The Lease is held by a live operator pod that renewed it after the fault; returns the holder."""
    lease = chart.get_json(lab, "lease", c.LEASE_NAME, "-n", NAMESPACE)["spec"]
    holder = lease.get("holderIdentity")
    assert holder in _operator_pods(lab), (holder, list(_operator_pods(lab)))
    renewed = datetime.fromisoformat(lease["renewTime"].replace("Z", "+00:00"))
    assert fault.at is not None and renewed > fault.at, (lease, fault.at)
    return str(holder)


def test_the_chart_runs_on_the_real_nodes(installed: Lab, lab_specs: tuple[NodeSpec, ...]) -> None:
    agents = chart.get_json(installed, "pods", "-n", chart.AGENT_NAMESPACE)["items"]
    assert sorted(p["spec"]["nodeName"] for p in agents) == sorted(s.name for s in lab_specs)
    operators = chart.get_json(installed, "pods", "-n", NAMESPACE)["items"]
    assert len(operators) == 2
    # Installed from the lab's registry with the image pinned by digest: each node pulled exactly it.
    ref = agents[0]["spec"]["containers"][0]["image"]
    assert ref.startswith(f"{REGISTRY}/{image.NAME}@sha256:"), ref
    digest = ref.split("@", 1)[1]
    crio = {s.name for s in lab_specs if s.runtime.is_crio}
    for pod in (*agents, *operators):
        assert pod["status"]["phase"] == "Running", pod["metadata"]["name"]
        assert pod["spec"]["containers"][0]["image"] == ref
        # containerd reports the repository digest it pulled; CRI-O may report the image's own ID instead
        # (seen in CI: the config digest, no repository), so there the reference by digest is the proof.
        if pod["spec"]["nodeName"] not in crio:
            assert pod["status"]["containerStatuses"][0]["imageID"].endswith(digest), pod["status"]
    holder = chart.lease_holder(installed)
    assert holder in {p["metadata"]["name"] for p in operators}


def test_rollout_reaches_available_on_real_nodes(installed: Lab, lab_specs: tuple[NodeSpec, ...]) -> None:
    """... with the Lease-holding operator pod force-deleted while a node is Draining."""
    before = chart.ready_workload_pods(installed)
    assert chart.lease_holder(installed) is not None
    body, watch, fault = _rollout(installed, evented_pleg=True, act=_force_delete)
    _report(fault, watch)
    _assert_fault_mid_drain(fault)
    conditions = chart.conditions(body)
    assert conditions.get("Available") == "True", body.get("status")
    assert chart.missing_benefits(installed, lab_specs) == []  # published after Done, so looked for here
    assert chart.outcome_problems(lab_specs, installed.nodes(), body) == []
    # Drains evicted through the PodDisruptionBudget: never fewer Ready web pods than it allows, and the
    # pods on drained nodes were replaced by pods elsewhere.
    assert watch.min_ready >= chart.WORKLOAD_MIN_AVAILABLE, watch.min_ready
    after = chart.ready_workload_pods(installed)
    assert len(after) == chart.WORKLOAD_REPLICAS
    done = {s.name for s in lab_specs if chart.expected_outcome(s).state == protocol.NodeState.DONE.value}
    moved = {pod for pod, node in before.items() if node in done}
    assert moved and not moved & set(after), (before, after)
    # Nothing in a step, half-applied or cordoned: the drain the force-delete interrupted was finished.
    assert _in_progress_or_half_applied(installed) == [], fault
    # A node its agent's host check refuses (a site drop-in turning pod events off) was never taken. On a
    # node the matrix calls Risky (lab-crio-off: CRI-O 1.34 under kubelet 1.36, cri-o#9663) the operator
    # skips it from its Node object alone and writes nothing on it; the agent's host check still names
    # the drop-in. Otherwise the operator skips it before the cordon, with the agent's own reason.
    nodes = installed.nodes()
    for spec in lab_specs:
        if spec.admin_pod_events_off:
            annotations = nodes[spec.name]["metadata"].get("annotations") or {}
            host = hostcheck.parse(annotations.get(protocol.ANN_HOST_CHECK))
            assert host is not None, annotations
            assert any("99-zz-site-policy.conf" in why for why in host.refusals.values()), host
            if chart.expected_outcome(spec).reason_has == "cri-o#9663":
                assert protocol.ANN_REASON not in annotations, annotations
                continue
            reason = annotations[protocol.ANN_REASON]
            assert reason.startswith("not cordoned: ") and "the agent's host check at" in reason, reason
    # The force-deleted leader's Lease went to another pod, which led to the end.
    # (The victim is the holder the fault itself read; the 1-s sampler may miss a holder that led for
    # less than a second, so the victim is not looked for in watch.holders.)
    final = _assert_lease_led_after(installed, fault)
    assert final != fault.victim, (final, fault.victim)
    # (No drain of ours evicts an operator pod, though they run on the nodes being drained:
    # test_lab_resilience.py checks that the leader keeps the Lease through its own node's steps.)


def test_the_released_cli_installed_with_pipx_reads_the_rollout(
    installed: Lab, lab_specs: tuple[NodeSpec, ...], released: release.ReleaseFiles, tmp_path: Path
) -> None:
    """The release's wheel installed as the README says (`pipx install`: a venv of its own, no repository,
    no lab package, no Go) and its `eventedpleg status` reading the rollout above from the lab: Available,
    every node in its expected state, exit code 0; then the same as `kubectl eventedpleg status -o json
    --context lab` (kubectl's plugin, another cluster the kubeconfig's current context)."""
    env = {**os.environ, "PIPX_HOME": str(tmp_path / "pipx"), "PIPX_BIN_DIR": str(tmp_path / "bin"),
           "PIPX_MAN_DIR": str(tmp_path / "man"), "PIPX_DEFAULT_PYTHON": sys.executable}  # fmt: skip
    env.pop("VIRTUAL_ENV", None)

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
                              timeout=600)  # fmt: skip

    done = run(sys.executable, "-m", "pipx", "install", str(released.wheel))
    assert done.returncode == 0, done.stdout + done.stderr
    venv_python = tmp_path / "pipx" / "venvs" / "evented-pleg-operator" / "bin" / "python"
    where = run(str(venv_python), "-c", "import importlib.util as u, eventedpleg as e; "
                "print(e.__file__, e.__version__, u.find_spec('eventedpleg_lab'))")  # fmt: skip
    assert where.returncode == 0, where.stderr
    module, version, lab_package = where.stdout.split()
    assert module.startswith(str(tmp_path / "pipx")), module  # the wheel's copy, not this checkout
    assert (version, lab_package) == (released.version, "None")
    status = run(str(tmp_path / "bin" / "eventedpleg"), "status", "--kubeconfig", str(installed.kubeconfig))
    print(status.stdout)
    assert status.returncode == 0, status.stdout + status.stderr
    lines = status.stdout.splitlines()
    assert any(line.split()[:2] == ["Available", "True"] for line in lines if line.strip()), status.stdout
    rows = {line.split()[0]: line for line in lines if line.strip()}
    for spec in lab_specs:
        assert chart.expected_outcome(spec).state in rows.get(spec.name, ""), (spec.name, status.stdout)
    # As kubectl's plugin, with kubectl's habits: a kubeconfig whose current context is another cluster
    # (unreachable), the lab's context named with --context, and -o json for a script.
    config = yaml.safe_load(installed.kubeconfig.read_text())
    (context,) = config["contexts"]
    config["clusters"].append({"name": "elsewhere", "cluster": {"server": "https://127.0.0.1:9"}})
    config["contexts"].append(
        {"name": "elsewhere", "context": {"cluster": "elsewhere", "user": context["context"]["user"]}}
    )
    config["current-context"] = "elsewhere"
    kubeconfig = tmp_path / "two-contexts.yaml"
    kubeconfig.write_text(yaml.safe_dump(config))
    plugin_env = {
        **env,
        "KUBECONFIG": str(kubeconfig),
        "PATH": f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}",
    }
    argv = [lc.kubectl_path(), "eventedpleg", "status", "-o", "json", "--context", context["name"]]
    shown = subprocess.run(argv, cwd=tmp_path, env=plugin_env, capture_output=True, text=True, check=False,
                           timeout=120)  # fmt: skip
    assert shown.returncode == 0, shown.stdout + shown.stderr
    document = json.loads(shown.stdout)
    print(json.dumps(document["nodeConfig"], indent=1)[:1500])
    available = {cond["type"]: cond["status"] for cond in document["nodeConfig"]["conditions"]}
    assert available.get("Available") == "True", document["nodeConfig"]
    states = {node["name"]: node["state"] for node in document["nodes"]}
    for spec in lab_specs:
        assert chart.expected_outcome(spec).state in states.get(spec.name, ""), (spec.name, states)


def test_the_crio_node_runs_with_pod_events(installed: Lab, lab_specs: tuple[NodeSpec, ...]) -> None:
    for spec in lab_specs:
        if not spec.runtime.is_crio:
            continue
        dropin = chart.on_node(installed, spec.name, "cat", CRIO_DROPIN)
        running = chart.on_node(installed, spec.name, "crio", "status", "config")
        if spec.admin_pod_events_off:  # refused before anything was written
            assert dropin == "" and "enable_pod_events = false" in running, spec.name
            continue
        assert "enable_pod_events = true" in dropin, spec.name
        assert "enable_pod_events = true" in running, spec.name  # the restarted daemon's own config
        evidence = installed.nodes()[spec.name]["metadata"]["annotations"][protocol.ANN_EVIDENCE]
        assert "kubelet_evented_pleg_connection_success_count" in evidence, evidence


def test_eventedpleg_false_reverts_every_node(installed: Lab, lab_specs: tuple[NodeSpec, ...]) -> None:
    """... with the leading operator's process killed (SIGKILL) from inside its node while a node is
    Draining: the container restarts or the standby takes over, and the revert converges."""
    body, watch, fault = _rollout(installed, evented_pleg=False, act=_kill_from_its_node)
    _report(fault, watch)
    _assert_fault_mid_drain(fault)
    assert chart.conditions(body).get("Available") == "True", body.get("status")
    assert watch.min_ready >= chart.WORKLOAD_MIN_AVAILABLE, watch.min_ready
    for spec in lab_specs:
        assert chart.on_node(installed, spec.name, "cat", KUBELET_DROPIN) == "", spec.name
        if spec.runtime.is_crio:
            assert chart.on_node(installed, spec.name, "cat", CRIO_DROPIN) == "", spec.name
            running = chart.on_node(installed, spec.name, "crio", "status", "config")
            assert "enable_pod_events = true" not in running, spec.name
    assert _in_progress_or_half_applied(installed) == [], fault
    # Someone led after the kill: the killed process's pod, restarted by its kubelet, or the standby.
    _assert_lease_led_after(installed, fault)


# Run by the host's Python inside a node's network namespace (nsenter -n): GET every address given, every
# 0.2 s, until stdin closes; one line per failed request, then "requests N".
PROBER = """
import socket, sys, threading, time
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
count = 0
while not stop.wait(0.2):
    for ip in sys.argv[1:]:
        count += 1
        try:
            with socket.create_connection((ip, 8080), timeout=1.0) as s:
                s.sendall(b"GET / HTTP/1.0\\r\\n\\r\\n")
                body = s.recv(4096)
            if b"200" not in body.split(b"\\r\\n", 1)[0]:
                print(time.time(), ip, "answered", body[:40], flush=True)
        except OSError as exc:
            print(time.time(), ip, "failed", exc, flush=True)
print("requests", count, flush=True)
"""


def _web_pods(lab: Lab) -> dict[str, tuple[str, str, str, int, str]]:
    """Web pod name -> (uid, node, container ID, restart count, pod IP)."""
    pods = chart.get_json(lab, "pods", "-n", chart.WORKLOAD_NAMESPACE, "-l", chart.WORKLOAD_SELECTOR)["items"]
    found = {}
    for pod in pods:
        if pod["metadata"].get("deletionTimestamp"):
            continue
        (status,) = pod["status"]["containerStatuses"]
        found[pod["metadata"]["name"]] = (
            pod["metadata"]["uid"],
            pod["spec"]["nodeName"],
            status["containerID"],
            status["restartCount"],
            pod["status"]["podIP"],
        )
    return found


def _in_place(lab: Lab, evented_pleg: bool) -> str:
    body = json.loads(chart.nodeconfig(evented_pleg))
    body["spec"]["drain"]["mode"] = "InPlace"
    return chart.kubectl_ok(lab, "apply", "-f", "-", stdin=json.dumps(body))


def test_in_place_keeps_every_container_and_every_endpoint_answering(
    installed: Lab, lab_specs: tuple[NodeSpec, ...]
) -> None:
    """drain.mode: InPlace, on and off again: no node is cordoned, no web pod is evicted or restarted (same
    pod UIDs and container IDs, restart counts unchanged) and each of the web Service's endpoints answers
    HTTP every 0.2 s throughout, asked from a node the rollout skips (there is no kube-proxy in the lab,
    so each endpoint is asked directly; the Service's EndpointSlice never loses a ready endpoint)."""
    done = {s.name for s in lab_specs if chart.expected_outcome(s).state == protocol.NodeState.DONE.value}
    prober_node = next(s.name for s in lab_specs if s.name not in done)
    chart.kubectl_ok(installed, "-n", chart.WORKLOAD_NAMESPACE, "expose", "deploy/web", "--port=8080")
    before = _web_pods(installed)
    assert {node for _, node, *_ in before.values()} & done, before  # a web pod on a node updated in place
    init = installed.init_pid(prober_node)
    assert init is not None
    prober = subprocess.Popen(
        ["nsenter", "-t", str(init), "-n", sys.executable, "-c", PROBER, *(ip for *_, ip in before.values())],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    cordoned: set[str] = set()
    least_ready = len(before)

    def sample() -> None:
        nonlocal least_ready
        with contextlib.suppress(Exception):  # an API hiccup is not a sample
            cordoned.update(n for n, body in installed.nodes().items() if body["spec"].get("unschedulable"))
            slices = chart.get_json(installed, "endpointslices", "-n", chart.WORKLOAD_NAMESPACE)["items"]
            ready = sum(
                1 for s in slices for e in s.get("endpoints") or [] if e.get("conditions", {}).get("ready")
            )
            least_ready = min(least_ready, ready)

    try:
        with periodic.every(0.5, sample):
            for evented_pleg in (True, False):
                _in_place(installed, evented_pleg)
                body = chart.wait_for(
                    "the NodeConfig to settle", lambda: chart.settled(installed), timeout=ROLLOUT_TIMEOUT
                )
                assert body is not None
                assert chart.conditions(body).get("Available") == "True", body.get("status")
                nodes = installed.nodes()
                for name in done:
                    annotations = nodes[name]["metadata"]["annotations"]
                    assert annotations[protocol.ANN_STATE] == protocol.NodeState.DONE.value, (
                        name,
                        annotations,
                    )
                    assert annotations[protocol.ANN_REASON], name
    finally:
        out, _ = prober.communicate("", timeout=30)
        chart.kubectl_ok(installed, "-n", chart.WORKLOAD_NAMESPACE, "delete", "service", "web")
    print(f"in place: web pods {before}; prober from {prober_node}: {out.strip()[-400:]}")
    print(f"in place: least ready endpoints {least_ready}, nodes cordoned {sorted(cordoned)}")
    assert cordoned == set(), cordoned
    assert _web_pods(installed) == before  # same pods, same containers, no restart
    failures = [line for line in out.splitlines() if not line.startswith("requests ")]
    assert failures == [], failures
    assert int(out.split("requests ")[-1]) > 100, out  # it asked all along
    assert least_ready == len(before), least_ready


def _pinned_database(node: str) -> str:
    """One replica on `node` under a PodDisruptionBudget with maxUnavailable: 0: no eviction is ever
    allowed while it stands, so a drain of that node could never finish."""
    labels = {"app": "db"}
    pod_spec = chart.idle_pod_spec("db", [node], grace=1)
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "db", "namespace": chart.WORKLOAD_NAMESPACE},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": labels}},
    }
    items = [
        workloads.deployment("db", chart.WORKLOAD_NAMESPACE, replicas=1, pod_spec=pod_spec, labels=labels)
    ]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [*items, budget]})


def test_a_node_whose_drain_could_never_finish_is_reported_and_never_cordoned(
    installed: Lab, lab_specs: tuple[NodeSpec, ...]
) -> None:
    """A Deployment on one node with a PodDisruptionBudget of maxUnavailable: 0: with the default
    drain.onBlocked (Skip) that node is reported by pod and PDB name and Skipped without a cordon; the
    other nodes are Done."""
    done = [s.name for s in lab_specs if chart.expected_outcome(s).state == protocol.NodeState.DONE.value]
    pinned = done[0]
    chart.kubectl_ok(installed, "apply", "-f", "-", stdin=_pinned_database(pinned))
    try:
        chart.kubectl_ok(installed, "-n", chart.WORKLOAD_NAMESPACE, "rollout", "status", "deploy/db",
            "--timeout=120s", timeout=150)  # fmt: skip
        chart.wait_for(  # the disruption controller has counted the pod: the budget says 0 allowed
            "the db PDB's status",
            lambda: (
                chart.get_json(installed, "pdb", "db", "-n", chart.WORKLOAD_NAMESPACE)
                .get("status", {})
                .get("currentHealthy")
            ),
            timeout=60,
        )
        # What a user sees first: preflight, with the rollout paused (the lab's NodeConfig turning it on).
        paused = json.loads(chart.nodeconfig(True))
        paused["spec"]["rollout"]["paused"] = True
        chart.kubectl_ok(installed, "apply", "-f", "-", stdin=json.dumps(paused))
        env = {**os.environ, "KUBECONFIG": str(installed.kubeconfig)}
        preflight = [sys.executable, "-m", "eventedpleg", "preflight", "--nodeconfig", chart.NODECONFIG]
        looked = subprocess.run([*preflight, "-o", "wide"], capture_output=True, text=True, timeout=120,
            check=False, env=env)  # fmt: skip
        print(looked.stdout)
        assert looked.returncode == 3, looked.stderr  # some selected nodes will not be taken
        rows = json.loads(
            subprocess.run(
                [*preflight, "-o", "json"], capture_output=True, text=True, timeout=120, check=False, env=env
            ).stdout
        )  # fmt: skip (exit 3 again: the output is the same)
        never = {r["node"]: r["drain"]["neverFinishes"] for r in rows if r["drain"]["neverFinishes"]}
        assert list(never) == [pinned] and f"{chart.WORKLOAD_NAMESPACE}/db" in never[pinned], never
        refused = {r["node"] for r in rows if r["host"] and r["host"]["refusal"]}  # the agents' host checks
        assert {s.name for s in lab_specs if s.admin_pod_events_off} <= refused, rows
        assert not refused & set(done), rows
        cordoned: set[str] = set()

        def sample() -> None:
            with contextlib.suppress(Exception):  # an API hiccup is not a sample
                nodes = installed.nodes()
                cordoned.update(n for n, body in nodes.items() if body["spec"].get("unschedulable"))

        with periodic.every(0.5, sample):
            body, _, _ = _rollout(installed, evented_pleg=True)
        assert chart.conditions(body).get("Available") == "True", body.get("status")
        annotations = installed.nodes()[pinned]["metadata"]["annotations"]
        reason = annotations[protocol.ANN_REASON]
        print(f"{pinned}: {annotations[protocol.ANN_STATE]}: {reason}")
        assert annotations[protocol.ANN_STATE] == protocol.NodeState.SKIPPED.value, annotations
        assert reason.startswith("not cordoned") and f"{chart.WORKLOAD_NAMESPACE}/db" in reason, reason
        assert pinned not in cordoned, cordoned  # never taken, not even for a moment
        for name in done[1:]:
            assert installed.nodes()[name]["metadata"]["annotations"][protocol.ANN_STATE] == "Done", name
    finally:
        chart.kubectl_ok(installed, "-n", chart.WORKLOAD_NAMESPACE, "delete", "deploy/db", "pdb/db",
            "--wait=true", timeout=120)  # fmt: skip


# The field the next chart version's CRD gains in test_helm_upgrade_mid_rollout (a string, no default).
NEXT_FIELD = "upgradeNote"


@dataclass
class _UpgradeInAStep:
    """Sampled every 0.5 s during a rollout: each node's state sequence (repeats folded), and `helm *argv`
    run once, as soon as a node is in a step (Draining, Applying, Verifying)."""

    lab: Lab
    argv: tuple[str, ...]
    states: dict[str, list[str]] = field(default_factory=dict)
    upgraded: list[str] = field(default_factory=list)  # "node state: helm's first line", once

    def sample(self) -> None:
        in_step = {
            protocol.NodeState.DRAINING.value,
            protocol.NodeState.APPLYING.value,
            protocol.NodeState.VERIFYING.value,
        }
        try:
            nodes = self.lab.nodes()
        except Exception:  # an API hiccup is not a sample
            return
        for name, node in nodes.items():
            state = node["metadata"].get("annotations", {}).get(protocol.ANN_STATE, "-")
            seen = self.states.setdefault(name, [])
            if not seen or seen[-1] != state:
                seen.append(state)
            if state in in_step and not self.upgraded:
                out = chart.helm(self.lab, *self.argv)
                self.upgraded.append(f"{name} {state}: {out.strip().splitlines()[0]}")

    def assert_converged(self, body: dict[str, Any], watch: Watch) -> None:
        """helm upgraded mid-step, and the rollout still reached Available with the PDB kept, nothing left
        in a step, and no node drained twice."""
        assert self.upgraded and "has been upgraded" in self.upgraded[0], self.upgraded
        assert chart.conditions(body).get("Available") == "True", body.get("status")
        assert watch.min_ready >= chart.WORKLOAD_MIN_AVAILABLE, watch.min_ready
        assert _in_progress_or_half_applied(self.lab) == []
        for name, seq in self.states.items():  # the upgrade neither lost a node nor had one taken twice
            assert seq.count(protocol.NodeState.DRAINING.value) <= 1, (name, seq)


def _next_chart(directory: Path, version: str) -> Path:
    """The chart as the next release ships it: version `version` (same appVersion and image) and a CRD
    whose spec gained NEXT_FIELD."""
    source = chart_dir()
    copy = directory / source.name
    shutil.copytree(source, copy)
    meta = yaml.safe_load((copy / "Chart.yaml").read_text())
    meta["version"] = version
    (copy / "Chart.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    crd_file = copy / "files" / "crds" / "nodeconfig.yaml"
    crd = yaml.safe_load(crd_file.read_text())
    (served,) = crd["spec"]["versions"]
    spec = served["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"][NEXT_FIELD] = {"type": "string", "description": "Gained by the next chart version."}
    crd_file.write_text(yaml.safe_dump(crd, sort_keys=False))
    return copy


def test_helm_upgrade_mid_rollout_keeps_the_rollout_and_the_nodeconfig(
    installed: Lab, lab_specs: tuple[NodeSpec, ...], tmp_path: Path
) -> None:
    """`helm upgrade` from the lab's registry to the next chart version, whose CRD gained a field, while
    a node is in a step of the rollout (the revert of the last test's): the operator's and every agent's
    pods are replaced (the chart's version label is in their templates), the rollout still converges
    with no node taken twice, the NodeConfig keeps its spec, and the API server accepts the new field.
    The image stays the same digest: the operator this test runs knows no `upgradeNote`, so the field
    is checked by a server-side dry run, not stored."""
    meta = ("get", "metadata", chart.RELEASE, "-n", NAMESPACE, "-o", "json")
    current = json.loads(chart.helm(installed, *meta))
    nxt = semver_next(current["version"])
    reference = chart.push_chart(installed, _next_chart(tmp_path, nxt), tmp_path)
    before = chart.get_json(installed, "nodeconfig", chart.NODECONFIG)
    upgrade = _UpgradeInAStep(installed, ("upgrade", chart.RELEASE, reference, f"--version={nxt}",
        "--plain-http", "-n", NAMESPACE, "--reuse-values"))  # fmt: skip
    states, upgraded = upgrade.states, upgrade.upgraded
    with periodic.every(0.5, upgrade.sample):
        body, watch, _ = _rollout(installed, evented_pleg=False)
    print(f"helm upgrade while {upgraded}")
    print("\n".join(f"{name}: {' -> '.join(seq)}" for name, seq in sorted(states.items())))
    upgrade.assert_converged(body, watch)
    for spec in lab_specs:
        assert chart.on_node(installed, spec.name, "cat", KUBELET_DROPIN) == "", spec.name
    # The release is the next version, and once its pods are rolled every pod runs its templates.
    now = json.loads(chart.helm(installed, *meta))
    assert (now["version"], now["revision"]) == (nxt, current["revision"] + 1), now
    for kind, namespace in (("deployments", NAMESPACE), ("daemonsets", chart.AGENT_NAMESPACE)):
        for item in chart.get_json(installed, kind, "-n", namespace)["items"]:
            what = f"{kind}/{item['metadata']['name']}"
            chart.kubectl_ok(installed, "-n", namespace, "rollout", "status", what, "--timeout=300s",
                timeout=330)  # fmt: skip
    for namespace in (NAMESPACE, chart.AGENT_NAMESPACE):
        for pod in chart.get_json(installed, "pods", "-n", namespace)["items"]:
            if pod["metadata"].get("deletionTimestamp") is None:
                assert pod["metadata"]["labels"]["helm.sh/chart"] == f"{chart_dir().name}-{nxt}", pod[
                    "metadata"
                ]
    # The NodeConfig kept its uid and its spec (only eventedPleg changed, by the revert).
    after = chart.get_json(installed, "nodeconfig", chart.NODECONFIG)
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert {**before["spec"], "eventedPleg": False} == after["spec"], (before["spec"], after["spec"])
    # The served CRD has the new field: a server-side dry run keeps it (an unknown field would be pruned).
    with_field = {k: after[k] for k in ("apiVersion", "kind")}
    with_field |= {"metadata": {"name": chart.NODECONFIG}, "spec": {**after["spec"], NEXT_FIELD: "next"}}
    dry = json.loads(chart.kubectl_ok(installed, "apply", "--dry-run=server", "-o", "json", "-f", "-",
        stdin=json.dumps(with_field)))  # fmt: skip
    assert dry["spec"][NEXT_FIELD] == "next", dry["spec"]


def semver_next(version: str) -> str:
    major, minor, patch = version.split("-", 1)[0].split(".")
    return f"{major}.{minor}.{int(patch) + 1}"


@contextlib.contextmanager
def _registry_unreachable(lab: Lab) -> Iterator[int]:
    """The lab's registry process stopped (connections refused), started again on the way out."""
    with lc.component_down(lab.cluster_dir, "registry", ready_url=f"http://{REGISTRY}/v2/") as pid:
        yield pid


def _pods(lab: Lab) -> dict[str, dict[str, Any]]:
    """uid -> pod, of the operator's Deployment and the agent DaemonSet (not `helm test`'s)."""
    found: dict[str, dict[str, Any]] = {}
    for namespace in (NAMESPACE, chart.AGENT_NAMESPACE):
        listed = chart.get_json(
            lab, "pods", "-n", namespace, "-l", "app.kubernetes.io/component in (operator,agent)"
        )
        for pod in listed["items"]:
            found[pod["metadata"]["uid"]] = pod
    return found


def _ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(cond["type"] == "Ready" and cond["status"] == "True" for cond in conditions)


def _template(pod: dict[str, Any]) -> tuple[str, str]:
    """(namespace, the hash of its pod template: its ReplicaSet's, or its DaemonSet revision's)."""
    labels = pod["metadata"]["labels"]
    revision = labels.get("pod-template-hash") or labels.get("controller-revision-hash", "")
    return pod["metadata"]["namespace"], revision


def test_helm_upgrade_while_the_registry_is_unreachable_keeps_the_old_pods_and_the_rollout(
    installed: Lab, lab_specs: tuple[NodeSpec, ...]
) -> None:
    """`helm upgrade` (chart from disk) to an image the nodes cannot pull, with the registry down
    (connections refused), while a node is in a step of a rollout: the old operator and agent pods keep
    running (the Deployment and the agent DaemonSet both surge: an old pod goes only once its
    replacement is Ready), the new pods wait on their image, and the rollout completes with no node
    taken twice. (The rollout's drains may evict an operator pod: its old ReplicaSet replaces it, from
    the image the node already has.) Then the registry is back and `helm rollback` returns the release
    to the old pods only."""
    before = [pod for pod in _pods(installed).values() if _ready(pod)]
    old = {_template(pod) for pod in before}
    meta = ("get", "metadata", chart.RELEASE, "-n", NAMESPACE, "-o", "json")
    revision = json.loads(chart.helm(installed, *meta))["revision"]
    unpullable = "sha256:" + "e" * 64
    upgrade = _UpgradeInAStep(installed, ("upgrade", chart.RELEASE, str(chart_dir()), "-n", NAMESPACE,
        "--reuse-values", f"--set=image.digest={unpullable}"))  # fmt: skip
    states, upgraded = upgrade.states, upgrade.upgraded

    try:
        with _registry_unreachable(installed):
            with periodic.every(0.5, upgrade.sample):
                body, watch, _ = _rollout(installed, evented_pleg=True)
            after = [p for p in _pods(installed).values() if p["metadata"].get("deletionTimestamp") is None]
    finally:
        print(f"helm upgrade while {upgraded}")
        print("\n".join(f"{name}: {' -> '.join(seq)}" for name, seq in sorted(states.items())))
    new = {
        pod["metadata"]["name"]: [
            (status.get("state", {}).get("waiting") or {}).get("reason")
            for status in pod["status"].get("containerStatuses", [])
        ]
        for pod in after
        if _template(pod) not in old
    }
    print(f"pods of the new templates while the registry was unreachable: {new}")
    upgrade.assert_converged(body, watch)
    # Every node taken ended Done: read from the nodes now, not from the last 0.5 s sample, which a slow
    # kubectl on a busy machine may take before the agent's last write (seen: Verifying, then Available).
    final = {
        name: node["metadata"].get("annotations", {}).get(protocol.ANN_STATE)
        for name, node in installed.nodes().items()
    }
    for name, seq in states.items():
        assert protocol.NodeState.DRAINING.value not in seq or final[name] == protocol.NodeState.DONE.value, (
            name,
            seq,
            final,
        )
    assert any(protocol.NodeState.DRAINING.value in seq for seq in states.values()), states
    # As many Ready pods of the old templates as before, in each namespace; none of the new ones Ready.
    for namespace in (NAMESPACE, chart.AGENT_NAMESPACE):
        was = [p for p in before if p["metadata"]["namespace"] == namespace]
        now = [
            p for p in after if _template(p) in old and _ready(p) and p["metadata"]["namespace"] == namespace
        ]
        assert len(now) == len(was), (namespace, [p["metadata"]["name"] for p in now])
    agents_on = {p["spec"]["nodeName"] for p in after if _template(p) in old and _ready(p)}
    assert set(installed.nodes()) <= agents_on
    assert new, "the upgrade made no new pod"
    assert not any(_ready(p) for p in after if _template(p) not in old), new
    # The registry is back: `helm rollback` returns to the old templates; every pod is an old one.
    chart.helm(installed, "rollback", chart.RELEASE, str(revision), "-n", NAMESPACE, "--wait",
        "--timeout=300s", timeout=330)  # fmt: skip
    for kind, namespace in (("deployments", NAMESPACE), ("daemonsets", chart.AGENT_NAMESPACE)):
        for item in chart.get_json(installed, kind, "-n", namespace)["items"]:
            what = f"{kind}/{item['metadata']['name']}"
            chart.kubectl_ok(installed, "-n", namespace, "rollout", "status", what, "--timeout=300s",
                timeout=330)  # fmt: skip
    # (Pod specs, not statuses: CRI-O reports the image's ID where containerd reports its repo digest.)
    pods = [p for p in _pods(installed).values() if p["metadata"].get("deletionTimestamp") is None]
    images = {container["image"] for pod in pods for container in pod["spec"]["containers"]}
    assert len(images) == 1 and not next(iter(images)).endswith(unpullable), images
    assert all(_ready(pod) for pod in pods), [p["metadata"]["name"] for p in pods if not _ready(p)]
