"""Rollout scale benchmark: what the operator adds on top of the unavoidable work (a benchmark, not a test).

On the real local control plane with N kwok nodes and lightweight protocol agents whose apply takes T
seconds, roll a NodeConfig out at maxUnavailable 10% (empty drains) and report:

- total time vs the ideal ceil(N / batch) x T;
- operator-added latency per node step: from an agent's Done write to the operator's next write on that
  node (the uncordon), and from a node's Cordoned write to its Applying write (the drain step, which with
  empty drains is pure operator work) -- p50/p95/max;
- API requests per node update and full LISTs after start-up, from the API server's audit log filtered
  to the operator's ServiceAccount (every request the operator process makes: kopf's and ours);
- the operator's peak RSS (VmHWM from /proc);
- per node update: the operator's and the API server's CPU milliseconds (utime + stime from /proc), the
  operator's API writes and reads (from the audit log, split by verb and resource);
- the machine's load average during the rollout (the control plane and the operator share the cores, so
  a reader can see whether the machine was the limit), and the CPU floor: the CPU-seconds everything but
  the operator used, spread over every core (or the ideal, if longer) -- how fast this machine could have
  rolled out with an operator that cost nothing.

    .venv/bin/python bench/rollout.py --nodes 100 1000 5000 10000 --repeats 3
    .venv/bin/python bench/rollout.py --nodes 1000 --kill-every 10   # SIGKILL it 10 s after it is ready
Writes bench/results/rollout-<N>.json (every run's figures, their median and spread at the top level)
and .png: the headline file of each size, rewritten by every run (with --kill-every: rollout-<N>-kill<S>s,
with --profile: rollout-<N>-profile). `--tag T` writes rollout-<N>[-...]-T.json as well, to keep a run
beside the headline (a "before" for a comparison). docs/benchmarks.md has the table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

from eventedpleg import constants as c
from eventedpleg.core.rollout.snapshot import node_view
from eventedpleg.k8s import nodeconfigs
from eventedpleg.k8s.client import api_client
from eventedpleg.k8s.informer import NodeInformer
from eventedpleg.protocol import GROUP, IN_PROGRESS
from eventedpleg_lab.demo.harness import (
    NAMESPACE,
    OPERATOR_SA,
    OperatorProcess,
    http_status,
    install_operator,
)
from eventedpleg_lab.demo.protocolagents import ProtocolAgents
from eventedpleg_lab.kube.fakenodes import FakeNode
from eventedpleg_lab.localcluster.cluster import LocalCluster

RESULTS = Path(__file__).resolve().parent / "results"
OPERATOR_USER = f"system:serviceaccount:{NAMESPACE}:{OPERATOR_SA}"
AUDIT_POLICY = f"""apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    users: ["{OPERATOR_USER}"]
  - level: None
"""
WRITES = {"create", "update", "patch", "delete", "deletecollection"}
READS = {"get", "list"}  # watches are long-lived streams, counted apart
# Figures summarised as median and spread over the repeats.
SUMMARISED = (
    "total_s",
    "ratio_to_ideal",
    "cpu_floor_ratio",
    "overhead_p50_s",
    "overhead_p95_s",
    "overhead_max_s",
    "rss_mib",
    "operator_cpu_ms_per_node",
    "apiserver_cpu_ms_per_node",
    "writes_per_node",
    "node_writes_per_node",
    "reads_per_node",
    "load_avg_1m_mean",
    "max_held_by_operator",
    "max_unavailable_seen",
)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def rss_sampler(pid: int, stop: threading.Event, peak: list[int]) -> None:
    """VmHWM is the kernel's own peak; sampled until the process ends."""
    while not stop.wait(0.5):
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak[0] = max(peak[0], int(line.split()[1]))
        except OSError:
            return


def load_sampler(stop: threading.Event, samples: list[float]) -> None:
    """The 1-minute load average every 2 s: how busy the whole (shared) machine was."""
    while not stop.wait(2.0):
        samples.append(os.getloadavg()[0])


