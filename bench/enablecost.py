"""What enabling Evented PLEG costs: how long a real kubelet takes to start a pod, to finish deleting one and
to report a container's exit in the pod's phase, with the gate off vs on (k8s#124704
reports a deletion of ~10 s instead of ~5 s with the gate on, kubelet <= 1.36). A benchmark that prints
figures, not a test.

On the real node rig (docs/realnode.md: kubelet + containerd 2.2 on this machine, standalone, static
pods), rounds of gate off, gate on (ABAB); in each, after the gate is written and the kubelet restarted
and --warmup seconds, for --pods pods one after the other:

- start: a static pod's manifest written -> the kubelet reports it Running with its container running
  (`/pods` on the read-only port, which carries a static pod's status in a standalone kubelet), polled
  every 50 ms;
- delete: one second later (as in k8s#124704) the manifest removed -> the kubelet is done with the pod:
  its `"SyncTerminatedPod exit"` line (V(4), the pod worker's last step; on a node with an API server the
  status manager deletes the pod object after it);
- exit: a pod with restartPolicy Never whose container exits by itself after 2 s (code 0 and 1 in turn)
  -> the kubelet reports the pod Succeeded or Failed; from the container's own finishedAt (containerd's
  clock, this machine's) to the first poll that sees the phase.

    .venv/bin/python bench/enablecost.py --kubelet 1.36 --pods 5 --repeats 2

Writes bench/results/enablecost-v<kubelet>.json (every sample, and per gate the median and max of each
measure), rewritten by every run. Needs root and the rig's binaries (`eventedpleg realnode build`); it
refuses to start when another kubelet or containerd holds the rig's fixed loopback ports (the rig is one
per machine; the lab's nodes live in their own network namespaces and cgroups and are not touched).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from eventedpleg.core.node.facts.promtext import parse_metrics
from eventedpleg_lab.realnode import config as cfg
from eventedpleg_lab.realnode import layout as lay
from eventedpleg_lab.realnode import rig as rn
from eventedpleg_lab.realnode.host import line_time, read_since

RESULTS = Path(__file__).resolve().parent / "results"
PODS_URL = f"http://127.0.0.1:{cfg.READ_ONLY_PORT}/pods"
METRICS_URL = f"http://127.0.0.1:{cfg.READ_ONLY_PORT}/metrics"
RIG_PORTS = (10250, cfg.HEALTHZ_PORT, cfg.READ_ONLY_PORT, int(cfg.CONTAINERD_METRICS.rsplit(":", 1)[1]))
POLL = 0.05
MEASURES = ("start_s", "delete_s", "exit_to_phase_s")


def log(message: str) -> None:
    print(f"[enablecost] {message}", file=sys.stderr, flush=True)


def listening_ports() -> set[int]:
    """TCP ports something listens on in this network namespace (/proc/net/tcp{,6}, state 0A)."""
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "0A":
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def pods() -> dict[str, dict[str, Any]]:
    """The kubelet's pods by name (a static pod's name ends in -<node name>)."""
    try:
        with urllib.request.urlopen(PODS_URL, timeout=2) as resp:
            doc = json.loads(resp.read())
    except (OSError, ValueError):
        return {}
    return {str(p["metadata"]["name"]): p for p in doc.get("items") or []}


def running(pod: dict[str, Any] | None) -> bool:
    if pod is None:
        return False
    status = pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    return (
        status.get("phase") == "Running"
        and bool(containers)
        and "running" in (containers[0].get("state") or {})
    )


def manifest(name: str, *, command: Sequence[str] = (), restart: str = "Always") -> str:
    doc = yaml.safe_load(cfg.static_pod(name, command=tuple(command), labels={"app": "enablecost"}))
    doc["spec"]["restartPolicy"] = restart
    return yaml.safe_dump(doc, sort_keys=False)


def wait(check: Callable[[], bool], timeout: float) -> float | None:
    """time.time() at the first poll where check() holds, None after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return time.time()
        time.sleep(POLL)
    return None


def terminated_at(path: Path, since: datetime, full_name: str, timeout: float) -> float | None:
    """Epoch seconds of the kubelet's "SyncTerminatedPod exit" line for this pod, logged after `since`."""
    pattern = re.compile(rf'"SyncTerminatedPod exit" pod="default/{re.escape(full_name)}"')
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in read_since(path, since):
            if pattern.search(line):
                stamp = line_time(line, since.year)
                if stamp is not None:
                    return stamp.timestamp()
        time.sleep(0.2)
    return None


def finished_at(node: rn.RealNode, full_name: str) -> float | None:
    """The exited container's finishedAt (containerd's record), epoch seconds."""
    for ctr in node.containers(all_states=True):
        if ctr.get("labels", {}).get("io.kubernetes.pod.name") != full_name:
            continue
        done = node.crictl("inspect", "-o", "json", ctr["id"])
        if done.returncode != 0:
            continue
        stamp = str(json.loads(done.stdout).get("status", {}).get("finishedAt", ""))
        if stamp and not stamp.startswith("0001"):
            text = re.sub(r"(\.\d{6})\d*", r"\1", stamp).replace("Z", "+00:00")
            return datetime.fromisoformat(text).timestamp()
    return None


