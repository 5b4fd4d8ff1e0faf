"""What does Evented PLEG save? A benchmark on the real node rig (issue 8; not a test).

CPU/relist benchmark (kubelet v1.36 + containerd 2.2), for each N in --pods and --repeats rounds of
gate off, gate on (ABAB...):
  1. N idle hostNetwork static pods, started with the gate off (docs/realnode.md: no duplicate containers);
  2. write the gate drop-in, restart the kubelet (every phase restarts it, so both arms pay the same);
  3. warm up --warmup seconds, then a fixed --window: deltas of
     - utime+stime(+children) of the kubelet, containerd and every shim from /proc/<pid>/stat;
     - the kubelet's process_cpu_seconds_total (cross-check), kubelet_pleg_relist_interval_seconds and
       kubelet_pleg_relist_duration_seconds (sum, count, buckets);
     - containerd's grpc_server_handled_total per CRI method (metrics address 127.0.0.1:1338).
Exit latency (--latency; kubelet v1.37 by default): SIGKILL a container's process and time until the
kubelet's sync loop gets the ContainerDied PLEG event (`SyncLoop (PLEG): event for pod`), gate off vs on.

    .venv/bin/python bench/benefit.py --kubelet 1.36 --pods 0,50,100 --repeats 3 --warmup 300 --window 900
    .venv/bin/python bench/benefit.py --latency --kubelet 1.37 --kills 20
    .venv/bin/python bench/benefit.py --plot bench/results/<file>.json     # PNG + markdown table

Results: bench/results/*.json. Needs root and the rig's binaries (`eventedpleg realnode build`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import sys
import time
import urllib.request
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from eventedpleg.core.promtext import Metrics, parse_metrics
from eventedpleg_lab.realnode import config as cfg
from eventedpleg_lab.realnode import layout as lay
from eventedpleg_lab.realnode import rig as rn
from eventedpleg_lab.realnode.host import line_time, read_since

RESULTS = Path(__file__).resolve().parent / "results"
CLK_TCK = os.sysconf("SC_CLK_TCK")
CRI_METHODS = (
    "ListPodSandbox",
    "ListContainers",
    "PodSandboxStatus",
    "ContainerStatus",
    "GetContainerEvents",
)
KUBELET_METRICS = f"http://127.0.0.1:{cfg.READ_ONLY_PORT}/metrics"
CONTAINERD_METRICS = f"http://{cfg.CONTAINERD_METRICS}/v1/metrics"


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


class Sample:
    def __init__(self, node: rn.RealNode) -> None:
        self.at = time.monotonic()
        kubelet = node.sup.pid(rn.KUBELET)
        containerd = node.sup.pid(rn.CONTAINERD)
        self.kubelet_pid = kubelet
        self.cpu: dict[str, float | None] = {
            "kubelet": cpu_seconds(kubelet) if kubelet else None,
            "containerd": cpu_seconds(containerd) if containerd else None,
        }
        self.shims = {pid: cpu_seconds(pid) for pid in node.our_shims()}
        self.kubelet = scrape(KUBELET_METRICS)
        self.containerd = scrape(CONTAINERD_METRICS)


def measure(first: Sample, second: Sample) -> dict[str, Any]:
    seconds = second.at - first.at
    out: dict[str, Any] = {"seconds": round(seconds, 1)}
    cores: dict[str, float | None] = {}
    for name in ("kubelet", "containerd"):
        a, b = first.cpu[name], second.cpu[name]
        cores[name] = None if a is None or b is None else (b - a) / seconds
    shim_cpu = [(second.shims[p] or 0.0) - (first.shims[p] or 0.0) for p in second.shims if p in first.shims]
    cores["shims"] = sum(shim_cpu) / seconds
    out["cpu_cores"] = cores
    out["shims"] = len(second.shims)
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
    if first.containerd is not None and second.containerd is not None:
        methods = {
            s.label("grpc_method") or ""
            for s in second.containerd.find("grpc_server_handled_total")
            if s.label("grpc_service") == "runtime.v1.RuntimeService"
        }
        for method in sorted(methods):
            cri[method] = _delta(
                first.containerd,
                second.containerd,
                "grpc_server_handled_total",
                grpc_service="runtime.v1.RuntimeService",
                grpc_method=method,
            )
    out["cri_calls"] = cri
    out["cri_calls_per_minute"] = {m: (v or 0.0) * 60 / seconds for m, v in cri.items()}
    return out


def phase(node: rn.RealNode, pods: int, gate: bool, warmup: float, window: float) -> dict[str, Any]:
    node.write_gate(gate)
    node.restart_kubelet()
    node.wait_pods(pods, timeout=600)
    log(f"N={pods} gate={'on' if gate else 'off'}: warm-up {warmup:.0f}s, window {window:.0f}s")
    time.sleep(warmup)
    first = Sample(node)
    time.sleep(window)
    second = Sample(node)
    result = measure(first, second)
    result.update(pods=pods, gate=gate, containers=len(node.containers()))
    result["duplicates"] = duplicate_containers(node)
    return result


def duplicate_containers(node: rn.RealNode) -> int:
    """Running containers beyond one per (pod, container name): the static-pod bug (k8s#123087)."""
    seen: dict[tuple[str, str], int] = {}
    for ctr in node.containers():
        labels = ctr.get("labels", {})
        key = (labels.get("io.kubernetes.pod.name", ""), labels.get("io.kubernetes.container.name", ""))
        seen[key] = seen.get(key, 0) + 1
    return sum(n - 1 for n in seen.values() if n > 1)


def cpu_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    node = rn.RealNode(log=log)
    node.setup((args.kubelet,), build_missing=False)
    runs: list[dict[str, Any]] = []
    try:
        for pods in args.pods:
            log(f"N={pods}: bringing the node up (pods start with the gate off)")
            node.up(
                rn.RigSpec(kubelet=args.kubelet, runtime=cfg.RigRuntime.CONTAINERD_22, pods=pods, gate=False)
            )
            for rep in range(args.repeats):
                for gate in (False, True):
                    result = phase(node, pods, gate, args.warmup, args.window)
                    result["round"] = rep
                    runs.append(result)
                    k = result["cpu_cores"]["kubelet"]
                    relists = result["relist"]["kubelet_pleg_relist_interval_seconds"]["count"]
                    log(f"  -> kubelet {1000 * (k or 0):.1f}m, relists {relists}, dup {result['duplicates']}")
    finally:
        node.down()
    return {"kind": "cpu", "runs": runs, "summary": summarize(runs)}


def _mean_sd(values: Iterable[float | None]) -> dict[str, float | int | None]:
    vals = [v for v in values if v is not None]
    if not vals:
        return {"mean": None, "sd": None, "n": 0}
    return {
        "mean": statistics.fmean(vals),
        "sd": statistics.stdev(vals) if len(vals) > 1 else 0.0,
        "n": len(vals),
    }


def summarize(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
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
                    "containerd_mcores": _scaled(_mean_sd(r["cpu_cores"]["containerd"] for r in mine)),
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


def _container_pid(node: rn.RealNode, container_id: str) -> int | None:
    done = node.crictl("inspect", "-o", "json", container_id)
    if done.returncode != 0:
        return None
    pid = json.loads(done.stdout).get("info", {}).get("pid")
    return int(pid) if pid else None


def _victim(node: rn.RealNode, pod: str) -> tuple[str, int] | None:
    for ctr in node.containers():
        if ctr.get("labels", {}).get("io.kubernetes.pod.name", "").startswith(pod):
            pid = _container_pid(node, ctr["id"])
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
    lines = [
        "| pods | gate | kubelet CPU (m) | containerd (m) | shims (m) | relists/min | relist interval s "
        "| ListPodSandbox/min | ListContainers/min | windows | dup |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in doc["summary"]:
        cri = row["cri_calls_per_minute"]
        lines.append(
            f"| {row['pods']} | {'on' if row['gate'] else 'off'} | {_fmt(row['kubelet_mcores'])} "
            f"| {_fmt(row['containerd_mcores'])} | {_fmt(row['shims_mcores'])} "
            f"| {_fmt(row['relists_per_minute'])} | {_fmt(row['relist_interval_mean_s'])} "
            f"| {_fmt(cri.get('ListPodSandbox'))} | {_fmt(cri.get('ListContainers'))} "
            f"| {row['windows']} | {row['duplicates']} |"
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

        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for ax, key, title in (
            (axes[0], "kubelet_mcores", "kubelet CPU (millicores)"),
            (axes[1], "containerd_mcores", "containerd CPU (millicores)"),
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
        fig.suptitle(f"kubelet v{doc['kubelet']} + containerd 2.2, {doc['settings']['window']:.0f}s windows")
        fig.tight_layout()
        fig.savefig(path.with_suffix(".png"), dpi=90)
    return table(doc)


# --- main -----------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kubelet", default=None, choices=sorted(rn.KUBELETS))
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
        runtime="containerd v2.2.9 (runc 1.1.5, Debian)",
        machine={"cpus": os.cpu_count(), "kernel": os.uname().release},
        settings={"warmup": args.warmup, "window": args.window, "repeats": args.repeats, "pods": args.pods},
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = args.out or RESULTS / f"{doc['kind']}-v{args.kubelet}-{started:%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps(doc, indent=1) + "\n")
    log(f"wrote {out}")
    print(render(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