class Unavailability:
    """The most nodes unavailable at once, from one watch of all bench nodes (events arrive in
    resourceVersion order, so every count is of one consistent state of the cluster): `held`, the nodes
    in the operator's hands (cordoned by it, or Draining..Verifying), which maxUnavailable bounds; `down`,
    every unavailable node as the planner counts them, NotReady ones included (on a loaded machine kwok's
    heartbeats lag and kube-controller-manager marks nodes NotReady, which no operator causes)."""

    def __init__(self, api: Any) -> None:
        self.held: set[str] = set()
        self.down: set[str] = set()
        self.not_ready: set[str] = set()
        self.peak = {"held": 0, "down": 0, "not_ready": 0}
        self.lock = threading.Lock()
        self.informer = NodeInformer(api, self._event, lambda _: None, label_selector="bench=rollout")

    def _event(self, kind: str, body: dict[str, Any]) -> None:
        view = node_view(body)
        gone = kind == "DELETED"
        held = not gone and (view.marks.cordoned_by_us or view.marks.state in IN_PROGRESS)
        not_ready = not gone and not view.ready
        down = held or not_ready or (not gone and view.unschedulable)
        with self.lock:
            for group, member in ((self.held, held), (self.down, down), (self.not_ready, not_ready)):
                (group.add if member else group.discard)(view.name)
            for name, group in (("held", self.held), ("down", self.down), ("not_ready", self.not_ready)):
                self.peak[name] = max(self.peak[name], len(group))

    def __enter__(self) -> Unavailability:
        self.informer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.informer.close()


def operator_metrics(port: int) -> dict[str, float]:
    """Sums and counts of the operator's own histograms: where its time went."""
    import urllib.request  # noqa: PLC0415

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(("eventedpleg_reconcile_seconds_", "eventedpleg_step_seconds_")) and (
            "_sum" in line or "_count" in line
        ):
            name, value = line.rsplit(" ", 1)
            out[name] = round(float(value), 3)
        if line.startswith("eventedpleg_write_conflicts_total "):
            out["write_conflicts"] = float(line.split()[-1])
    return out


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (fields 14 and 15 of /proc/<pid>/stat)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu(pid: int) -> dict[int, float]:
    """utime + stime of each live thread of a process, by OS thread id."""
    out: dict[int, float] = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread ended
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def cpu_by_role(
    before: dict[int, float], after: dict[int, float], names_file: Path, total: float, n: int
) -> dict[str, float]:
    """The operator's CPU per node update (ms) by thread role ("step", "giveback", "events", "asyncio":
    the passes, "MainThread": kopf's loop, "node-informer", ...); "unattributed" is the process's CPU less its
    live threads': threads that ended during the run, and tick rounding (/proc counts each thread in
    whole clock ticks, rounded down: up to ~20 ms a thread, and the operator has ~60)."""
    try:
        names = {int(tid): name for tid, name in json.loads(names_file.read_text()).items()}
    except (OSError, ValueError):
        return {}
    roles: defaultdict[str, float] = defaultdict(float)  # CPU seconds (Counter is typed for ints)
    for tid, seconds in after.items():
        name = names.get(tid, "unnamed")
        role = name.rstrip("0123456789").rstrip("_-") or name
        roles[role] += seconds - before.get(tid, 0.0)
    roles["unattributed"] = total - sum(roles.values())
    ranked = sorted(roles.items(), key=lambda item: item[1], reverse=True)
    return {role: round(seconds * 1000 / n, 2) for role, seconds in ranked}


def gc_totals(names_file: Path) -> dict[str, list[float]]:
    """The operator's cyclic garbage collections so far, per generation: how many, and their CPU seconds
    (written beside the thread names by bench/threadnames/sitecustomize.py)."""
    try:
        doc = json.loads(names_file.with_name(names_file.name + ".gc").read_text())
    except (OSError, ValueError):
        return {"collections": [0, 0, 0], "cpu_s": [0.0, 0.0, 0.0]}
    return {"collections": list(doc["collections"]), "cpu_s": list(doc["cpu_s"])}


