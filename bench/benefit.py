"""What does Evented PLEG save? A benchmark on real kubelets (not a test).

CPU/relist benchmark, for each N in --pods and --repeats rounds of gate off, gate on (ABAB...):
  1. N idle pods, started with the gate off;
  2. the gate written, then the node's daemons restarted (every phase restarts them, so both arms pay the
     same restart);
  3. warm up --warmup seconds, then a fixed --window: deltas of
     - utime+stime(+children) of the kubelet, the runtime and its per-container helpers (/proc/<pid>/stat);
     - the kubelet's process_cpu_seconds_total (cross-check), kubelet_pleg_relist_interval_seconds and
       kubelet_pleg_relist_duration_seconds (sum, count, buckets);
     - the runtime's CRI calls per method;
     - the machine's load average and busy cores over the window (the machine may be shared).
Two nodes to run it on:
  --runtime containerd (default): the real-node rig (docs/realnode.md), kubelet --kubelet + containerd 2.2:
     N idle hostNetwork static pods (no duplicate containers, docs/realnode.md); the gate is the kubelet's
     drop-in, the kubelet is restarted; helpers = containerd-shim-runc-v2; CRI calls from containerd's
     grpc_server_handled_total (metrics address 127.0.0.1:1338).
  --runtime crio: a lab CRI-O node (docs/lab.md; by default --lab-nodes lab-crio:1.36:crio-1.34, kubelet
     v1.36.4 + CRI-O v1.34.0, conmon and runc from Debian; the bench writes the drop-ins itself), brought
     up for the run unless --lab-dir names a lab that is up: N idle pods of a Deployment pinned to the
     node; the gate is the product's own two drop-ins (kubelet featureGates EventedPLEG, CRI-O
     enable_pod_events), then crio is restarted, then the kubelet; helpers = conmon; CRI calls from CRI-O's
     container_runtime_crio_operations_total{operation} (a bench drop-in sets enable_metrics on the node's
     address); the kubelet's /metrics through the API server's node proxy.
Exit latency (--latency; rig, kubelet v1.37 by default): SIGKILL a container's process and time until the
kubelet's sync loop gets the ContainerDied PLEG event (`SyncLoop (PLEG): event for pod`), gate off vs on.

    .venv/bin/python bench/benefit.py --kubelet 1.36 --pods 0,50,100 --repeats 3 --warmup 300 --window 900
    .venv/bin/python bench/benefit.py --runtime crio --pods 0,30 --repeats 2 --warmup 60 --window 180
    .venv/bin/python bench/benefit.py --latency --kubelet 1.37 --kills 20
    .venv/bin/python bench/benefit.py --plot bench/results/<file>.json     # PNG + markdown table

Results: bench/results/<kind>[-<runtime>]-v<kubelet>.json (kind: cpu or latency), the headline file of
each measurement, rewritten by every run (`started` inside says when; --out writes elsewhere). Needs
root, and the rig's binaries (`eventedpleg realnode build`) or the lab's (`eventedpleg lab up` builds
what is missing).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from eventedpleg import constants as c
from eventedpleg.core.node.facts.promtext import Metrics, parse_metrics
from eventedpleg.core.render import KUBELET_TEMPLATE, render_file
from eventedpleg.core.runtimes import CRIO_TEMPLATE
from eventedpleg_lab.kube import workloads
from eventedpleg_lab.lab import chart, machine
from eventedpleg_lab.lab.lab import Lab, LabError
from eventedpleg_lab.lab.nodes import NodeSpec, parse
from eventedpleg_lab.realnode import config as cfg
from eventedpleg_lab.realnode import layout as lay
from eventedpleg_lab.realnode import rig as rn
from eventedpleg_lab.realnode.host import line_time, read_since
from eventedpleg_lab.realnode.images import IDLE_IMAGE

RESULTS = Path(__file__).resolve().parent / "results"
CLK_TCK = os.sysconf("SC_CLK_TCK")
KUBELET_METRICS = f"http://127.0.0.1:{cfg.READ_ONLY_PORT}/metrics"
CONTAINERD_METRICS = f"http://{cfg.CONTAINERD_METRICS}/v1/metrics"
RUNTIMES = {
    "containerd": "containerd v2.2.9 (runc 1.1.5, Debian)",
    "crio": "CRI-O v1.34.0 (conmon 2.1.6, runc 1.1.5, Debian)",
}


def log(message: str) -> None:
    print(f"[bench {datetime.now(UTC):%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def cpu_seconds(pid: int) -> float | None:
    """utime+stime+cutime+cstime of a process (fields 14-17 of /proc/<pid>/stat)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return sum(int(f) for f in fields[11:15]) / CLK_TCK


