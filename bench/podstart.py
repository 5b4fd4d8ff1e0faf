"""Does Evented PLEG slow what users feel? Pod start and exit-to-status latency, gate off vs on (not a test).

What is timed is the pod's STATUS, the thing a user or controller sees. Two nodes to run it on:
  --runtime containerd (default): the real-node rig (docs/realnode.md), a real kubelet (--kubelets, default
     1.36 and 1.37) on containerd 2.2, static hostNetwork pods whose image is present. The status is read
     from the kubelet's read-only /pods, which carries the status manager's status for static pods
     (pkg/kubelet/kubelet.go GetPods, "a kubelet running without apiserver requires an additional update
     of the static pod status"), polled every --poll seconds. The gate is the kubelet's drop-in, the
     kubelet restarted.
  --runtime crio: a one-node lab (docs/lab.md) per kubelet of --kubelets, `lab-crio:<kubelet>:<--crio>`,
     brought up in a temporary directory and taken down after (or the CRI-O node of the lab up in
     --lab-dir, left up; its kubelet is the only one measured). Pods of a Deployment pinned to the node
     (bench/benefit.py's CrioLabNode: image present, imagePullPolicy Never); the gate is the product's own
     two drop-ins, crio restarted, then the kubelet. The status is the API server's: a `kubectl get pods
     --watch` of the namespace, each event stamped when this host reads it.

  burst  N pods at once (--sizes, e.g. 20 and 100): the rig writes N manifests, the lab scales the
         Deployment from 0 to N. Per pod: `seen` = from the write (scale) to the pod's first appearance
         (rig: in /pods, the kubelet's file source; lab: in the API, created by the ReplicaSet), the same
         with the gate on or off, and `running` = from that appearance to phase Running with every
         container running (what PLEG feeds). A burst's figures: all N Running (from the write or
         scale), and its median pod (seen to Running).
  exit   SIGKILL a running container's process (rig: its PID from crictl; lab: crictl inspect on the
         node gives the node's PID, mapped to this host's by /proc/<pid>/status NSpid); time until its
         pod's status no longer shows that container running (or shows it restarted). The kubelet learns
         of the exit from PLEG: a relist (generic, every 1 s) or a container event (evented). Each kill
         waits for every exit pod (--exit-pods) to run again; if that takes over 120 s, the kills left
         are counted missed.
  cleanup  the arm's pods removed (rig: manifests removed with the gate turned off first, so a gate-on
         arm's slow deletion, k8s#124704, does not stall the run; lab: scaled to 0 with the arm's gate):
         time until they are gone, or "missed" past --cleanup-timeout (the run goes on). The same
         bounded wait clears the pods before each burst (the burst's `cleared_s`, None past the bound);
         a burst's pods are its own, so one still being torn down is never counted.

Each round runs the gate off, then on (ABAB...), so a change of the machine's load hits both arms; the
kubelet is restarted for every arm (both pay the same restart).

  --guard (rig) the gate is turned on and off as the product does it: the real agent applies and verifies
         the drop-in (eventedpleg_lab.realnode.agentrig), and through each gate-on arm its guard watches the
         node and heals a wedge with a kubelet restart, as on a Done node in production. A wedge then ends
         an arm only when the guard did not end it within 30 s; each gate-on arm adds a `guard` row (what
         the guard saw, the wedge's first sign to its proven heal, a rollback). Results:
         bench/results/podstart-guard.json.
  --load N      N busy processes (one spinning Python each) beside the whole run, so the kubelet competes
         for the cores as on a busy machine (the rig's wedges came at load average 40 to 60); the load
         average is sampled every 5 s and kept with the results (-load<N> in the default file name).

    .venv/bin/python bench/podstart.py --kubelets 1.36,1.37 --sizes 20,100 --repeats 5 --kills 10
    .venv/bin/python bench/podstart.py --runtime crio --kubelets 1.36,1.37 --sizes 20,100 --repeats 5
    .venv/bin/python bench/podstart.py --guard --kubelets 1.36 --sizes 20,100 --repeats 3 --kills 10
    .venv/bin/python bench/podstart.py --guard --load 40 --kubelets 1.36 --sizes 20,100 --repeats 3
    .venv/bin/python bench/podstart.py --table bench/results/podstart.json

Results: bench/results/podstart.json (rig) or podstart-crio.json (lab), rewritten by every run, and the
markdown table on stdout. Needs root, and the rig's binaries (`eventedpleg realnode build`) or the lab's
(`eventedpleg lab up` builds what is missing).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import benefit
from eventedpleg.agent.metrics import AgentMetrics
from eventedpleg.agent.runner import GuardLoop
from eventedpleg.core.node.facts.guardsigns import line_time
from eventedpleg.protocol import NodeState
from eventedpleg.reasons import EventReason
from eventedpleg_lab.lab import assets, chart
from eventedpleg_lab.lab.nodes import LabRuntime
from eventedpleg_lab.localcluster.cluster import kubectl_path
from eventedpleg_lab.realnode import config as cfg
from eventedpleg_lab.realnode import layout as lay
from eventedpleg_lab.realnode import rig as rn
from eventedpleg_lab.realnode.agentrig import NODE, AgentRig, make_agent_rig

RESULTS = Path(__file__).resolve().parent / "results"
PODS_URL = f"http://127.0.0.1:{cfg.READ_ONLY_PORT}/pods"
EXIT_SECONDS = 30.0  # a kill whose exit the status has not shown by then is "missed"
RUNTIME_NAMES = {"containerd": "containerd 2.2 (the real-node rig)"}


def log(message: str) -> None:
    print(f"[podstart {datetime.now(UTC):%H:%M:%S}] {message}", file=sys.stderr, flush=True)


# --- what a pod's status says (pure) ---------------------------------------------------------------------


def is_running(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    return (
        status.get("phase") == "Running"
        and bool(containers)
        and all("running" in (c.get("state") or {}) for c in containers)
    )


def still_running(pod: Mapping[str, Any] | None, container_id: str) -> bool:
    """Whether the pod's status still shows this container running (the kubelet has not seen it exit)."""
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
    return any(
        str(c.get("containerID", "")).endswith(container_id) and "running" in (c.get("state") or {})
        for c in statuses
    )


