"""Rollout scale benchmark: what the operator adds on top of the unavoidable work (a benchmark, not a test).

On the real local control plane with N kwok nodes and lightweight protocol agents whose apply takes T
seconds, roll a NodeConfig out at maxUnavailable 10% (empty drains) and report:

- total time vs the ideal ceil(N / batch) x T;
- operator-added latency per node step: from an agent's Done write to the operator's next write on that
  node (the uncordon), and from a node's Cordoned write to its Applying write (the drain step, which with
  empty drains is pure operator work) -- p50/p95/max;
- API requests per node update and full LISTs after start-up, from the API server's audit log filtered
  to the operator's ServiceAccount (every request the operator process makes: kopf's and ours);
- the operator's peak RSS (VmHWM from /proc).

    .venv/bin/python bench/rollout.py --nodes 100 1000 5000
Writes bench/results/rollout-<N>.json and .png; docs/benchmarks.md has the table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

from eventedpleg import constants as c
from eventedpleg.k8s import nodeconfigs
from eventedpleg.k8s.client import api_client
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
WRITES = {"create", "update", "patch", "delete"}


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


def run_one(n: int, apply_seconds: float, max_unavailable: str, work: Path, keep: bool) -> dict[str, Any]:
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
        op = OperatorProcess(sa, NAMESPACE, work / "operator.log").start()
        started_ops.append(op)
        stop, peak = threading.Event(), [0]
        threading.Thread(target=rss_sampler, args=(op.pid, stop, peak), daemon=True).start()
        while http_status(op.port, "/readyz") != 200:
            time.sleep(0.2)
        time.sleep(5)  # kopf's start-up LISTs and watches are not part of the rollout
        startup_done = time.time()
        body = {
            "apiVersion": f"{c.GROUP}/{c.VERSION}",
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
        with agents:
            started = time.time()
            cluster.kubectl("apply", "-f", "-", stdin=json.dumps(body), check=True)
            wait_available(api)
            finished = time.time()
            done_at = dict(agents.done_at)
        cpu = {name: round(cpu_seconds(pid) - cpu_before[name], 1) for name, pid in pids.items()}
        time.sleep(3)  # let the batch audit backend flush
        internals = operator_metrics(op.port)
        stop.set()
        events = [e for e in audit_events(audit_log) if ts(e) >= startup_done]
        result = analyse(n, apply_seconds, max_unavailable, started, finished, done_at, events, peak[0])
        return {**result, "cpu_seconds": cpu, "operator": internals}
    finally:
        for started_op in started_ops:  # also on a failure or Ctrl-C: never leave the operator running
            started_op.stop()
        if not keep:
            cluster.stop()


def wait_available(api: Any) -> None:
    """Until the NodeConfig is Available; a halted rollout (Degraded) never will be: raise with why."""
    while True:
        status = nodeconfigs.get(api, "bench").get("status") or {}
        conditions = {cond["type"]: cond for cond in status.get("conditions", [])}
        if conditions.get("Available", {}).get("status") == "True":
            return
        degraded = conditions.get("Degraded", {})
        if degraded.get("status") == "True":
            raise RuntimeError(f"the rollout halted: {str(degraded.get('message', ''))[:600]}")
        time.sleep(0.5)


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
        "api_writes_per_node": round(writes / n, 2),
        "api_requests_per_node": round(sum(verbs.values()) / n, 2),
        "full_lists": len(full_lists),
        "full_list_uris": sorted({e["requestURI"] for e in full_lists})[:10],
        "curve": curve,
    }


def as_json(result: dict[str, Any]) -> str:
    """The figures, one per line, and the nodes-done curve on one line (so the plot can be redrawn)."""
    head = json.dumps({k: v for k, v in result.items() if k != "curve"}, indent=2)
    curve = json.dumps(result.get("curve", []), separators=(",", ":"))
    return f'{head[:-2]},\n  "curve": {curve}\n}}\n'


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib  # noqa: PLC0415 - bench-only dependency

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    xs = [p[0] for p in result["curve"]]
    ys = [p[1] for p in result["curve"]]
    n, batch, t = result["nodes"], result["batch"], result["apply_seconds"]
    ideal_x = [0.0] + [t * (i + 1) for i in range(math.ceil(n / batch))]
    ideal_y = [0] + [min(n, batch * (i + 1)) for i in range(math.ceil(n / batch))]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.step(ideal_x, ideal_y, where="post", label=f"ideal (batch {batch} x {t:g}s)", linestyle="--")
    ax.plot(xs, ys, label="nodes done (uncordoned)")
    ax.set_xlabel("seconds since the NodeConfig was applied")
    ax.set_ylabel("nodes done")
    took, ideal = result["total_s"], result["ideal_s"]
    ax.set_title(f"{n} nodes, maxUnavailable {result['max_unavailable']}: {took}s vs ideal {ideal:g}s")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--apply-seconds", type=float, default=5.0)
    parser.add_argument("--max-unavailable", default="10%")
    parser.add_argument("--keep", action="store_true", help="leave the control plane running (debugging)")
    parser.add_argument("--plot", type=Path, metavar="JSON", help="only redraw the PNG of a results file")
    args = parser.parse_args()
    if args.plot:
        plot(json.loads(args.plot.read_text()), args.plot.with_suffix(".png"))
        return 0
    RESULTS.mkdir(parents=True, exist_ok=True)
    for n in args.nodes:
        with tempfile.TemporaryDirectory(prefix=f"bench-{n}-") as work:
            result = run_one(n, args.apply_seconds, args.max_unavailable, Path(work), args.keep)
        out = RESULTS / f"rollout-{n}.json"
        out.write_text(as_json(result))
        try:
            plot(result, RESULTS / f"rollout-{n}.png")
        except ImportError:
            print("[bench] matplotlib missing (pip install -e '.[bench]'): no plot", file=sys.stderr)
        summary = {k: v for k, v in result.items() if k not in ("curve", "full_list_uris")}
        print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