def scrape(url: str) -> Metrics | None:
    try:
        with urllib.request.urlopen(url, timeout=15) as resp:  # noqa: S310 - fixed loopback URLs
            return parse_metrics(resp.read().decode())
    except OSError:
        return None


def _delta(a: Metrics | None, b: Metrics | None, name: str, **labels: str) -> float | None:
    if a is None or b is None:
        return None
    x, y = a.value(name, **labels), b.value(name, **labels)
    return None if x is None or y is None else y - x


def _buckets(a: Metrics, b: Metrics, name: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for sample in b.find(name + "_bucket"):
        le = sample.label("le") or "?"
        before = a.value(name + "_bucket", le=le) or 0.0
        out[le] = sample.value - before
    return out


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields) - idle) / CLK_TCK, sum(fields) / CLK_TCK


@dataclass(frozen=True)
class Sample:
    """One reading of a node: CPU seconds per daemon, per helper process (shims / conmon), the kubelet's
    and the runtime's metrics, the machine's load."""

    cpu: dict[str, float | None]
    helpers: dict[int, float | None]
    kubelet_pid: int | None
    kubelet: Metrics | None
    runtime: Metrics | None
    at: float = field(default_factory=time.monotonic)
    load1: float = field(default_factory=lambda: os.getloadavg()[0])
    machine: tuple[float, float] = field(default_factory=machine_cpu)


class Node(Protocol):
    """What the CPU benchmark drives: the rig's node or the lab's CRI-O node."""

    runtime: str  # the runtime daemon's name in results ("containerd", "crio")

    def set_gate(self, gate: bool) -> None: ...  # write the gate, restart what must restart

    def wait_pods(self, pods: int) -> None: ...

    def sample(self) -> Sample: ...

    def cri_calls(self, first: Metrics, second: Metrics) -> dict[str, float | None]: ...

    def containers(self) -> list[dict[str, Any]]: ...  # `crictl ps -o json` containers


def _cpu_of(pids: dict[str, int | None]) -> dict[str, float | None]:
    return {name: cpu_seconds(pid) if pid else None for name, pid in pids.items()}


class RigNode:
    """The real-node rig: kubelet + containerd 2.2 under the rig's supervisor, static pods."""

    runtime = "containerd"

    def __init__(self, node: rn.RealNode, kubelet: str) -> None:
        self.node, self.kubelet = node, kubelet

    def up(self, pods: int) -> None:
        self.node.up(
            rn.RigSpec(kubelet=self.kubelet, runtime=cfg.RigRuntime.CONTAINERD_22, pods=pods, gate=False)
        )

    def set_gate(self, gate: bool) -> None:
        self.node.write_gate(gate)
        self.node.restart_kubelet()

    def wait_pods(self, pods: int) -> None:
        self.node.wait_pods(pods, timeout=600)

    def sample(self) -> Sample:
        kubelet = self.node.sup.pid(rn.KUBELET)
        return Sample(
            cpu=_cpu_of({"kubelet": kubelet, "containerd": self.node.sup.pid(rn.CONTAINERD)}),
            helpers={pid: cpu_seconds(pid) for pid in self.node.our_shims()},
            kubelet_pid=kubelet,
            kubelet=scrape(KUBELET_METRICS),
            runtime=scrape(CONTAINERD_METRICS),
        )

    def cri_calls(self, first: Metrics, second: Metrics) -> dict[str, float | None]:
        service = "runtime.v1.RuntimeService"
        methods = {
            s.label("grpc_method") or ""
            for s in second.find("grpc_server_handled_total")
            if s.label("grpc_service") == service
        }
        return {
            m: _delta(first, second, "grpc_server_handled_total", grpc_service=service, grpc_method=m)
            for m in sorted(methods)
        }

    def containers(self) -> list[dict[str, Any]]:
        return self.node.containers()