def restarts(pod: Mapping[str, Any]) -> int:
    return sum(
        int(c.get("restartCount", 0)) for c in (pod.get("status") or {}).get("containerStatuses") or []
    )


def exit_shown(pod: Mapping[str, Any] | None, container_id: str, restarts_before: int) -> bool:
    """The status shows the killed container's exit: it is no longer running, or the pod restarted it."""
    return pod is not None and (not still_running(pod, container_id) or restarts(pod) > restarts_before)


def burst_row(
    size: int, start: float, seen: Mapping[str, float], running: Mapping[str, float]
) -> dict[str, Any]:
    """A burst's figures from when each pod was first seen and first Running (monotonic seconds)."""
    done = sorted(running.values())
    to_running = sorted(running[n] - seen[n] for n in running if n in seen)
    return {
        "size": size,
        "all_running_s": done[size - 1] - start if 0 < size <= len(done) else None,
        "seen_s": statistics.median(seen[n] - start for n in seen) if seen else None,
        "running_median_s": statistics.median(to_running) if to_running else None,
        "running_max_s": to_running[-1] if to_running else None,
        "missed": max(0, size - len(running)),
    }


def waited(check: Callable[[], bool], timeout: float, every: float) -> float | None:
    """Seconds until `check` held, None when it still did not after `timeout`."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            return None
        time.sleep(every)
    return time.monotonic() - start


def kills_until_stuck(
    kills: int,
    all_running: Callable[[], bool],
    not_running: Callable[[], list[str]],
    kill: Callable[[int], float | None],
    gap: float,
    wait: float = 120.0,
) -> list[float | None]:
    """`kill(i)` for each kill once every exit pod runs again; pods the status never shows Running again
    within `wait` seconds are a user-visible fault of their own: the kills left are counted missed, not a
    crash (a gate-on arm of kubelet 1.36 on the rig left its exit pods unseen for 120 s)."""
    out: list[float | None] = []
    for i in range(kills):
        if waited(all_running, wait, 0.2) is None:
            log(f"not Running after {wait:.0f}s: {not_running()}; {kills - i} kills counted missed")
            return out + [None] * (kills - i)
        out.append(kill(i))
        time.sleep(gap)
    return out


# kubelet v1.36.4 pkg/kubelet/pleg/evented.go Healthy(): EventedPLEG is unhealthy while the PLEG channel
# (kubelet.go plegChannelCapacity = 1000, shared with the generic PLEG) is full; kubelet.go registers that
# check (addHealthCheck "EventedPLEG") and syncLoop skips every iteration while one fails ("Skipping pod
# synchronization"), so nothing reads the channel again: the kubelet starts and stops no pod until it is
# restarted. The generic PLEG had this deadlock until k8s#72709 (2019); 1.37 registers no such check.
WEDGED = "EventedPLEG is not healthy"


class KubeletLog:
    """The first WEDGED line of the rig kubelet's log since `mark()`, read by offset (it grows to GBs)."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.line = path, 0, ""

    def mark(self) -> None:
        self.offset, self.line = (self.path.stat().st_size if self.path.exists() else 0), ""

    def wedged(self) -> str:
        if not self.line and self.path.exists():
            with self.path.open("rb") as f:
                f.seek(self.offset)
                new = f.read()
            self.offset += len(new)
            self.line = next(
                (x.strip() for x in new.decode(errors="replace").splitlines() if WEDGED in x), ""
            )
        return self.line