def one(node: rn.RealNode, name: str, exit_code: int, timeout: float) -> dict[str, Any]:
    """Start, then delete, a long-running pod; then a pod whose container exits with `exit_code`."""
    manifests = node.layout.at(lay.STATIC_POD_DIR)
    kubelet_log = node.layout.at(lay.KUBELET_LOG)
    full = f"{name}-{cfg.NODE_NAME}"
    sample: dict[str, Any] = {"pod": name}
    path = manifests / f"{name}.yaml"
    written = time.time()
    path.write_text(manifest(name))
    seen = wait(lambda: running(pods().get(full)), timeout)
    sample["start_s"] = None if seen is None else round(seen - written, 3)
    time.sleep(1.0)
    since = datetime.now(UTC)
    removed = time.time()
    path.unlink()
    done = terminated_at(kubelet_log, since, full, timeout)
    sample["delete_s"] = None if done is None else round(done - removed, 3)

    ended, exited = f"{name}-x", f"{name}-x-{cfg.NODE_NAME}"
    path = manifests / f"{ended}.yaml"
    path.write_text(manifest(ended, command=("/bin/sh", "-c", f"sleep 2; exit {exit_code}"), restart="Never"))
    phase = "Succeeded" if exit_code == 0 else "Failed"
    seen = wait(lambda: (pods().get(exited) or {}).get("status", {}).get("phase") == phase, timeout)
    finished = finished_at(node, exited)
    sample["exit_code"] = exit_code
    sample["exit_to_phase_s"] = None if seen is None or finished is None else round(seen - finished, 3)
    since = datetime.now(UTC)
    path.unlink()
    terminated_at(kubelet_log, since, exited, timeout)  # gone before the next pod
    return sample


def gate_seen() -> dict[str, float | None]:
    """What the kubelet says about the gate: its feature metric and Evented PLEG's stream connections."""
    try:
        with urllib.request.urlopen(METRICS_URL, timeout=10) as resp:
            metrics = parse_metrics(resp.read().decode())
    except OSError:
        return {}
    return {
        "feature_enabled": metrics.value("kubernetes_feature_enabled", name="EventedPLEG"),
        "evented_pleg_connections": metrics.value("kubelet_evented_pleg_connection_success_count"),
    }


def stats(values: list[float | None]) -> dict[str, float | int | None]:
    vals = [v for v in values if v is not None]
    return {
        "n": len(vals),
        "median": round(statistics.median(vals), 3) if vals else None,
        "max": round(max(vals), 3) if vals else None,
        "missed": len(values) - len(vals),  # no transition seen within --timeout
    }


def benchmark(args: argparse.Namespace) -> dict[str, Any]:
    node = rn.RealNode(log=log)
    node.setup((args.kubelet,), build_missing=False)
    ours = node.sup.pid(rn.KUBELET) or node.sup.pid(rn.CONTAINERD)
    taken = sorted(listening_ports() & set(RIG_PORTS))
    if taken and not ours:
        raise SystemExit(
            f"ports {taken} are taken by something that is not this rig: another kubelet? refusing"
        )
    samples: list[dict[str, Any]] = []
    gates: list[dict[str, Any]] = []
    try:
        node.up(rn.RigSpec(kubelet=args.kubelet, runtime=cfg.RigRuntime.CONTAINERD_22, pods=0, gate=False))
        for rep in range(args.repeats):
            for gate in (False, True):
                node.write_gate(gate)
                node.restart_kubelet()
                time.sleep(args.warmup)
                arm = "on" if gate else "off"
                gates.append({"round": rep, "gate": gate, **gate_seen(), "load_avg_1m": os.getloadavg()[0]})
                log(f"round {rep} gate {arm}: {args.pods} pods ({gates[-1]})")
                for i in range(args.pods):
                    sample = one(node, f"ec-{rep}-{arm}-{i}", exit_code=i % 2, timeout=args.timeout)
                    samples.append({"round": rep, "gate": gate, **sample})
                    log(f"  {samples[-1]}")
    finally:
        node.down()
    summary = {
        ("on" if gate else "off"): {
            measure: stats([s[measure] for s in samples if s["gate"] == gate]) for measure in MEASURES
        }
        for gate in (False, True)
    }
    return {"samples": samples, "gates": gates, "summary": summary}


def table(doc: dict[str, Any]) -> str:
    names = {
        "start_s": "manifest -> Running",
        "delete_s": "manifest removed -> SyncTerminatedPod exit",
        "exit_to_phase_s": "container exit -> phase Succeeded/Failed",
    }
    lines = ["| measure | gate off: median / max s | gate on: median / max s | samples (off, on) |"]
    lines.append("| --- | --- | --- | --- |")
    for measure, title in names.items():
        off, on = doc["summary"]["off"][measure], doc["summary"]["on"][measure]
        cells = f"{off['median']} / {off['max']} | {on['median']} / {on['max']} | {off['n']}, {on['n']}"
        lines.append(f"| {title} | {cells} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kubelet", default="1.36", choices=sorted(rn.KUBELETS))
    parser.add_argument("--pods", type=int, default=5, help="pods per round and gate")
    parser.add_argument("--repeats", type=int, default=2, help="ABAB rounds (each = gate off, gate on)")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds after each kubelet restart")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for each transition")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    started = datetime.now(UTC)
    load = os.getloadavg()[0]
    doc = benchmark(args)
    doc.update(
        command=" ".join(
            [".venv/bin/python", "bench/enablecost.py", *(argv if argv is not None else sys.argv[1:])]
        ),
        started=started.isoformat(timespec="seconds"),
        finished=datetime.now(UTC).isoformat(timespec="seconds"),
        kubelet=args.kubelet,
        machine={"cpus": os.cpu_count(), "kernel": os.uname().release, "load_avg_1m_at_start": load},
        settings={"pods": args.pods, "repeats": args.repeats, "warmup": args.warmup},
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = args.out or RESULTS / f"enablecost-v{args.kubelet}.json"
    out.write_text(json.dumps(doc, indent=1) + "\n")
    log(f"wrote {out}")
    print(table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