def measure(node: Node, first: Sample, second: Sample) -> dict[str, Any]:
    seconds = second.at - first.at
    out: dict[str, Any] = {"seconds": round(seconds, 1)}
    cores: dict[str, float | None] = {}
    for name in first.cpu:
        a, b = first.cpu[name], second.cpu.get(name)
        cores[name] = None if a is None or b is None else (b - a) / seconds
    helper_cpu = [
        (second.helpers[p] or 0.0) - (first.helpers[p] or 0.0) for p in second.helpers if p in first.helpers
    ]
    cores["shims"] = sum(helper_cpu) / seconds
    out["cpu_cores"] = cores
    out["shims"] = len(second.helpers)
    busy = second.machine[0] - first.machine[0]
    out["machine"] = {
        "load1": [round(first.load1, 2), round(second.load1, 2)],
        "busy_cores": round(busy / seconds, 2),
    }
    if first.kubelet_pid != second.kubelet_pid:
        out["error"] = "the kubelet restarted during the window"
    k1, k2 = first.kubelet, second.kubelet
    proc = _delta(k1, k2, "process_cpu_seconds_total")
    out["kubelet_process_cpu_cores"] = None if proc is None else proc / seconds
    relist: dict[str, Any] = {}
    for metric in ("kubelet_pleg_relist_interval_seconds", "kubelet_pleg_relist_duration_seconds"):
        count = _delta(k1, k2, metric + "_count")
        total = _delta(k1, k2, metric + "_sum")
        relist[metric] = {
            "count": count,
            "sum": total,
            "mean": (total / count) if count and total is not None else None,
            "buckets": _buckets(k1, k2, metric) if k1 is not None and k2 is not None else {},
        }
    out["relist"] = relist
    out["evented"] = {
        name: (k2.value(name) if k2 is not None else None)
        for name in (
            "kubelet_evented_pleg_connection_success_count",
            "kubelet_evented_pleg_connection_error_count",
        )
    }
    out["evented"]["latency_count_delta"] = _delta(
        k1, k2, "kubelet_evented_pleg_connection_latency_seconds_count"
    )
    cri: dict[str, float | None] = {}
    if first.runtime is not None and second.runtime is not None:
        cri = node.cri_calls(first.runtime, second.runtime)
    out["cri_calls"] = cri
    out["cri_calls_per_minute"] = {m: (v or 0.0) * 60 / seconds for m, v in cri.items()}
    return out


def phase(node: Node, pods: int, gate: bool, warmup: float, window: float) -> dict[str, Any]:
    node.set_gate(gate)
    node.wait_pods(pods)
    log(f"N={pods} gate={'on' if gate else 'off'}: warm-up {warmup:.0f}s, window {window:.0f}s")
    time.sleep(warmup)
    first = node.sample()
    time.sleep(window)
    second = node.sample()
    result = measure(node, first, second)
    containers = node.containers()
    result.update(pods=pods, gate=gate, containers=len(containers))
    result["duplicates"] = duplicate_containers(containers)
    return result


def duplicate_containers(containers: list[dict[str, Any]]) -> int:
    """Running containers beyond one per (pod, container name): the static-pod bug (k8s#123087)."""
    seen: dict[tuple[str, str], int] = {}
    for ctr in containers:
        labels = ctr.get("labels", {})
        key = (labels.get("io.kubernetes.pod.name", ""), labels.get("io.kubernetes.container.name", ""))
        seen[key] = seen.get(key, 0) + 1
    return sum(n - 1 for n in seen.values() if n > 1)


def abab(node: Node, args: argparse.Namespace, up: Callable[[int], None]) -> list[dict[str, Any]]:
    """For each N: `up(N)` (N pods, gate off), then --repeats rounds of gate off, gate on."""
    runs: list[dict[str, Any]] = []
    for pods in args.pods:
        log(f"N={pods}: bringing the pods up (they start with the gate off)")
        up(pods)
        for rep in range(args.repeats):
            for gate in (False, True):
                result = phase(node, pods, gate, args.warmup, args.window)
                result["round"] = rep
                runs.append(result)
                k = result["cpu_cores"]["kubelet"]
                r = result["cpu_cores"].get(node.runtime)
                relists = result["relist"]["kubelet_pleg_relist_interval_seconds"]["count"]
                log(
                    f"  -> kubelet {1000 * (k or 0):.1f}m, {node.runtime} {1000 * (r or 0):.1f}m, "
                    f"relists {relists}, dup {result['duplicates']}, load {result['machine']['load1']}"
                )
    return runs