class Arms(Protocol):
    """What one node does for the rounds: the rig's static pods or the lab's Deployment."""

    def set_gate(self, gate: bool) -> None: ...  # write the gate, restart what must restart

    def burst(self, size: int) -> dict[str, Any]: ...  # burst_row + cleared_s

    def exits(self, kills: int) -> list[float | None]: ...

    def cleanup(self, gate: bool) -> float | None: ...  # the arm's pods gone: seconds, None past the bound

    def wedged(self) -> str: ...  # the kubelet's WEDGED line since set_gate, "" while it syncs pods

    def incidents(self) -> list[dict[str, Any]]: ...  # --guard: what the guard saw in the arm (kind guard)


def rounds(arms: Arms, kubelet: str, args: argparse.Namespace, runs: list[dict[str, Any]]) -> None:
    """--repeats rounds of gate off, gate on on one node; rows appended to `runs`, the file rewritten
    after every arm (marked partial) so a run cut short keeps what it measured."""
    for rep in range(args.repeats):
        for gate in (False, True):
            arms.set_gate(gate)
            row = {"kubelet": kubelet, "gate": gate, "round": rep}
            for size in args.sizes:
                result = arms.burst(size)
                runs.append({**row, "kind": "burst", **result})
                log(f"v{kubelet} gate={'on' if gate else 'off'} round {rep}: burst {result}")
                if arms.wedged():
                    break
            if args.kills and not arms.wedged():
                for latency in arms.exits(args.kills):
                    runs.append({**row, "kind": "exit", "s": latency})
            runs.extend({**row, **incident} for incident in arms.incidents())
            wedged = arms.wedged()
            if wedged:  # what a user would see: no pod starts or stops on the node any more
                runs.append({**row, "kind": "wedged", "line": wedged[:400]})
                log(f"v{kubelet} gate={'on' if gate else 'off'} round {rep}: kubelet wedged: {wedged[:200]}")
                arms.set_gate(False)  # only a restart brings it back; the arm's pods go with the gate off
            cleared = arms.cleanup(gate and not wedged)
            runs.append({**row, "kind": "cleanup", "s": cleared})
            log(f"v{kubelet} gate={'on' if gate else 'off'} round {rep}: cleanup {cleared}")
            partial = {
                "runtime_name": args.runtime,
                "runs": runs,
                "summary": summarize(runs),
                "partial": True,
            }
            args.out.write_text(json.dumps(partial, indent=1) + "\n")


class Load:
    """`hogs` spinning processes while it is entered, and the load average sampled meanwhile."""

    def __init__(self, hogs: int, every: float = 5.0) -> None:
        self.hogs, self.every = hogs, every
        self.procs: list[subprocess.Popen[bytes]] = []
        self.samples: list[float] = []
        self.stop = threading.Event()
        self.sampler = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while True:
            self.samples.append(os.getloadavg()[0])
            if self.stop.wait(self.every):
                return

    def __enter__(self) -> Load:
        spin = [sys.executable, "-c", "while True: pass"]
        self.procs = [subprocess.Popen(spin) for _ in range(self.hogs)]
        self.sampler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for proc in self.procs:
            proc.kill()
        for proc in self.procs:
            proc.wait()
        self.sampler.join()

    def figures(self) -> dict[str, Any]:
        mean = round(statistics.fmean(self.samples), 1) if self.samples else None
        return {"hogs": self.hogs, "mean": mean, "max": max(self.samples, default=None)}


# --- the real-node rig ------------------------------------------------------------------------------------


def idle_pods(prefix: str = cfg.IDLE_PREFIX) -> dict[str, dict[str, Any]]:
    """Our idle static pods whose name starts with `prefix`, as the kubelet reports them, by pod name."""
    with urllib.request.urlopen(PODS_URL, timeout=5) as answer:
        items = json.load(answer).get("items") or []
    return {p["metadata"]["name"]: p for p in items if p["metadata"]["name"].startswith(prefix)}