def gc_per_node(before: dict[str, list[float]], after: dict[str, list[float]], n: int) -> dict[str, Any]:
    """Collections of generation 0, 1, 2 during the rollout and their CPU in ms per node update."""
    return {
        "collections": [int(a - b) for a, b in zip(after["collections"], before["collections"], strict=True)],
        "cpu_ms_per_node": [
            round((a - b) * 1000 / n, 2) for a, b in zip(after["cpu_s"], before["cpu_s"], strict=True)
        ],
    }


def audit_events(path: Path) -> list[dict[str, Any]]:
    events = []
    for line in path.read_text().splitlines():
        event = json.loads(line)
        if (
            event.get("user", {}).get("username") == OPERATOR_USER
            and event.get("stage") == "ResponseComplete"
        ):
            events.append(event)
    return events


def ts(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()


def run_one(  # noqa: PLR0915 - one linear script: start, measure, roll out, collect
    n: int,
    apply_seconds: float,
    max_unavailable: str,
    work: Path,
    *,
    keep: bool,
    kill_every: float | None,
    profile: Path | None,
) -> dict[str, Any]:
    audit_log = work / "audit.log"
    (work / "audit-policy.yaml").write_text(AUDIT_POLICY)
    cluster = LocalCluster(
        work / "cluster",
        apiserver_args=(
            f"--audit-policy-file={work / 'audit-policy.yaml'}",
            f"--audit-log-path={audit_log}",
            "--audit-log-format=json",
            "--audit-log-mode=batch",
            "--audit-log-maxsize=0",
        ),
        timeout=300,
    )
    cluster.start()
    started_ops: list[OperatorProcess] = []
    try:
        print(f"[bench] creating {n} kwok nodes", file=sys.stderr, flush=True)
        zones = ("zone-a", "zone-b", "zone-c")
        fakes = [FakeNode(f"bench-{i:05d}", zone=zones[i % 3], labels={"bench": "rollout"}) for i in range(n)]
        created = time.monotonic()
        cluster.add_nodes(fakes, timeout=max(120, n * 0.2))
        print(f"[bench] nodes Ready in {time.monotonic() - created:.0f}s", file=sys.stderr, flush=True)
        sa = install_operator(cluster)
        api = api_client(str(cluster.kubeconfig), pool_size=16)
        names_file = work / "operator-threads.json"  # written by bench/threadnames/sitecustomize.py
        os.environ["EVENTEDPLEG_BENCH_THREADS"] = str(names_file)
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(Path(__file__).parent / "threadnames"), os.environ.get("PYTHONPATH", "")) if p
        )
        op = OperatorProcess(sa, NAMESPACE, work / "operator.log").start()
        started_ops.append(op)
        stop, peak, loads = threading.Event(), [0], [os.getloadavg()[0]]
        threading.Thread(target=rss_sampler, args=(op.pid, stop, peak), daemon=True).start()
        while http_status(op.port, "/readyz") != 200:
            time.sleep(0.2)
        time.sleep(5)  # kopf's start-up LISTs and watches are not part of the rollout
        startup_done = time.time()
        threading.Thread(target=load_sampler, args=(stop, loads), daemon=True).start()
        body = {
            "apiVersion": f"{GROUP}/{c.VERSION}",
            "kind": c.KIND,
            "metadata": {"name": "bench"},
            "spec": {
                "eventedPleg": True,
                "nodeSelector": {"matchLabels": {"bench": "rollout"}},
                "rollout": {"maxUnavailable": max_unavailable, "canary": {"nodes": 0}},
                "drain": {"timeoutSeconds": 600},
            },
        }
        agents = ProtocolAgents(api, label_selector="bench=rollout", apply_seconds=apply_seconds, workers=16)
        pids = {proc.name: proc.pid for proc in cluster.procs} | {
            "operator": op.pid,
            "bench+agents": os.getpid(),
        }
        cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        threads_before = thread_cpu(op.pid)
        gc_before = gc_totals(names_file)
        killed_cpu, kills = 0.0, 0  # CPU of operator processes SIGKILLed during the run
        spy = start_profile(op.pid, profile) if profile else None
        with agents, Unavailability(api) as unavailable:
            started = time.time()
            cluster.kubectl("apply", "-f", "-", stdin=json.dumps(body), check=True)
            next_kill = time.monotonic() + kill_every if kill_every else math.inf
            while not available(api):
                if time.monotonic() >= next_kill:
                    killed_cpu += cpu_seconds(op.pid) - cpu_before["operator"]
                    op.kill()
                    kills += 1
                    op = OperatorProcess(sa, NAMESPACE, work / "operator.log", identity=f"op-{kills}")
                    started_ops.append(op.start())
                    cpu_before["operator"] = 0.0  # a new process starts from zero
                    pids["operator"] = op.pid
                    # Counted from readiness: on a loaded machine start-up alone can take 10 s, and a
                    # period shorter than start-up would only measure start-ups.
                    while http_status(op.port, "/readyz") != 200 and op.proc and op.proc.poll() is None:
                        time.sleep(0.2)
                    next_kill = time.monotonic() + (kill_every or math.inf)
                time.sleep(0.5)
            finished = time.time()
            done_at = dict(agents.done_at)
            peaks = dict(unavailable.peak)
        cpu = {name: round(cpu_seconds(pid) - cpu_before[name], 2) for name, pid in pids.items()}
        threads_after = thread_cpu(op.pid)
        gc_after = gc_totals(names_file)
        by_role = {} if kills else cpu_by_role(threads_before, threads_after, names_file, cpu["operator"], n)
        cpu["operator"] = round(cpu["operator"] + killed_cpu, 2)
        if spy is not None:
            spy.send_signal(signal.SIGINT)  # py-spy writes its flame graph on SIGINT
            spy.wait(60)
        time.sleep(3)  # let the batch audit backend flush
        internals = operator_metrics(op.port) if not kills else {}
        stop.set()
        events = [e for e in audit_events(audit_log) if ts(e) >= startup_done]
        result = analyse(n, apply_seconds, max_unavailable, started, finished, done_at, events, peak[0])
        # How fast this machine could have gone with an operator that cost nothing: the CPU the control
        # plane and the stand-in agents used, spread over every core, or the ideal if that is longer.
        others = sum(seconds for name, seconds in cpu.items() if name != "operator")
        floor = max(result["ideal_s"], others / (os.cpu_count() or 1))
        return {
            **result,
            "cpu_floor_s": round(floor, 1),
            "cpu_floor_ratio": round(floor / result["ideal_s"], 3),
            "operator_cpu_ms_per_node": round(cpu["operator"] * 1000 / n, 2),
            "operator_cpu_ms_per_node_by_thread": by_role,
            # Cyclic GC inside those threads' figures (one operator process only: not with --kill-every).
            "operator_gc": {} if kills else gc_per_node(gc_before, gc_after, n),
            "apiserver_cpu_ms_per_node": round(cpu["kube-apiserver"] * 1000 / n, 2),
            "load_avg_1m_mean": round(statistics.fmean(loads), 2),
            "load_avg_1m_max": round(max(loads), 2),
            "cpus": os.cpu_count(),
            "max_held_by_operator": peaks["held"],  # maxUnavailable bounds this
            "max_unavailable_seen": peaks["down"],
            "max_not_ready_seen": peaks["not_ready"],
            "operator_kills": kills,
            "cpu_seconds": cpu,
            "operator": internals,
        }
    finally:
        for started_op in started_ops:  # also on a failure or Ctrl-C: never leave the operator running
            started_op.stop()
        if not keep:
            cluster.stop()


