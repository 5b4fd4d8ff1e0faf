"""Does Evented PLEG slow what users feel? Pod start and exit-to-status latency, gate off vs on (not a test).

On the real-node rig (docs/realnode.md): a real kubelet (--kubelets, default 1.36 and 1.37) on containerd
2.2, static hostNetwork pods whose image is present. What is timed is the pod's STATUS, the thing a user or
controller sees: the kubelet's read-only /pods, which carries the status manager's status for static pods
(pkg/kubelet/kubelet.go GetPods, "a kubelet running without apiserver requires an additional update of the
static pod status"), polled every --poll seconds.

  burst  N pod manifests written at once (--sizes, e.g. 20 and 100). Per pod: `seen` = from the write to the
         pod's first appearance in /pods (the kubelet's file source, the same with the gate on or off), and
         `running` = from that appearance to phase Running with every container running (what PLEG
         feeds). A burst's figure is its slowest pod (all N Running), and its median pod.
  exit   SIGKILL a running container's process; time until its pod's status no longer shows that
         container running (or shows it restarted). The kubelet learns of the exit from PLEG: a relist
         (generic, every 1 s) or a container event (evented).

Each round runs the gate off, then on (ABAB...), so a change of the machine's load hits both arms; the
kubelet is restarted for every arm (both pay the same restart).

    .venv/bin/python bench/podstart.py --kubelets 1.36,1.37 --sizes 20,100 --repeats 5 --kills 10
    .venv/bin/python bench/podstart.py --table bench/results/podstart.json

Results: bench/results/podstart.json (rewritten by every run) and its markdown table on stdout. Needs root
and the rig's binaries (`eventedpleg realnode build`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time
import urllib.request
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from eventedpleg_lab.realnode import config as cfg
from eventedpleg_lab.realnode import rig as rn

RESULTS = Path(__file__).resolve().parent / "results"
PODS_URL = f"http://127.0.0.1:{cfg.READ_ONLY_PORT}/pods"


def log(message: str) -> None:
    print(f"[podstart {datetime.now(UTC):%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def idle_pods(prefix: str = cfg.IDLE_PREFIX) -> dict[str, dict[str, Any]]:
    """Our idle static pods whose name starts with `prefix`, as the kubelet reports them, by pod name."""
    with urllib.request.urlopen(PODS_URL, timeout=5) as answer:
        items = json.load(answer).get("items") or []
    return {p["metadata"]["name"]: p for p in items if p["metadata"]["name"].startswith(prefix)}


def is_running(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    return (
        status.get("phase") == "Running"
        and bool(containers)
        and all("running" in (c.get("state") or {}) for c in containers)
    )


def still_running(pod: dict[str, Any] | None, container_id: str) -> bool:
    """Whether the pod's status still shows this container running (the kubelet has not seen it exit)."""
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
    return any(
        str(c.get("containerID", "")).endswith(container_id) and "running" in (c.get("state") or {})
        for c in statuses
    )


def restarts(pod: dict[str, Any]) -> int:
    return sum(
        int(c.get("restartCount", 0)) for c in (pod.get("status") or {}).get("containerStatuses") or []
    )