class RigArms:
    """The rig's kubelet + containerd 2.2, static pods read back from the kubelet's /pods."""

    def __init__(self, node: rn.RealNode, args: argparse.Namespace) -> None:
        self.node, self.args = node, args
        self.bursts = 0
        self.log = KubeletLog(node.layout.at(lay.KUBELET_LOG))

    def set_gate(self, gate: bool) -> None:
        self.node.write_gate(gate)
        self.node.restart_kubelet()
        self.log.mark()

    def wedged(self) -> str:
        return self.log.wedged()

    def incidents(self) -> list[dict[str, Any]]:
        return []

    def _gone(self) -> float | None:
        return waited(lambda: self.node.running_idle() == 0, self.args.cleanup_timeout, 0.5)

    def burst(self, size: int) -> dict[str, Any]:
        """Its pods have names of their own, so a pod of an earlier burst still being torn down is never
        taken for one of this burst."""
        self.node.set_pods(0)
        cleared = self._gone()
        self.bursts += 1
        prefix = f"{cfg.IDLE_PREFIX}b{self.bursts:03d}-"
        names = [f"{prefix}{i:03d}" for i in range(size)]
        start = time.monotonic()
        self.node.set_pods(0, extra={f"{n}.yaml": cfg.static_pod(n) for n in names})
        seen: dict[str, float] = {}
        running: dict[str, float] = {}
        while len(running) < size and time.monotonic() - start < self.args.timeout and not self.wedged():
            now = time.monotonic()
            for name, pod in idle_pods(prefix).items():
                seen.setdefault(name, now)
                if name not in running and is_running(pod):
                    running[name] = now
            time.sleep(self.args.poll)
        return {**burst_row(size, start, seen, running), "cleared_s": cleared}

    def exits(self, kills: int) -> list[float | None]:
        self.node.set_pods(self.args.exit_pods)
        waited(lambda: self.node.running_idle() == self.args.exit_pods, self.args.cleanup_timeout, 0.5)
        first = cfg.idle_pod_name(0)[:-1]  # the --exit-pods pods: idle-000, idle-001, ...
        return kills_until_stuck(
            kills,
            lambda: all(is_running(p) for p in idle_pods(first).values()),
            lambda: sorted(n for n, p in idle_pods(first).items() if not is_running(p)),
            self.kill,
            self.args.kill_gap,
        )

    def kill(self, i: int) -> float | None:
        """Kill the container of the i-th exit pod (round robin); seconds until the status shows it."""
        first = cfg.idle_pod_name(0)[:-1]
        pods = idle_pods(first)
        if not pods:
            return None
        name = sorted(pods)[i % len(pods)]
        before = restarts(pods[name])
        cid = next(
            (
                ctr["id"]
                for ctr in self.node.containers()
                if ctr.get("labels", {}).get("io.kubernetes.pod.name") == name
            ),
            None,
        )
        pid = self.node.container_pid(cid) if cid else None
        if pid is None or cid is None:
            return None
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        shown = waited(
            lambda: exit_shown(idle_pods(first).get(name), cid, before), EXIT_SECONDS, self.args.poll
        )
        return None if shown is None else time.monotonic() - killed

    def cleanup(self, gate: bool) -> float | None:
        # Torn down with the gate off: with it on, a deletion waits for the next relist (k8s#124704,
        # ~13 s a pod here, >300 s for 100), which is not what is timed.
        start = time.monotonic()
        self.node.set_pods(0)
        if gate:
            self.set_gate(False)
        gone = self._gone()
        return None if gone is None else time.monotonic() - start


# A guarded arm's kubelet counts as wedged, as a user sees it, only when it is not syncing pods again this
# long after the first sign (issue text: a wedged node syncs pods again within 30 s).
HEAL_BOUND = 30.0
DETECTED = (EventReason.PLEG_WEDGED, EventReason.POD_STATUS_LOST, EventReason.EVENT_STREAM_LOST)


class GuardedRigArms(RigArms):
    """--guard: the gate turned on and off as the product does it: the real agent applies the product's
    drop-in and verifies it (AgentRig.apply, as the realnode tests drive it; the rig's own bench drop-in
    removed), and its guard watches the node through each gate-on arm, every guard_interval_seconds on a
    thread of its own (agent.runner.GuardLoop), healing with a kubelet restart. `wedged` names an arm's
    wedge only when the guard did not end it within HEAL_BOUND; `incidents` gives one row a gate-on arm:
    what the guard saw and the time from the first sign to its proven heal."""

    def __init__(self, node: rn.RealNode, args: argparse.Namespace) -> None:
        super().__init__(node, args)
        self.rig: AgentRig | None = None
        self.loop: GuardLoop | None = None
        self.events: list[tuple[str, float]] = []
        self.marked, self.gate = 0.0, False
        self.looks = 0  # the guard's looks at the node since the arm began (proof that it watched)

    def begin(self, kubelet: str) -> None:
        """On a node just brought up: the product's drop-in alone decides, the agent's API side fresh."""
        self.node.write_gate(None)
        self.node.restart_kubelet()
        rig = self.rig = make_agent_rig(self.node, kubelet)
        rig.agent.interpreter.metrics = AgentMetrics()
        emit = rig.api.emit_event

        def timed(node: Any, *, reason: str, message: str, warning: bool = False) -> None:
            self.events.append((reason, time.time()))
            emit(node, reason=reason, message=message, warning=warning)

        rig.api.emit_event = timed  # type: ignore[method-assign]
        guard = rig.agent.guard

        def counted() -> Any:
            self.looks += 1
            return guard()

        rig.agent.guard = counted  # type: ignore[method-assign]

    def stop(self) -> None:
        if self.loop is not None:
            self.loop.stop()
            self.loop.thread.join(timeout=180)
            self.loop = None

    def set_gate(self, gate: bool) -> None:
        rig = self.rig
        assert rig is not None, "begin() first"
        self.stop()
        if gate:
            rig.apply(enabled=True)
            if rig.state != NodeState.DONE:
                raise RuntimeError(f"the agent did not turn the gate on: {rig.annotations}")
            rig.agent.seen = rig.api.view(NODE)
            self.loop = GuardLoop(rig.agent, threading.Lock())
            self.loop.start()
        elif self.gate and rig.state == NodeState.DONE:  # on, not rolled back by the guard
            rig.apply(enabled=False)  # generic PLEG verified, through the same path
        elif self.gate and rig.state != NodeState.ROLLED_BACK:
            raise RuntimeError(f"the gate is neither on nor taken off by the guard: {rig.annotations}")
        else:
            self.node.restart_kubelet()  # every arm pays one restart
        self.gate, self.marked, self.looks = gate, time.time(), 0
        self.log.mark()

    def _first_sign(self) -> float | None:
        line = self.log.wedged()
        when = line_time(line, datetime.now(UTC)) if line else None
        return None if when is None else when.timestamp()

    def _first(self, reasons: Iterable[str]) -> float | None:
        wanted = set(reasons)
        return next((t for r, t in self.events if r in wanted and t >= self.marked), None)

    def wedged(self) -> str:
        line = self.log.wedged()
        first = self._first_sign()
        if not line or first is None:
            return line
        healed = self._first([EventReason.PLEG_WEDGE_HEALED])
        if healed is not None and healed - first <= HEAL_BOUND:
            return ""
        return "" if time.time() - first <= HEAL_BOUND else line

    def incidents(self) -> list[dict[str, Any]]:
        if not self.gate:
            return []
        seen = [r for r, t in self.events if t >= self.marked and r in DETECTED]
        first = self._first_sign()
        healed = self._first([EventReason.PLEG_WEDGE_HEALED])
        return [
            {
                "kind": "guard",
                "incidents": seen,
                "wedge_line": bool(self.log.wedged()),
                "healed_s": None if first is None or healed is None else round(healed - first, 1),
                "rolled_back": self._first([EventReason.GUARD_ROLLED_BACK]) is not None,
                "looks": self.looks,
            }
        ]

    def cleanup(self, gate: bool) -> float | None:
        """The agent takes the gate off first, untimed (its revert is verified over a window of its own),
        then the arm's pods are removed and timed, as RigArms times a teardown with the gate off."""
        if gate:
            self.set_gate(False)
        return super().cleanup(False)