def cpu_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    if args.runtime == "crio":
        return crio_benchmark(args)
    real = rn.RealNode(log=log)
    real.setup((args.kubelet,), build_missing=False)
    node = RigNode(real, args.kubelet)
    try:
        runs = abab(node, args, node.up)
    finally:
        real.down()
    return {
        "kind": "cpu",
        "runtime_name": node.runtime,
        "runs": runs,
        "summary": summarize(runs, node.runtime),
    }


# --- the lab's CRI-O node -------------------------------------------------------------------------------

CRIO_SOCKET = "unix:///var/run/crio/crio.sock"
CRIO_METRICS_PORT = 9090
# Read by crio at start; sorts before the product's 99-eventedpleg.conf, which it does not touch.
CRIO_METRICS_DROPIN = "/etc/crio/crio.conf.d/10-bench-metrics.conf"
KUBELET_DROPIN = f"/etc/kubernetes/kubelet.conf.d/{c.KUBELET_DROPIN_NAME}"
CRIO_DROPIN = f"/{c.CRIO_DROPIN_DIR}/{c.CRIO_DROPIN_NAME}"
BENCH_NAMESPACE = "bench"
CRIO_HELPERS = ("kubelet", "crio", "conmon")


class CrioLabNode:
    """A CRI-O node of the lab (systemd as PID 1, crio and kubelet as units): the gate is the product's own
    two drop-ins, crio restarted before the kubelet (as the agent does); its processes are read from this
    host's /proc, found by the node's cgroup (docs/lab.md: every node has its own)."""

    runtime = "crio"

    def __init__(self, the_lab: Lab, spec: NodeSpec) -> None:
        self.lab, self.spec = the_lab, spec
        self.root = the_lab.node_dir(spec.name) / "rootfs"

    def _write(self, node_path: str, text: str) -> None:
        target = self.root / node_path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)

    def on_node(self, *argv: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        init = self.lab.init_pid(self.spec.name)
        if init is None:
            raise LabError(f"{self.spec.name} is not running")
        return machine.nsenter(init, list(argv), timeout=timeout)

    def prepare(self) -> None:
        self._write(
            CRIO_METRICS_DROPIN,
            f'[crio.metrics]\nenable_metrics = true\nmetrics_host = "{self.spec.ip}"\n'
            f"metrics_port = {CRIO_METRICS_PORT}\n",
        )
        namespace = workloads.namespace(BENCH_NAMESPACE)
        chart.kubectl_ok(self.lab, "apply", "-f", "-", stdin=json.dumps(namespace))
        chart.kubectl_ok(self.lab, "apply", "-f", "-", stdin=json.dumps(self.deployment(0)))

    def deployment(self, replicas: int) -> dict[str, Any]:
        pod_spec = {
            "nodeSelector": {"kubernetes.io/hostname": self.spec.name},
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "idle", "image": IDLE_IMAGE, "imagePullPolicy": "Never"}],
        }
        return workloads.deployment("idle", BENCH_NAMESPACE, replicas=replicas, pod_spec=pod_spec)

    def up(self, pods: int) -> None:
        self.set_gate(False)
        chart.kubectl_ok(self.lab, "-n", BENCH_NAMESPACE, "scale", "deploy/idle", f"--replicas={pods}")
        self.wait_pods(pods)

    def set_gate(self, gate: bool) -> None:
        owner = "bench/benefit.py"
        self._write(KUBELET_DROPIN, render_file(KUBELET_TEMPLATE, enabled=gate, owner=owner))
        self._write(CRIO_DROPIN, render_file(CRIO_TEMPLATE, enabled=gate, owner=owner))
        for unit in ("crio", "kubelet"):
            done = self.on_node("systemctl", "restart", unit)
            if done.returncode != 0:
                raise LabError(f"systemctl restart {unit}: {done.stderr.strip()}")
        config = self.on_node("crio", "status", "config").stdout
        if f"enable_pod_events = {str(gate).lower()}" not in config:
            raise LabError(f"crio does not run with enable_pod_events = {gate}")
        chart.wait_for("the kubelet's /metrics", self.kubelet_metrics, timeout=120)

    def ready_pods(self) -> int:
        pods = chart.get_json(self.lab, "pods", "-n", BENCH_NAMESPACE)["items"]
        return sum(
            1
            for p in pods
            if not p["metadata"].get("deletionTimestamp")
            and any(
                x["type"] == "Ready" and x["status"] == "True"
                for x in p.get("status", {}).get("conditions", [])
            )
        )

    def wait_pods(self, pods: int) -> None:
        chart.wait_for(f"{pods} idle pods Ready", lambda: self.ready_pods() == pods, timeout=600)

    def kubelet_metrics(self) -> Metrics | None:
        done = self.lab.kubectl("get", "--raw", f"/api/v1/nodes/{self.spec.name}/proxy/metrics", timeout=30)
        return parse_metrics(done.stdout) if done.returncode == 0 else None

    def processes(self) -> dict[str, list[int]]:
        """kubelet, crio and conmon processes of this node, by the node's cgroup (as this host sees it)."""
        found: dict[str, list[int]] = {name: [] for name in CRIO_HELPERS}
        mark = f"/{self.spec.cgroup}/"
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                comm = (entry / "comm").read_text().strip()
                if comm in found and mark in (entry / "cgroup").read_text():
                    found[comm].append(int(entry.name))
            except OSError:
                continue
        return found

    def sample(self) -> Sample:
        procs = self.processes()
        kubelet = procs["kubelet"][0] if len(procs["kubelet"]) == 1 else None
        crio = procs["crio"][0] if len(procs["crio"]) == 1 else None
        return Sample(
            cpu=_cpu_of({"kubelet": kubelet, "crio": crio}),
            helpers={pid: cpu_seconds(pid) for pid in procs["conmon"]},
            kubelet_pid=kubelet,
            kubelet=self.kubelet_metrics(),
            runtime=scrape(f"http://{self.spec.ip}:{CRIO_METRICS_PORT}/metrics"),
        )

    def cri_calls(self, first: Metrics, second: Metrics) -> dict[str, float | None]:
        # server/metrics/metrics.go (cri-o v1.34.0): counter container_runtime_crio_operations_total,
        # label `operation` = the gRPC method's name, counted by the unary interceptor for every call.
        name = "container_runtime_crio_operations_total"
        operations = {s.label("operation") or "" for s in second.find(name)}
        return {op: _delta(first, second, name, operation=op) for op in sorted(operations)}

    def containers(self) -> list[dict[str, Any]]:
        done = self.on_node("crictl", "--runtime-endpoint", CRIO_SOCKET, "ps", "-o", "json")
        return list(json.loads(done.stdout or "{}").get("containers") or []) if done.returncode == 0 else []