def until(check: Any, timeout: float, what: str, every: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def burst(node: rn.RealNode, size: int, number: int, poll: float, timeout: float) -> dict[str, Any]:
    """One burst; its pods have names of their own, so a pod of an earlier burst still being torn down
    is never taken for one of this burst."""
    node.set_pods(0)
    until(lambda: node.running_idle() == 0, 300, "no idle containers", 0.5)
    prefix = f"{cfg.IDLE_PREFIX}b{number:03d}-"
    names = [f"{prefix}{i:03d}" for i in range(size)]
    start = time.monotonic()
    node.set_pods(0, extra={f"{n}.yaml": cfg.static_pod(n) for n in names})
    seen: dict[str, float] = {}
    running: dict[str, float] = {}
    while len(running) < size and time.monotonic() - start < timeout:
        now = time.monotonic()
        for name, pod in idle_pods(prefix).items():
            seen.setdefault(name, now)
            if name not in running and is_running(pod):
                running[name] = now
        time.sleep(poll)
    to_running = sorted(running[n] - seen[n] for n in running)
    return {
        "size": size,
        "all_running_s": max(running.values()) - start if len(running) == size else None,
        "seen_s": statistics.median(seen[n] - start for n in seen) if seen else None,
        "running_median_s": statistics.median(to_running) if to_running else None,
        "running_max_s": to_running[-1] if to_running else None,
        "missed": size - len(running),
    }


def exit_latency(node: rn.RealNode, kills: int, poll: float, gap: float) -> list[float | None]:
    out: list[float | None] = []
    first = cfg.idle_pod_name(0)[:-1]  # the --exit-pods pods: idle-000, idle-001, ...
    for i in range(kills):
        try:
            until(
                lambda: all(is_running(p) for p in idle_pods(first).values()), 120, "every pod Running", 0.2
            )
        except TimeoutError as exc:  # a user-visible fault of its own: counted as missed, not a crash
            log(f"{exc}: {sorted(n for n, p in idle_pods(first).items() if not is_running(p))}")
            out.extend([None] * (kills - i))
            break
        pods = idle_pods(first)
        name = sorted(pods)[i % len(pods)]
        before = restarts(pods[name])
        cid = next(
            (
                ctr["id"]
                for ctr in node.containers()
                if ctr.get("labels", {}).get("io.kubernetes.pod.name") == name
            ),
            None,
        )
        pid = node.container_pid(cid) if cid else None
        if pid is None or cid is None:
            out.append(None)
            continue
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        seen: float | None = None
        while time.monotonic() - killed < 30:
            pod = idle_pods(first).get(name)
            if pod is not None and (not still_running(pod, cid) or restarts(pod) > before):
                seen = time.monotonic() - killed
                break
            time.sleep(poll)
        out.append(seen)
        time.sleep(gap)
    return out


def benchmark(args: argparse.Namespace) -> dict[str, Any]:
    node = rn.RealNode(log=log)
    node.setup(tuple(args.kubelets), build_missing=False)
    runs: list[dict[str, Any]] = []
    bursts = 0
    try:
        for kubelet in args.kubelets:
            node.up(rn.RigSpec(kubelet=kubelet, runtime=cfg.RigRuntime.CONTAINERD_22, pods=0, gate=False))
            for rep in range(args.repeats):
                for gate in (False, True):
                    node.write_gate(gate)
                    node.restart_kubelet()
                    for size in args.sizes:
                        bursts += 1
                        result = burst(node, size, bursts, args.poll, args.timeout)
                        runs.append(
                            {"kubelet": kubelet, "gate": gate, "round": rep, "kind": "burst", **result}
                        )
                        log(f"v{kubelet} gate={'on' if gate else 'off'} round {rep}: burst {result}")
                    if args.kills:
                        node.set_pods(args.exit_pods)
                        until(lambda: node.running_idle() == args.exit_pods, 300, "only the exit pods", 0.5)
                        for latency in exit_latency(node, args.kills, args.poll, args.kill_gap):
                            runs.append(
                                {"kubelet": kubelet, "gate": gate, "round": rep, "kind": "exit", "s": latency}
                            )
                    # The arm's pods are torn down with the gate off: with it on, a deletion waits for the
                    # next relist (k8s#124704, ~13 s a pod here, >300 s for 100), which is not what is timed.
                    node.set_pods(0)
                    if gate:
                        node.write_gate(False)
                        node.restart_kubelet()
                    until(lambda: node.running_idle() == 0, args.timeout, "the arm's pods gone", 0.5)
                    # A run cut short keeps what it measured (marked partial).
                    partial = {"runs": runs, "summary": summarize(runs), "partial": True}
                    args.out.write_text(json.dumps(partial, indent=1) + "\n")
            node.down()
    finally:
        node.down()
    return {"runs": runs, "summary": summarize(runs)}


def _stats(values: Iterable[float | None]) -> dict[str, Any]:
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return {"n": 0, "median": None, "min": None, "max": None}
    return {"n": len(vals), "median": statistics.median(vals), "min": vals[0], "max": vals[-1]}


def summarize(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    keys = sorted({(r["kubelet"], r["kind"], r.get("size", 0), r["gate"]) for r in runs})
    for kubelet, kind, size, gate in keys:
        same = [
            r
            for r in runs
            if (r["kubelet"], r["kind"], r.get("size", 0), r["gate"]) == (kubelet, kind, size, gate)
        ]
        row: dict[str, Any] = {"kubelet": kubelet, "kind": kind, "size": size, "gate": gate}
        if kind == "burst":
            row["all_running_s"] = _stats(r["all_running_s"] for r in same)
            row["running_median_s"] = _stats(r["running_median_s"] for r in same)
            row["missed"] = sum(r["missed"] for r in same)
        else:
            row["s"] = _stats(r["s"] for r in same)
            row["missed"] = sum(1 for r in same if r["s"] is None)
        rows.append(row)
    return rows


def _fmt(stats: dict[str, Any]) -> str:
    if not stats["n"]:
        return "-"
    return f"{stats['median']:.2f} ({stats['min']:.2f}-{stats['max']:.2f}, n={stats['n']})"


def table(doc: dict[str, Any]) -> str:
    """The markdown table of a results file (docs/benchmarks.md): medians with (min-max, n)."""
    lines = [
        "| kubelet | what | gate off: median s (min-max, n) | gate on: median s (min-max, n) |",
        "| --- | --- | --- | --- |",
    ]
    rows = {(r["kubelet"], r["kind"], r["size"], r["gate"]): r for r in doc["summary"]}
    for kubelet, kind, size in sorted({k[:3] for k in rows}):
        off, on = rows.get((kubelet, kind, size, False)), rows.get((kubelet, kind, size, True))
        if kind == "burst":
            for key, what in (
                ("all_running_s", f"{size} pods: all Running"),
                ("running_median_s", f"{size} pods: a pod, seen to Running (median pod)"),
            ):
                cells = [_fmt(r[key]) if r else "-" for r in (off, on)]
                lines.append(f"| {kubelet} | {what} | {cells[0]} | {cells[1]} |")
        else:
            cells = [_fmt(r["s"]) if r else "-" for r in (off, on)]
            lines.append(f"| {kubelet} | container exit to pod status | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kubelets", default="1.36,1.37", help="comma-separated rig kubelets")
    parser.add_argument("--sizes", default="20,100", help="comma-separated burst sizes")
    parser.add_argument("--repeats", type=int, default=5, help="rounds (each = gate off, gate on)")
    parser.add_argument("--kills", type=int, default=10, help="container kills per round and gate")
    parser.add_argument("--exit-pods", type=int, default=5, help="pods running while containers are killed")
    parser.add_argument("--kill-gap", type=float, default=3.0, help="seconds between kills")
    parser.add_argument("--poll", type=float, default=0.05, help="seconds between reads of /pods")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds a burst may take")
    parser.add_argument("--out", type=Path, default=RESULTS / "podstart.json")
    parser.add_argument("--table", type=Path, default=None, help="print the table of a results file")
    args = parser.parse_args(argv)
    if args.table is not None:
        print(table(json.loads(args.table.read_text())))
        return 0
    args.kubelets = [k for k in args.kubelets.split(",") if k]
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    started = datetime.now(UTC)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    doc = benchmark(args)
    doc.update(
        command=" ".join(["bench/podstart.py", *(argv if argv is not None else sys.argv[1:])]),
        started=started.isoformat(timespec="seconds"),
        finished=datetime.now(UTC).isoformat(timespec="seconds"),
        runtime="containerd 2.2 (the real-node rig)",
        machine={"cpus": os.cpu_count(), "kernel": os.uname().release, "load": os.getloadavg()},
    )
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    log(f"wrote {args.out}")
    print(table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