def rig_benchmark(args: argparse.Namespace) -> list[dict[str, Any]]:
    node = rn.RealNode(log=log)
    node.setup(tuple(args.kubelets), build_missing=False)
    runs: list[dict[str, Any]] = []
    arms = GuardedRigArms(node, args) if args.guard else RigArms(node, args)
    try:
        for kubelet in args.kubelets:
            node.up(rn.RigSpec(kubelet=kubelet, runtime=cfg.RigRuntime.CONTAINERD_22, pods=0, gate=False))
            if isinstance(arms, GuardedRigArms):
                arms.begin(kubelet)
            rounds(arms, kubelet, args, runs)
            if isinstance(arms, GuardedRigArms):
                arms.stop()
            node.down()
    finally:
        if isinstance(arms, GuardedRigArms):
            arms.stop()
        node.down()
    return runs


# --- the lab's CRI-O node ---------------------------------------------------------------------------------


class JsonStream:
    """Whole JSON documents out of `kubectl get --watch -o json` lines: one event a line (kubectl 1.37),
    or one spread over lines (an indented printer); a document is tried where a line ends with `}`."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def feed(self, line: str) -> dict[str, Any] | None:
        self.lines.append(line)
        if not line.rstrip().endswith("}"):
            return None
        try:
            doc = json.loads("".join(self.lines))
        except ValueError:
            return None  # not the end of the document yet
        self.lines.clear()
        return doc if isinstance(doc, dict) else None


class PodHistory:
    """What a watch of one namespace said of each live pod: (read at, object) per event, in order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: dict[str, list[tuple[float, dict[str, Any]]]] = {}

    def record(self, at: float, event: Mapping[str, Any]) -> None:
        pod = event.get("object") or {}
        name = (pod.get("metadata") or {}).get("name")
        if not name:
            return
        with self.lock:
            if event.get("type") == "DELETED":
                self.events.pop(name, None)
            else:
                self.events.setdefault(name, []).append((at, pod))

    def names(self) -> set[str]:
        with self.lock:
            return set(self.events)

    def first(self, check: Callable[[Mapping[str, Any]], bool], since: float = 0.0) -> dict[str, float]:
        """Per live pod, when this host first read an object of it (at or after `since`) that passes."""
        with self.lock:
            found: dict[str, float] = {}
            for name, events in self.events.items():
                at = next((at for at, pod in events if at >= since and check(pod)), None)
                if at is not None:
                    found[name] = at
            return found