@contextlib.contextmanager
def crio_lab_node(lab_dir: Path | None, lab_nodes: str) -> Iterator[CrioLabNode]:
    """The lab's CRI-O node, prepared (namespace `bench`, deploy/idle at 0 replicas), of a lab brought up
    for the run from `lab_nodes` in a temporary directory (down and removed afterwards), or of the lab up
    in `lab_dir` (left up, the bench's namespace and drop-ins removed)."""
    the_lab = Lab(lab_dir) if lab_dir else Lab(Path(tempfile.mkdtemp(prefix="bench-lab-")))
    ours = the_lab.state() is None
    try:
        if ours:
            the_lab.up(parse(lab_nodes), timeout=300)
        state = the_lab.state()
        assert state is not None
        spec = next((s for s in state.specs if s.runtime.is_crio and not s.admin_pod_events_off), None)
        if spec is None:
            raise SystemExit(f"no CRI-O node without an override in {state.nodes}")
        node = CrioLabNode(the_lab, spec)
        try:
            node.prepare()
            yield node
        finally:
            the_lab.kubectl("delete", "namespace", BENCH_NAMESPACE, "--wait=false")
            for path in (KUBELET_DROPIN, CRIO_DROPIN, CRIO_METRICS_DROPIN):
                (node.root / path.lstrip("/")).unlink(missing_ok=True)
    finally:
        if ours:
            left = the_lab.down() if the_lab.state() is not None else []
            if left:
                log(f"lab down left: {left} (kept {the_lab.directory})")
            elif lab_dir is None:
                shutil.rmtree(the_lab.directory, ignore_errors=True)


