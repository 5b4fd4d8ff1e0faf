"""How long is a node out of service while Evented PLEG is turned on? A benchmark on the lab (not a
test).

One run: the lab comes up (docs/lab.md; real kubelets, containerd and CRI-O in systemd-nspawn machines,
the default node set or --nodes), the product is installed as `eventedpleg demo --lab` installs it (the
image, the chart, the web Deployment behind its PodDisruptionBudget), a watch on every Node starts, then
the NodeConfig (eventedPleg: true) is applied and the run waits until it is Available (or Degraded, or
--timeout). The watch records, at the moment each event arrives (time.monotonic() and the wall clock),
every change of a node's spec.unschedulable and of its eventedpleg.io/state annotation.

Per node that the rollout cordoned and that ended Done, the out-of-service time is cordon -> uncordon,
split into
  drain    cordon -> Applying      (the operator evicts the node's pods; the web pods stop in 8 s);
  apply    Applying -> Verifying   (the agent: backups, the files written, the runtime then the kubelet
                                    restarted);
  verify   Verifying -> Done       (the agent's verification: /healthz, then its 10 s window);
  uncordon Done -> uncordon        (the operator's reaction).
Nodes never cordoned (skipped from their Node object or by the agent's host check) are listed with their
end state. The whole rollout is apply -> Available. One run measures one rollout of the default node set
(one node per kubelet/runtime pair that ends Done), not a distribution: run it again to see the spread.
The lab is taken down at the end, whatever happened.

    .venv/bin/python bench/outofservice.py                  # bench/results/outofservice.json
    .venv/bin/python bench/outofservice.py --tag before     # outofservice-before.json as well
    .venv/bin/python bench/outofservice.py --no-workload --tag empty   # nodes with no pod of a workload

Writes bench/results/outofservice.json, the headline, rewritten by every run (`started` inside says
when); `--tag T` writes outofservice-T.json as well, to keep a run beside the headline (a "before" for a
comparison). Needs root and the lab's assets (`eventedpleg lab up` builds what is missing).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from eventedpleg import protocol
from eventedpleg.k8s import nodeconfigs
from eventedpleg.k8s.client import api_client
from eventedpleg.k8s.errors import ApiError
from eventedpleg.k8s.informer import NodeInformer
from eventedpleg_lab.lab import chart, nodes
from eventedpleg_lab.lab.lab import Lab

RESULTS = Path(__file__).resolve().parent / "results"
S = protocol.NodeState
# The segments of a Done node's time out of service: (name, from, to); "cordon"/"uncordon" are
# spec.unschedulable turning true/false, the rest are eventedpleg.io/state values.
SEGMENTS = (
    ("drain", "cordon", S.APPLYING.value),
    ("apply", S.APPLYING.value, S.VERIFYING.value),
    ("verify", S.VERIFYING.value, S.DONE.value),
    ("uncordon", S.DONE.value, "uncordon"),
)


def log(message: str) -> None:
    print(f"[bench {datetime.now(UTC):%H:%M:%S}] {message}", file=sys.stderr, flush=True)


@dataclass
class Change:
    t: float  # time.monotonic() when the event arrived
    wall: str  # the wall clock then, ISO 8601 with milliseconds
    what: str  # "cordon", "uncordon", or a state value ("" when the annotation went away)


@dataclass
class NodeRecorder:
    """Every change of spec.unschedulable and of eventedpleg.io/state, per node, as the watch sees it."""

    changes: dict[str, list[Change]] = field(default_factory=dict)
    last: dict[str, tuple[bool, str]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def event(self, kind: str, body: dict[str, Any]) -> None:
        t, wall = time.monotonic(), datetime.now(UTC).isoformat(timespec="milliseconds")
        if kind == "DELETED":
            return
        name = str(body["metadata"]["name"])
        now = (
            bool((body.get("spec") or {}).get("unschedulable")),
            str((body["metadata"].get("annotations") or {}).get(protocol.ANN_STATE, "")),
        )
        with self.lock:
            before = self.last.get(name)
            self.last[name] = now
            if before is None:  # the first LIST: the starting point, not a change
                self.changes[name] = []
                return
            if now[0] != before[0]:
                self.changes[name].append(Change(t, wall, "cordon" if now[0] else "uncordon"))
            if now[1] != before[1]:
                self.changes[name].append(Change(t, wall, now[1]))


def first_after(changes: list[Change], what: str, since: float) -> Change | None:
    return next((ch for ch in changes if ch.what == what and ch.t >= since), None)


def node_result(name: str, changes: list[Change], applied_at: float, node: dict[str, Any]) -> dict[str, Any]:
    """One node's figures: its changes (seconds since the apply), and for a node cordoned and ended Done,
    the out-of-service time and its segments."""
    annotations = node.get("metadata", {}).get("annotations") or {}
    out: dict[str, Any] = {
        "node": name,
        "state": annotations.get(protocol.ANN_STATE, ""),
        "reason": annotations.get(protocol.ANN_REASON, ""),
        "changes": [
            {"t": round(ch.t - applied_at, 3), "wall": ch.wall, "what": ch.what or "(removed)"}
            for ch in changes
        ],
    }
    cordon = first_after(changes, "cordon", applied_at)
    out["cordoned"] = cordon is not None
    if cordon is None:
        return out
    marks: dict[str, Change | None] = {"cordon": cordon}
    for _, start, end in SEGMENTS:
        begun = marks.get(start)
        marks[end] = first_after(changes, end, begun.t) if begun is not None else None
    uncordon, done = marks["uncordon"], marks[S.DONE.value]
    if uncordon is None or done is None:
        return out
    out["out_of_service_s"] = round(uncordon.t - cordon.t, 3)
    out["segments_s"] = {}
    for label, start, end in SEGMENTS:
        a, b = marks[start], marks[end]
        out["segments_s"][label] = round(b.t - a.t, 3) if a is not None and b is not None else None
    evidence = _json(annotations.get(protocol.ANN_EVIDENCE))
    out["verification_window"] = evidence.get("window")
    out["evidence_result"] = evidence.get("result")
    out["benefit"] = _json(annotations.get(protocol.ANN_BENEFIT))
    return out


def _json(text: str | None) -> dict[str, Any]:
    try:
        doc = json.loads(text or "{}")
    except ValueError:
        return {"unparsed": text}
    return doc if isinstance(doc, dict) else {"unparsed": text}


def settled(api: Any) -> str | None:
    """ "Available" or "Degraded" once the NodeConfig is, for its latest generation; None before."""
    try:
        body = nodeconfigs.get(api, chart.NODECONFIG)
    except ApiError as exc:
        log(f"(API error, polling on: {exc})")
        return None
    status = body.get("status") or {}
    if status.get("observedGeneration", 0) < body["metadata"]["generation"]:
        return None
    now = chart.conditions(body)
    return next((cond for cond in ("Available", "Degraded") if now.get(cond) == "True"), None)


def measure(lab: Lab, specs: tuple[nodes.NodeSpec, ...], timeout: float) -> dict[str, Any]:
    """Watch the Nodes, apply the NodeConfig, wait until it settles; every node's figures."""
    recorder = NodeRecorder()
    api = api_client(str(lab.kubeconfig))
    synced = threading.Event()
    informer = NodeInformer(api, recorder.event, lambda _: synced.set())
    informer.start()
    try:
        if not synced.wait(60):
            raise SystemExit("the Node watch did not list the nodes within 60 s")
        applied_at, applied_wall = time.monotonic(), datetime.now(UTC).isoformat(timespec="milliseconds")
        chart.apply_nodeconfig(lab, evented_pleg=True)
        log("NodeConfig applied; waiting until it is Available")
        verdict = None
        while verdict is None and time.monotonic() - applied_at < timeout:
            time.sleep(0.5)
            verdict = settled(api)
        rollout_s = time.monotonic() - applied_at
        time.sleep(2)  # the last events (an uncordon right before Available) reach the recorder
    finally:
        informer.close()
    # Each agent publishes its benefit figures one window (30 s) after Done: wait for them to be read.
    benefits_missing = chart.missing_benefits(lab, specs) if verdict == "Available" else []
    body = nodeconfigs.get(api, chart.NODECONFIG)
    listed = {n["name"]: n for n in (body.get("status") or {}).get("nodeStatuses", [])}
    found = lab.nodes()
    with recorder.lock:
        per_node = [
            node_result(name, recorder.changes.get(name, []), applied_at, found.get(name, {}))
            for name in sorted(recorder.last)
        ]
    for row in per_node:  # a node skipped from its Node object alone has its state only in the status
        if not row["state"] and row["node"] in listed:
            row["state"] = listed[row["node"]].get("state", "")
            row["reason"] = listed[row["node"]].get("reason", "")
    done = [r for r in per_node if "out_of_service_s" in r and r["state"] == S.DONE.value]
    oos = [r["out_of_service_s"] for r in done]
    return {
        "verdict": verdict or f"timed out after {timeout:.0f}s",
        "applied": applied_wall,
        "rollout_s": round(rollout_s, 1),
        "out_of_service_s": {
            "median": round(statistics.median(oos), 1) if oos else None,
            "max": round(max(oos), 1) if oos else None,
            "nodes": len(oos),
        },
        "segments_median_s": {
            label: round(statistics.median(r["segments_s"][label] for r in done), 1) if done else None
            for label, _, _ in SEGMENTS
        },
        "nodes": per_node,
        "benefits_missing": benefits_missing,
    }