class PodWatch:
    """`kubectl get pods --watch` of one namespace in a thread (run again if it ends), each event stamped
    with this host's monotonic clock when read, into a PodHistory."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.argv = list(argv)
        self.history = PodHistory()
        self.stopped = threading.Event()
        self.proc: subprocess.Popen[str] | None = None
        self.thread = threading.Thread(target=self._run, name="podwatch", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.is_set():
            self.proc = subprocess.Popen(
                self.argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
            )
            assert self.proc.stdout is not None
            stream = JsonStream()
            for line in self.proc.stdout:
                event = stream.feed(line)
                if event is not None:
                    self.history.record(time.monotonic(), event)
            self.proc.wait()
            self.stopped.wait(1.0)

    def stop(self) -> None:
        self.stopped.set()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        self.thread.join(timeout=10)


def host_pid(node_pid: int, cgroup_mark: str) -> int | None:
    """This host's PID of the process a node sees as `node_pid` (the second NSpid field: host, node, ...),
    among the processes of the node's cgroup."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            nspid = next((ln.split()[1:] for ln in status.splitlines() if ln.startswith("NSpid:")), [])
            if len(nspid) > 1 and int(nspid[1]) == node_pid and cgroup_mark in (entry / "cgroup").read_text():
                return int(entry.name)
        except (OSError, ValueError):
            continue
    return None


def api_container_id(pod: Mapping[str, Any]) -> str | None:
    """The first container's runtime ID without its scheme (cri-o://<id>)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    raw = str(statuses[0].get("containerID") or "") if statuses else ""
    return raw.split("://", 1)[-1] or None


class LabArms:
    """The lab's CRI-O node (bench/benefit.py's CrioLabNode): deploy/idle of namespace bench scaled."""

    def __init__(self, node: benefit.CrioLabNode, args: argparse.Namespace) -> None:
        self.node, self.args = node, args
        self.since = datetime.now(UTC)
        self.watch = PodWatch(
            [
                kubectl_path(),
                f"--kubeconfig={node.lab.kubeconfig}",
                "-n",
                benefit.BENCH_NAMESPACE,
                "get",
                "pods",
                "--watch",
                "--output-watch-events",
                "-o",
                "json",
            ]
        )

    def set_gate(self, gate: bool) -> None:
        self.node.set_gate(gate)
        self.since = datetime.now(UTC)

    def wedged(self) -> str:
        """From the node's journal (the kubelet is a unit there)."""
        done = self.node.on_node("journalctl", "-u", "kubelet", "--since", f"@{self.since.timestamp():.0f}",
            "--grep", WEDGED, "-n", "1", "-o", "cat", "--no-pager")  # fmt: skip
        return done.stdout.strip() if done.returncode == 0 else ""

    def incidents(self) -> list[dict[str, Any]]:
        return []

    def scale(self, replicas: int) -> None:
        chart.kubectl_ok(
            self.node.lab, "-n", benefit.BENCH_NAMESPACE, "scale", "deploy/idle", f"--replicas={replicas}"
        )

    def pods(self) -> dict[str, dict[str, Any]]:
        """The namespace's pods as one list call returns them (not the watch: it can miss a deletion
        while it is run again)."""
        items = chart.get_json(self.node.lab, "pods", "-n", benefit.BENCH_NAMESPACE)["items"]
        return {p["metadata"]["name"]: p for p in items}

    def serving(self) -> dict[str, dict[str, Any]]:
        """Running pods not being deleted (a pod of an earlier arm may still be terminating)."""
        return {
            n: p
            for n, p in self.pods().items()
            if is_running(p) and not p["metadata"].get("deletionTimestamp")
        }

    def _gone(self) -> float | None:
        self.scale(0)
        return waited(lambda: not self.pods(), self.args.cleanup_timeout, 1.0)

    def burst(self, size: int) -> dict[str, Any]:
        cleared = self._gone()
        before = self.watch.history.names() | set(self.pods())
        start = time.monotonic()
        self.scale(size)
        seen: dict[str, float] = {}
        running: dict[str, float] = {}
        while time.monotonic() - start < self.args.timeout:
            seen = {
                n: t for n, t in self.watch.history.first(lambda _: True, start).items() if n not in before
            }
            running = {n: t for n, t in self.watch.history.first(is_running, start).items() if n in seen}
            if len(running) >= size:
                break
            time.sleep(self.args.poll)
        return {**burst_row(size, start, seen, running), "cleared_s": cleared}

    def exits(self, kills: int) -> list[float | None]:
        self._gone()
        self.scale(self.args.exit_pods)
        return kills_until_stuck(
            kills,
            lambda: len(self.serving()) >= self.args.exit_pods,
            lambda: sorted(set(self.pods()) - set(self.serving())),
            self.kill,
            self.args.kill_gap,
        )

    def kill(self, i: int) -> float | None:
        """Kill the container of the i-th exit pod (round robin); seconds until the API shows it."""
        pods = self.serving()
        if not pods:
            return None
        name = sorted(pods)[i % len(pods)]
        before = restarts(pods[name])
        cid = api_container_id(pods[name])
        pid = self._host_pid(cid) if cid else None
        if pid is None or cid is None:
            return None
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        shown: dict[str, float] = {}
        while name not in shown and time.monotonic() - killed < EXIT_SECONDS:
            time.sleep(self.args.poll)
            shown = self.watch.history.first(lambda p: exit_shown(p, cid, before), killed)
        return shown[name] - killed if name in shown else None

    def _host_pid(self, container_id: str) -> int | None:
        done = self.node.on_node(
            "crictl", "--runtime-endpoint", benefit.CRIO_SOCKET, "inspect", "-o", "json", container_id
        )
        if done.returncode != 0:
            return None
        pid = json.loads(done.stdout or "{}").get("info", {}).get("pid")
        return host_pid(int(pid), f"/{self.node.spec.cgroup}/") if pid else None

    def cleanup(self, gate: bool) -> float | None:
        return self._gone()  # with the arm's gate: a gate-on arm's slow deletion (k8s#124704) is measured

    def stop(self) -> None:
        self.watch.stop()