def crio_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    """On the lab's CRI-O node: a lab brought up for the run (one node), or the one up in --lab-dir."""
    with crio_lab_node(args.lab_dir, args.lab_nodes) as node:
        runs = abab(node, args, node.up)
    return {
        "kind": "cpu",
        "runtime_name": node.runtime,
        "node": node.spec.to_text(),
        "runs": runs,
        "summary": summarize(runs, node.runtime),
    }


def _mean_sd(values: Iterable[float | None]) -> dict[str, float | int | None]:
    vals = [v for v in values if v is not None]
    if not vals:
        return {"mean": None, "sd": None, "n": 0}
    return {
        "mean": statistics.fmean(vals),
        "sd": statistics.stdev(vals) if len(vals) > 1 else 0.0,
        "n": len(vals),
    }


def summarize(runs: Sequence[dict[str, Any]], runtime: str = "containerd") -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for pods in sorted({r["pods"] for r in runs}):
        for gate in (False, True):
            mine = [r for r in runs if r["pods"] == pods and r["gate"] == gate and "error" not in r]
            if not mine:
                continue
            interval = "kubelet_pleg_relist_interval_seconds"
            duration = "kubelet_pleg_relist_duration_seconds"
            rows.append(
                {
                    "pods": pods,
                    "gate": gate,
                    "kubelet_mcores": _scaled(_mean_sd(r["cpu_cores"]["kubelet"] for r in mine)),
                    "kubelet_process_cpu_mcores": _scaled(
                        _mean_sd(r["kubelet_process_cpu_cores"] for r in mine)
                    ),
                    f"{runtime}_mcores": _scaled(_mean_sd(r["cpu_cores"][runtime] for r in mine)),
                    "shims_mcores": _scaled(_mean_sd(r["cpu_cores"]["shims"] for r in mine)),
                    "relists_per_minute": _mean_sd(
                        (r["relist"][interval]["count"] or 0) * 60 / r["seconds"] for r in mine
                    ),
                    "relist_interval_mean_s": _mean_sd(r["relist"][interval]["mean"] for r in mine),
                    "relist_duration_mean_ms": _scaled(_mean_sd(r["relist"][duration]["mean"] for r in mine)),
                    "cri_calls_per_minute": {
                        m: _mean_sd(r["cri_calls_per_minute"].get(m, 0.0) for r in mine)
                        for m in sorted({m for r in mine for m in r["cri_calls_per_minute"]})
                    },
                    "duplicates": max(r["duplicates"] for r in mine),
                    "load1": _mean_sd(
                        statistics.fmean(r["machine"]["load1"]) for r in mine if "machine" in r
                    ),
                    "machine_busy_cores": _mean_sd(
                        r["machine"]["busy_cores"] for r in mine if "machine" in r
                    ),
                    "windows": len(mine),
                }
            )
    return rows


def _scaled(stats: dict[str, float | int | None], factor: float = 1000.0) -> dict[str, float | int | None]:
    return {k: (v * factor if isinstance(v, float) and k in ("mean", "sd") else v) for k, v in stats.items()}


# --- exit latency ---------------------------------------------------------------------------------------

_PLEG_EVENT = re.compile(
    r'"SyncLoop \(PLEG\): event for pod".*"Type":"ContainerDied","Data":"(?P<id>[0-9a-f]+)"'
)


def _victim(node: rn.RealNode, pod: str) -> tuple[str, int] | None:
    for ctr in node.containers():
        if ctr.get("labels", {}).get("io.kubernetes.pod.name", "").startswith(pod):
            pid = node.container_pid(ctr["id"])
            if pid:
                return ctr["id"], pid
    return None