def table(result: dict[str, Any]) -> str:
    head = f"{'node':<14} {'out of service':>14} " + " ".join(f"{s[0]:>8}" for s in SEGMENTS)
    lines = [head + "  verify window", "-" * (len(head) + 15)]
    for row in result["nodes"]:
        if "out_of_service_s" not in row:
            continue
        segments = " ".join(
            f"{v:>8.1f}" if v is not None else f"{'?':>8}" for v in row["segments_s"].values()
        )
        lines.append(
            f"{row['node']:<14} {row['out_of_service_s']:>13.1f}s {segments}  {row['verification_window']}"
        )
    oos = result["out_of_service_s"]
    lines.append(f"out of service: median {oos['median']}s, max {oos['max']}s over {oos['nodes']} Done nodes")
    lines.append(f"rollout (apply -> {result['verdict']}): {result['rollout_s']}s")
    others = [r for r in result["nodes"] if "out_of_service_s" not in r]
    if others:
        lines.append("not measured (never cordoned, or not Done):")
        for row in others:
            how = "cordoned" if row["cordoned"] else "never cordoned"
            lines.append(f"  {row['node']:<14} {row['state'] or '-':<10} {how}: {row['reason'][:90]}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", default=nodes.DEFAULT_SPEC, help="the lab's node set (eventedpleg lab up)")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds for the rollout")
    parser.add_argument("--tag", default="", help="also write outofservice-<tag>.json")
    parser.add_argument(
        "--no-workload",
        action="store_true",
        help="without the web Deployment: only the operator's own pods are evicted",
    )
    args = parser.parse_args()
    specs = nodes.parse(args.nodes)
    started = datetime.now(UTC)
    timings: dict[str, float] = {}
    with chart.product_lab(specs, log, timings, workload=not args.no_workload) as lab:
        log(f"product installed ({json.dumps(timings)}); export KUBECONFIG={lab.kubeconfig}")
        result = measure(lab, specs, args.timeout)
    doc = {
        "kind": "outofservice",
        "command": " ".join([".venv/bin/python", "bench/outofservice.py", *sys.argv[1:]]),
        "started": started.isoformat(timespec="seconds"),
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "kernel": os.uname().release},
        "lab": {"nodes": args.nodes, "workload": not args.no_workload, "timings": timings},
        "nodeconfig": json.loads(chart.nodeconfig(True)),
        **result,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    names = {"outofservice"} | ({f"outofservice-{args.tag}"} if args.tag else set())
    for name in sorted(names):
        out = RESULTS / f"{name}.json"
        out.write_text(json.dumps(doc, indent=1) + "\n")
        log(f"wrote {out}")
    print(table(doc))
    return 0 if result["verdict"] == "Available" else 1


if __name__ == "__main__":
    sys.exit(main())