def crio_benchmark(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows and the node(s) measured: a one-node lab per kubelet, or the CRI-O node up in --lab-dir."""
    runs: list[dict[str, Any]] = []
    nodes: list[str] = []
    for kubelet in [None] if args.lab_dir else args.kubelets:
        with benefit.crio_lab_node(args.lab_dir, f"lab-crio:{kubelet}:{args.crio}") as node:
            nodes.append(
                f"{node.spec.to_text()} (CRI-O {assets.CRIO_VERSIONS[node.spec.runtime]}, conmon and runc "
                "from Debian)"
            )
            arms = LabArms(node, args)
            try:
                rounds(arms, node.spec.kubelet, args, runs)
            finally:
                arms.stop()
    return runs, nodes


# --- results (pure) ---------------------------------------------------------------------------------------


def _stats(values: Iterable[float | None]) -> dict[str, Any]:
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return {"n": 0, "median": None, "min": None, "max": None}
    return {"n": len(vals), "median": statistics.median(vals), "min": vals[0], "max": vals[-1]}


def summarize(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per kubelet, kind, burst size and gate: median, min and max over the runs, and what was missed."""
    rows: list[dict[str, Any]] = []
    keys = sorted({(r["kubelet"], r["kind"], r.get("size", 0), r["gate"]) for r in runs})
    for kubelet, kind, size, gate in keys:
        same = [
            r
            for r in runs
            if (r["kubelet"], r["kind"], r.get("size", 0), r["gate"]) == (kubelet, kind, size, gate)
        ]
        row: dict[str, Any] = {"kubelet": kubelet, "kind": kind, "size": size, "gate": gate}
        if kind == "wedged":  # out of the arms of that kubelet and gate
            row["arms"] = len({r["round"] for r in runs if (r["kubelet"], r["gate"]) == (kubelet, gate)})
            row["wedged"] = len(same)
        elif kind == "guard":  # one row a guarded gate-on arm
            row["arms"] = len(same)
            row["with_incident"] = sum(1 for r in same if r["incidents"] or r["wedge_line"])
            row["wedged_past_bound"] = sum(
                1 for r in same if r["wedge_line"] and (r["healed_s"] is None or r["healed_s"] > HEAL_BOUND)
            )
            row["healed_s"] = _stats(r["healed_s"] for r in same)
            row["rolled_back"] = sum(1 for r in same if r["rolled_back"])
            row["looks"] = _stats(r.get("looks") for r in same)
        elif kind == "burst":
            row["all_running_s"] = _stats(r["all_running_s"] for r in same)
            row["running_median_s"] = _stats(r["running_median_s"] for r in same)
            row["missed"] = sum(r["missed"] for r in same)
        else:  # exit, cleanup: one figure each, None when it did not happen within its bound
            row["s"] = _stats(r["s"] for r in same)
            row["missed"] = sum(1 for r in same if r["s"] is None)
        rows.append(row)
    return rows


def _fmt(stats: dict[str, Any], missed: int = 0) -> str:
    late = f", {missed} missed" if missed else ""
    if not stats["n"]:
        return f"-{f' ({missed} missed)' if missed else ''}"
    return f"{stats['median']:.2f} ({stats['min']:.2f}-{stats['max']:.2f}, n={stats['n']}{late})"


KINDS = ("burst", "exit", "cleanup", "wedged", "guard")  # the order of the table's rows for a kubelet
WHAT = {
    "exit": "container exit to pod status",
    "cleanup": "the arm's pods gone (teardown)",
    "wedged": f"arms whose kubelet stopped syncing pods ({WEDGED})",
}


def table(doc: dict[str, Any]) -> str:
    """The markdown table of a results file (docs/benchmarks.md): medians with (min-max, n, missed)."""
    runtime = doc.get("runtime_name", "containerd")
    lines = [
        "| runtime | kubelet | what | gate off: median s (min-max, n) | gate on: median s (min-max, n) |",
        "| --- | --- | --- | --- | --- |",
    ]
    rows = {(r["kubelet"], r["kind"], r["size"], r["gate"]): r for r in doc["summary"]}
    for kubelet, kind, size in sorted({k[:3] for k in rows}, key=lambda k: (k[0], KINDS.index(k[1]), k[2])):
        off, on = rows.get((kubelet, kind, size, False)), rows.get((kubelet, kind, size, True))
        if kind == "burst":
            for key, what in (
                ("all_running_s", f"{size} pods: all Running"),
                ("running_median_s", f"{size} pods: a pod, seen to Running (median pod)"),
            ):
                cells = [_fmt(r[key]) if r else "-" for r in (off, on)]
                lines.append(f"| {runtime} | {kubelet} | {what} | {cells[0]} | {cells[1]} |")
        elif kind == "wedged":
            cells = [f"{r['wedged']} of {r['arms']}" if r else "0" for r in (off, on)]
            lines.append(f"| {runtime} | {kubelet} | {WHAT[kind]} | {cells[0]} | {cells[1]} |")
        elif kind == "guard" and on:
            for what, cell in (
                (
                    "guard: arms with an incident (a wedge line or a guard Event)",
                    f"{on['with_incident']} of {on['arms']}",
                ),
                (f"guard: arms wedged past {HEAL_BOUND:.0f} s", f"{on['wedged_past_bound']} of {on['arms']}"),
                ("guard: wedge's first sign to its proven heal", _fmt(on["healed_s"])),
                ("guard: nodes rolled back by the guard", f"{on['rolled_back']} of {on['arms']}"),
                ("guard: its looks at the node, per arm", _fmt(on["looks"])),
            ):
                lines.append(f"| {runtime} | {kubelet} | {what} | - | {cell} |")
        else:
            cells = [_fmt(r["s"], r["missed"]) if r else "-" for r in (off, on)]
            lines.append(f"| {runtime} | {kubelet} | {WHAT.get(kind, kind)} | {cells[0]} | {cells[1]} |")
    load = doc.get("load_during") or {}
    if load.get("hogs"):
        lines.append(
            f"\nWith {load['hogs']} busy processes beside the run: load average (1 min) mean {load['mean']}, "
            f"max {load['max']:.1f}."
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runtime", default="containerd", choices=("containerd", "crio"))
    parser.add_argument("--kubelets", default="1.36,1.37", help="comma-separated kubelets (rig or lab)")
    parser.add_argument(
        "--crio", default=LabRuntime.CRIO_136.value, choices=[r.value for r in LabRuntime if r.is_crio]
    )
    parser.add_argument("--lab-dir", type=Path, default=None, help="crio: use the lab up in DIR (left up)")
    parser.add_argument("--sizes", default="20,100", help="comma-separated burst sizes")
    parser.add_argument("--repeats", type=int, default=5, help="rounds (each = gate off, gate on)")
    parser.add_argument("--kills", type=int, default=10, help="container kills per round and gate")
    parser.add_argument("--exit-pods", type=int, default=5, help="pods running while containers are killed")
    parser.add_argument("--kill-gap", type=float, default=3.0, help="seconds between kills")
    parser.add_argument("--poll", type=float, default=0.05, help="seconds between reads of the status")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds a burst may take")
    parser.add_argument(
        "--cleanup-timeout", type=float, default=300.0, help="seconds to wait for pods to be gone"
    )
    parser.add_argument(
        "--guard", action="store_true", help="rig: the agent turns the gate on and off, its guard watching"
    )
    parser.add_argument("--load", type=int, default=0, help="busy processes beside the run (0: none)")
    parser.add_argument(
        "--out", type=Path, default=None, help="default bench/results/podstart[-crio|-guard][-load<N>].json"
    )
    parser.add_argument("--table", type=Path, default=None, help="print the table of a results file")
    args = parser.parse_args(argv)
    if args.table is not None:
        print(table(json.loads(args.table.read_text())))
        return 0
    args.kubelets = [k for k in args.kubelets.split(",") if k]
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    if not args.sizes or min(args.sizes) < 1:
        parser.error("--sizes: burst sizes are 1 or more")
    if args.guard and args.runtime != "containerd":
        parser.error("--guard: the rig's arms only (--runtime containerd)")
    if args.load < 0:
        parser.error("--load: 0 or more busy processes")
    kind = "-crio" if args.runtime == "crio" else "-guard" if args.guard else ""
    args.out = args.out or RESULTS / f"podstart{kind}{f'-load{args.load}' if args.load else ''}.json"
    started = datetime.now(UTC)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with Load(args.load) as load:
        if args.runtime == "crio":
            runs, nodes = crio_benchmark(args)
            runtime = "; ".join(nodes)
        else:
            runs, runtime = rig_benchmark(args), RUNTIME_NAMES["containerd"]
    doc = {
        "runtime_name": args.runtime,
        "runs": runs,
        "summary": summarize(runs),
        "command": " ".join(["bench/podstart.py", *(argv if argv is not None else sys.argv[1:])]),
        "started": started.isoformat(timespec="seconds"),
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "runtime": runtime,
        "status_from": "kubelet /pods, polled"
        if args.runtime == "containerd"
        else "API server, kubectl watch",
        "machine": {"cpus": os.cpu_count(), "kernel": os.uname().release, "load": os.getloadavg()},
        "load_during": load.figures(),
    }
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    log(f"wrote {args.out}")
    print(table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