def latency_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    node = rn.RealNode(log=log)
    node.setup((args.kubelet,), build_missing=False)
    pods = max(1, args.latency_pods)
    kubelet_log = node.layout.at(lay.KUBELET_LOG)
    kills: list[dict[str, Any]] = []
    try:
        node.up(rn.RigSpec(kubelet=args.kubelet, runtime=cfg.RigRuntime.CONTAINERD_22, pods=pods, gate=False))
        for rep in range(args.repeats):
            for gate in (False, True):
                node.write_gate(gate)
                node.restart_kubelet()
                node.wait_pods(pods, timeout=600)
                time.sleep(args.warmup)
                log(f"latency round {rep} gate={'on' if gate else 'off'}: {args.kills} kills")
                for i in range(args.kills):
                    pod = cfg.idle_pod_name(i % pods)
                    node.wait_pods(pods, timeout=600)
                    victim = _victim(node, pod)
                    if victim is None:
                        continue
                    cid, pid = victim
                    since = datetime.now(UTC)
                    killed = time.time()
                    os.kill(pid, signal.SIGKILL)
                    seen = _wait_event(kubelet_log, since, cid, timeout=30.0)
                    kills.append(
                        {
                            "gate": gate,
                            "round": rep,
                            "pod": pod,
                            "latency_s": None if seen is None else seen - killed,
                        }
                    )
                    time.sleep(args.kill_gap)
    finally:
        node.down()
    summary = [
        {
            "gate": gate,
            **_mean_sd(k["latency_s"] for k in kills if k["gate"] == gate),
            "median": _median(k["latency_s"] for k in kills if k["gate"] == gate),
            "max": max(
                (k["latency_s"] for k in kills if k["gate"] == gate and k["latency_s"] is not None),
                default=None,
            ),
            "missed": sum(1 for k in kills if k["gate"] == gate and k["latency_s"] is None),
        }
        for gate in (False, True)
    ]
    return {"kind": "latency", "kills": kills, "summary": summary}