def available(api: Any) -> bool:
    """Whether the NodeConfig is Available; a halted rollout (Degraded) never will be: raise with why."""
    status = nodeconfigs.get(api, "bench").get("status") or {}
    conditions = {cond["type"]: cond for cond in status.get("conditions", [])}
    if conditions.get("Available", {}).get("status") == "True":
        return True
    degraded = conditions.get("Degraded", {})
    if degraded.get("status") == "True":
        raise RuntimeError(f"the rollout halted: {str(degraded.get('message', ''))[:600]}")
    return False


def start_profile(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """py-spy (next to this interpreter) sampling the operator while it holds the GIL (its Python CPU;
    sampling threads "on a CPU" counts threads blocked in a socket read), without pausing it, until
    SIGINT. `.svg` writes a flame graph, `.txt` the collapsed stacks (one stack and its count a line)."""
    spy = Path(sys.executable).with_name("py-spy")
    form = "flamegraph" if out.suffix == ".svg" else "raw"
    argv = [str(spy), "record", "--pid", str(pid), "--nonblocking", "--gil", "--rate", "100",
            "--format", form, "--output", str(out)]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def analyse(
    n: int,
    apply_seconds: float,
    max_unavailable: str,
    started: float,
    finished: float,
    done_at: dict[str, float],
    events: list[dict[str, Any]],
    rss_kib: int,
) -> dict[str, Any]:
    batch = max(1, math.floor(n * int(max_unavailable.rstrip("%")) / 100))
    ideal = math.ceil(n / batch) * apply_seconds
    verbs = Counter(e["verb"] for e in events)
    writes = sum(count for verb, count in verbs.items() if verb in WRITES)
    reads = sum(count for verb, count in verbs.items() if verb in READS)
    by_resource = Counter(f"{e['verb']} {resource_of(e)}" for e in events)
    full_lists = [
        e
        for e in events
        if e["verb"] == "list"
        and "fieldSelector" not in e.get("requestURI", "")
        and "labelSelector" not in e.get("requestURI", "")
    ]
    node_writes: dict[str, list[float]] = {}
    for e in events:
        ref = e.get("objectRef", {})
        if e["verb"] == "patch" and ref.get("resource") == "nodes":
            node_writes.setdefault(ref.get("name", ""), []).append(ts(e))
    after_done = []
    for node, when in done_at.items():
        later = [t for t in node_writes.get(node, []) if t > when]
        if later:
            after_done.append(min(later) - when)
    uncordoned = sorted(max(times) for times in node_writes.values() if times)
    curve = [(round(t - started, 3), i + 1) for i, t in enumerate(uncordoned)]
    return {
        "nodes": n,
        "apply_seconds": apply_seconds,
        "max_unavailable": max_unavailable,
        "batch": batch,
        "total_s": round(finished - started, 2),
        "ideal_s": ideal,
        "ratio_to_ideal": round((finished - started) / ideal, 3),
        "overhead_p50_s": round(percentile(after_done, 0.50), 3),
        "overhead_p95_s": round(percentile(after_done, 0.95), 3),
        "overhead_max_s": round(max(after_done, default=float("nan")), 3),
        "rss_mib": round(rss_kib / 1024, 1),
        "api_requests": dict(verbs),
        "api_requests_by_resource": dict(by_resource.most_common()),
        "writes_per_node": round(writes / n, 2),
        "node_writes_per_node": round(by_resource["patch nodes"] / n, 2),
        "reads_per_node": round(reads / n, 2),
        "api_requests_per_node": round(sum(verbs.values()) / n, 2),
        "full_lists": len(full_lists),
        "full_list_uris": sorted({e["requestURI"] for e in full_lists})[:10],
        "curve": curve,
    }


def resource_of(event: dict[str, Any]) -> str:
    ref = event.get("objectRef", {})
    sub = ref.get("subresource")
    return f"{ref.get('resource', '?')}/{sub}" if sub else str(ref.get("resource", "?"))


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and spread (min, max) of each figure over the runs; every run's figures kept in `runs`."""
    first = runs[0]
    head = {k: first[k] for k in ("nodes", "apply_seconds", "max_unavailable", "batch", "ideal_s", "cpus")}
    median = {k: round(statistics.median(r[k] for r in runs), 3) for k in SUMMARISED}
    spread = {k: [min(r[k] for r in runs), max(r[k] for r in runs)] for k in SUMMARISED}
    return {**head, "repeats": len(runs), "median": median, "spread": spread, "runs": runs}


def as_json(result: dict[str, Any]) -> str:
    """Indented figures, but each run's nodes-done curve on one line (so the plot can be redrawn)."""
    runs = [{**run, "curve": f"@curve{i}@"} for i, run in enumerate(result["runs"])]
    text = json.dumps({**result, "runs": runs}, indent=2)
    for i, run in enumerate(result["runs"]):
        text = text.replace(f'"@curve{i}@"', json.dumps(run["curve"], separators=(",", ":")))
    return text + "\n"


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib  # noqa: PLC0415 - bench-only dependency

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    runs = result.get("runs", [result])  # a file of one run (before --repeats) is its own run
    n, batch, t = result["nodes"], result["batch"], result["apply_seconds"]
    ideal_x = [0.0] + [t * (i + 1) for i in range(math.ceil(n / batch))]
    ideal_y = [0] + [min(n, batch * (i + 1)) for i in range(math.ceil(n / batch))]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.step(ideal_x, ideal_y, where="post", label=f"ideal (batch {batch} x {t:g}s)", linestyle="--")
    for i, run in enumerate(runs):
        xs = [p[0] for p in run["curve"]]
        ys = [p[1] for p in run["curve"]]
        ax.plot(xs, ys, label=f"run {i + 1}: {run['total_s']}s (load {run.get('load_avg_1m_mean', '?')})")
    ax.set_xlabel("seconds since the NodeConfig was applied")
    ax.set_ylabel("nodes done (uncordoned)")
    ratio = statistics.median(run["ratio_to_ideal"] for run in runs)
    ax.set_title(f"{n} nodes, maxUnavailable {result['max_unavailable']}: median {ratio:.2f}x ideal")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--repeats", type=int, default=1, help="runs per N (median and spread reported)")
    parser.add_argument("--apply-seconds", type=float, default=5.0)
    parser.add_argument("--max-unavailable", default="10%")
    parser.add_argument(
        "--kill-every",
        type=float,
        metavar="S",
        help="SIGKILL the operator S seconds after it is ready, start a new one, again and again",
    )
    parser.add_argument(
        "--profile", action="store_true", help="py-spy samples of the operator (.txt; bench/profileshares.py)"
    )
    parser.add_argument("--tag", default="", help="also write rollout-<N>[-...]-<tag>.json (and .png)")
    parser.add_argument("--keep", action="store_true", help="leave the control plane running (debugging)")
    parser.add_argument("--plot", type=Path, metavar="JSON", help="only redraw the PNG of a results file")
    args = parser.parse_args()
    if args.plot:
        plot(json.loads(args.plot.read_text()), args.plot.with_suffix(".png"))
        return 0
    RESULTS.mkdir(parents=True, exist_ok=True)
    variant = f"-kill{args.kill_every:g}s" if args.kill_every else ""
    variant += "-profile" if args.profile else ""  # py-spy costs the operator CPU: not the plain figures
    for n in args.nodes:
        runs = []
        headline = f"rollout-{n}{variant}"
        name = f"{headline}-{args.tag}" if args.tag else headline
        for i in range(args.repeats):
            profile = RESULTS / f"{name}-{i + 1}.txt" if args.profile else None  # rollout-<N>-profile-1.txt
            with tempfile.TemporaryDirectory(prefix=f"bench-{n}-") as work:
                runs.append(
                    run_one(
                        n,
                        args.apply_seconds,
                        args.max_unavailable,
                        Path(work),
                        keep=args.keep,
                        kill_every=args.kill_every,
                        profile=profile,
                    )
                )
            summary = {k: v for k, v in runs[-1].items() if k not in ("curve", "full_list_uris")}
            print(json.dumps(summary, indent=2), flush=True)
            # Written after every run (`repeats` says how many are in): a series stopped early keeps the
            # runs it finished.
            result = summarise(runs)
            for out in {RESULTS / f"{headline}.json", RESULTS / f"{name}.json"}:
                out.write_text(as_json(result))
                try:
                    plot(result, out.with_suffix(".png"))
                except ImportError:
                    print("[bench] matplotlib missing (pip install -e '.[bench]'): no plot", file=sys.stderr)
        print(json.dumps({k: result[k] for k in ("nodes", "repeats", "median", "spread")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