def _median(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def _wait_event(path: Path, since: datetime, container_id: str, timeout: float) -> float | None:
    """Epoch seconds at which the kubelet logged the ContainerDied PLEG event for this container."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in read_since(path, since):
            match = _PLEG_EVENT.search(line)
            if match and (container_id.startswith(match["id"]) or match["id"].startswith(container_id)):
                stamp = line_time(line, since.year)
                if stamp is not None:
                    return stamp.timestamp()
        time.sleep(0.2)
    return None


# --- report ---------------------------------------------------------------------------------------------


def _fmt(stats: dict[str, Any] | None, digits: int = 1) -> str:
    if not stats or stats.get("mean") is None:
        return "-"
    return f"{stats['mean']:.{digits}f} ± {stats['sd']:.{digits}f}"


def table(doc: dict[str, Any]) -> str:
    """The markdown table of a results file (docs/benchmarks.md)."""
    if doc["kind"] == "latency":
        lines = [
            "| gate | kills | median s | mean ± sd s | max s | missed |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for row in doc["summary"]:
            median = "-" if row["median"] is None else f"{row['median']:.2f}"
            top = "-" if row["max"] is None else f"{row['max']:.2f}"
            lines.append(
                f"| {'on' if row['gate'] else 'off'} | {row['n'] + row['missed']} | {median} "
                f"| {_fmt(row, 2)} | {top} | {row['missed']} |"
            )
        return "\n".join(lines)
    runtime = doc.get("runtime_name", "containerd")
    helpers = "conmon" if runtime == "crio" else "shims"
    loaded = any(row.get("load1") for row in doc["summary"])
    lines = [
        f"| pods | gate | kubelet CPU (m) | {runtime} (m) | {helpers} (m) | relists/min | relist interval s "
        "| ListPodSandbox/min | ListContainers/min | windows | dup |"
        + (" load avg (1 min) |" if loaded else ""),
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |" + (" --- |" if loaded else ""),
    ]
    for row in doc["summary"]:
        cri = row["cri_calls_per_minute"]
        lines.append(
            f"| {row['pods']} | {'on' if row['gate'] else 'off'} | {_fmt(row['kubelet_mcores'])} "
            f"| {_fmt(row[f'{runtime}_mcores'])} | {_fmt(row['shims_mcores'])} "
            f"| {_fmt(row['relists_per_minute'])} | {_fmt(row['relist_interval_mean_s'])} "
            f"| {_fmt(cri.get('ListPodSandbox'))} | {_fmt(cri.get('ListContainers'))} "
            f"| {row['windows']} | {row['duplicates']} |"
            + (f" {_fmt(row.get('load1'), 2)} |" if loaded else "")
        )
    return "\n".join(lines)


def render(path: Path) -> str:
    """PNG next to the results file (kubelet and containerd CPU by pod count, gate off vs on); returns
    the markdown table."""
    doc = json.loads(path.read_text())
    if doc["kind"] == "cpu":
        import matplotlib  # noqa: PLC0415 - bench-only dependency

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415

        runtime = doc.get("runtime_name", "containerd")
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for ax, key, title in (
            (axes[0], "kubelet_mcores", "kubelet CPU (millicores)"),
            (axes[1], f"{runtime}_mcores", f"{runtime} CPU (millicores)"),
        ):
            for gate, colour in ((False, "tab:red"), (True, "tab:green")):
                rows = [r for r in doc["summary"] if r["gate"] == gate]
                ax.errorbar(
                    [r["pods"] for r in rows],
                    [r[key]["mean"] for r in rows],
                    yerr=[r[key]["sd"] for r in rows],
                    marker="o",
                    capsize=4,
                    color=colour,
                    label=f"EventedPLEG {'on' if gate else 'off'}",
                )
            ax.set_xlabel("idle pods")
            ax.set_title(title)
            ax.grid(alpha=0.3)
            ax.legend()
        label = doc.get("runtime", "containerd 2.2").split(" (")[0]
        fig.suptitle(f"kubelet v{doc['kubelet']} + {label}, {doc['settings']['window']:.0f}s windows")
        fig.tight_layout()
        fig.savefig(path.with_suffix(".png"), dpi=90)
    return table(doc)


# --- main -----------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kubelet", default=None, choices=sorted(rn.KUBELETS))
    parser.add_argument("--runtime", default="containerd", choices=("containerd", "crio"))
    parser.add_argument("--lab-dir", type=Path, default=None, help="crio: use the lab up in DIR (left up)")
    parser.add_argument("--lab-nodes", default="lab-crio:1.36:crio-1.34", help="crio: the lab brought up")
    parser.add_argument("--pods", default="0,50,100", help="comma-separated N (CPU benchmark)")
    parser.add_argument("--repeats", type=int, default=3, help="ABAB rounds (each = gate off, gate on)")
    parser.add_argument("--warmup", type=float, default=300.0, help="seconds after each kubelet restart")
    parser.add_argument("--window", type=float, default=900.0, help="measurement window, seconds")
    parser.add_argument("--latency", action="store_true", help="exit-to-status latency instead of CPU")
    parser.add_argument("--latency-pods", type=int, default=5)
    parser.add_argument("--kills", type=int, default=20, help="kills per round and gate (latency)")
    parser.add_argument("--kill-gap", type=float, default=15.0, help="seconds between kills (latency)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None, help="render a results JSON: PNG + markdown table")
    args = parser.parse_args(argv)
    if args.plot is not None:
        print(render(args.plot))
        return 0
    args.pods = [int(p) for p in args.pods.split(",") if p.strip()]
    args.kubelet = args.kubelet or ("1.37" if args.latency else "1.36")
    started = datetime.now(UTC)
    doc = latency_benchmark(args) if args.latency else cpu_benchmark(args)
    doc.update(
        command=" ".join(
            [".venv/bin/python", "bench/benefit.py", *(argv if argv is not None else sys.argv[1:])]
        ),
        started=started.isoformat(timespec="seconds"),
        finished=datetime.now(UTC).isoformat(timespec="seconds"),
        kubelet=args.kubelet,
        runtime=RUNTIMES[args.runtime],
        machine={"cpus": os.cpu_count(), "kernel": os.uname().release},
        settings={"warmup": args.warmup, "window": args.window, "repeats": args.repeats, "pods": args.pods},
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    tag = "" if args.runtime == "containerd" else f"-{args.runtime}"
    out = args.out or RESULTS / f"{doc['kind']}{tag}-v{args.kubelet}.json"
    out.write_text(json.dumps(doc, indent=1) + "\n")
    log(f"wrote {out}")
    print(render(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
