"""On demand: a kubelet ≤ 1.36 with the EventedPLEG gate stops syncing pods until it is restarted.

Why it wedges (k8s.io/kubernetes v1.36.4, `pkg/kubelet`; docs/compatibility.md "kubelet-pleg-wedge"):

- `kubelet.go:205,859`: one channel of `plegChannelCapacity = 1000` events, shared by the generic and the
  evented PLEG; `syncLoopIteration` (`kubelet.go:2733`) is its only reader, one event per pass.
- `pleg/evented.go:173-175`: `Healthy()` fails while `len(eventChannel) == cap(eventChannel)`;
  `kubelet.go:890-891` registers it as the runtime health check "EventedPLEG".
- `kubelet.go:2644-2650`: `syncLoop` asks `runtimeState.runtimeErrors()` (`runtime.go:122-141`, every
  check) before each pass; while it fails it logs "Skipping pod synchronization", sleeps (100 ms doubling
  to 5 s) and `continue`s without reading the channel. A channel full when `syncLoop` checks stays full.
- `pleg/evented.go:323-331`, `pleg/generic.go:395-400`: producers never block; into a full channel they
  discard (`kubelet_pleg_discard_events`).

How `fire` makes it happen: a kubelet start meeting more than 1000 exited containers of one pod.

- With the kubelet stopped, through CRI (crictl): a sandbox of our own, and `containers` containers
  labelled as its pod's (one container name), created, started and stopped in helper sandboxes. The
  kubelet groups containers into pods by that label (`kuberuntime/kuberuntime_manager.go:526-536`).
- The kubelet starts. The generic PLEG relists at once (`pleg/generic.go:170-177`) and finds a pod it has no
  record of: one `GetPodStatus`, then one ContainerDied per exited container, sent back to back
  (`pleg/generic.go:336-418`), > 1000 in a few milliseconds.
- The consumer is slowest on exactly these: for each ContainerDied, `cleanUpContainersInPod`
  (`kubelet.go:2746-2750`, `:3370-3376`) sorts every exited container of that name and tries to queue all
  but one for removal into a 50-slot channel, logging each one it cannot (`pod_container_deletor.go:66-117`).
- So the channel fills before `syncLoop` has drained more than a few, and its next check finds it full.
  Meanwhile containerd hands over the churn's held CRI events too (v2.2.9 `internal/eventq/eventq.go:91,99`,
  kept 5 minutes: `internal/cri/server/service.go:224`).

What a user meets the same way: a kubelet (re)started on a node with more than ~1000 containers, running or
exited, which the generic PLEG alone reports as discards (k8s#104117) and the evented check turns into the
wedge. Kubelet 1.37 registers no EventedPLEG health check (`kubelet.go:903`), so the same trigger leaves it
syncing (it discards, then drains).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from eventedpleg.core.node.facts.promtext import parse_metrics
from eventedpleg_lab.realnode import layout as lay
from eventedpleg_lab.realnode.images import IDLE_IMAGE
from eventedpleg_lab.realnode.rig import KUBELET, RealNode, RigError

SKIP_LINE = "Skipping pod synchronization"
WEDGE_LINE = "EventedPLEG is not healthy"  # the err of SKIP_LINE while the channel is full
FULL_LINE = "pleg event channel capacity is full with 1000 events"
DISCARDS = "kubelet_pleg_discard_events"
LAST_SEEN = "kubelet_pleg_last_seen_seconds"
# One observation per CRI event with a sandbox, 1.36 and 1.37 alike (pleg/evented.go updateLatencyMetric).
EVENTS_SEEN = "kubelet_evented_pleg_connection_latency_seconds_count"
SANDBOX = {"name": "wedge-churn", "namespace": "eventedpleg-wedge", "uid": "eventedpleg-wedge-churn"}
# The kubelet groups containers into pods by their io.kubernetes.pod.uid label, not by sandbox
# (kuberuntime/kuberuntime_manager.go:526-536): the exited containers sit in helper sandboxes of BATCH each
# (every CRI event carries the status of each container in its sandbox) and all count as SANDBOX's pod.
CONTAINER_LABELS = {
    "io.kubernetes.pod.uid": SANDBOX["uid"],
    "io.kubernetes.pod.name": SANDBOX["name"],
    "io.kubernetes.pod.namespace": SANDBOX["namespace"],
    "io.kubernetes.container.name": "churn",  # one name: each exit weighs every exited sibling (below)
}
CONTAINERS = 1100  # exited, of one pod: > 1000 ContainerDied from the kubelet's first relist at once
BATCH = 100  # containers per helper sandbox
WATCH_SECONDS = 60.0


@dataclass(frozen=True)
class Fired:
    kubelet: str
    containers: int
    churn_seconds: float  # the kubelet stopped, the containers created/started/stopped/removed
    offset: int  # the kubelet log's size when the kubelet was started again
    line: str  # its first WEDGE_LINE since then, "" if none within `watch`
    line_after_s: float | None  # from the kubelet's start to that line, as polled

    @property
    def wedged(self) -> bool:
        return bool(self.line)

    def to_json(self) -> dict[str, object]:
        return {
            "kubelet": self.kubelet,
            "containers": self.containers,
            "churnSeconds": round(self.churn_seconds, 1),
            "wedged": self.wedged,
            "lineAfterSeconds": None if self.line_after_s is None else round(self.line_after_s, 2),
            "line": self.line[:300],
        }


@dataclass(frozen=True)
class PlegMetrics:
    """What /metrics says about the channel: discards so far, and how old the PLEG's last healthy pass is.

    `kubelet_pleg_last_seen_seconds` is set by every health check that passes (`pleg/generic.go:244`: the
    last relist; `pleg/evented.go:178-179`: now), and `syncLoop` runs them at least once a second
    (`syncTicker`, `kubelet.go:2626`). While wedged only the generic one passes, so it is the last relist
    (every 300 s with the gate on, `kubelet.go:219`)."""

    discards: float
    last_seen_age_s: float
    events_seen: float  # CRI events the evented PLEG has taken from the stream since the kubelet started

    @staticmethod
    def parse(body: str, now: float) -> PlegMetrics:
        metrics = parse_metrics(body)
        last_seen = metrics.value(LAST_SEEN)
        if last_seen is None:
            raise RigError(f"the kubelet serves no {LAST_SEEN}")
        return PlegMetrics(
            discards=metrics.value(DISCARDS) or 0.0,
            last_seen_age_s=now - last_seen,
            events_seen=metrics.value(EVENTS_SEEN) or 0.0,
        )

    @staticmethod
    def read(rig: RealNode) -> PlegMetrics:
        return PlegMetrics.parse(rig.metrics(), time.time())

    @staticmethod
    def poll(rig: RealNode) -> PlegMetrics | None:
        """`read`, or None while the kubelet does not answer yet (it is starting)."""
        try:
            return PlegMetrics.read(rig)
        except OSError:
            return None


def lines_since(rig: RealNode, offset: int) -> list[str]:
    with rig.layout.at(lay.KUBELET_LOG).open("rb") as handle:
        handle.seek(offset)
        return handle.read().decode(errors="replace").splitlines()


def is_wedge_line(line: str) -> bool:
    """A skipped sync-loop pass because the channel is full (not the start-up skips of every kubelet)."""
    return SKIP_LINE in line and WEDGE_LINE in line


def wedge_lines(rig: RealNode, offset: int) -> list[str]:
    return [ln for ln in lines_since(rig, offset) if is_wedge_line(ln)]


def _write_json(path: Path, doc: dict[str, object]) -> Path:
    path.write_text(json.dumps(doc))
    return path


def _ok(rig: RealNode, *args: str) -> str:
    done = rig.crictl(*args, timeout=120)
    if done.returncode != 0:
        raise RigError(f"crictl {' '.join(args[:2])} failed: {done.stderr.strip()[:300]}")
    return done.stdout.strip()


def _sandbox(rig: RealNode, work: Path, name: str, uid: str) -> tuple[str, Path]:
    """A running hostNetwork sandbox (created unless there is one) and its config file."""
    config = _write_json(
        work / f"{name}.json",
        {
            "metadata": {"name": name, "namespace": SANDBOX["namespace"], "uid": uid, "attempt": 0},
            # A log directory and path as the kubelet gives them: a container without one makes the
            # kubelet's removal of it glob "*" in its working directory (supervisor.start).
            "log_directory": str(work / "logs" / uid),
            "linux": {
                "cgroup_parent": f"/kubepods/besteffort/pod{uid}",  # removed by rig.remove_cgroups
                "security_context": {"namespace_options": {"network": 2}},  # NODE: no CNI here
            },
        },
    )
    ready = ("pods", "-q", "--name", name, "--namespace", SANDBOX["namespace"], "--state", "ready")
    found = _ok(rig, *ready).split()
    return (found[0] if found else _ok(rig, "runp", str(config))), config


def churn(rig: RealNode, containers: int = CONTAINERS, batch: int = BATCH) -> float:
    """SANDBOX's pod, and `containers` containers of it created, started and stopped (left exited) in helper
    sandboxes of `batch`; returns the seconds taken."""
    start = time.monotonic()
    clear(rig)  # a fresh set each time (an earlier one may be left NotReady, holding the names)
    work = rig.layout.run_dir / "wedge"
    work.mkdir(parents=True, exist_ok=True)
    _sandbox(rig, work, SANDBOX["name"], SANDBOX["uid"])
    with ThreadPoolExecutor(max_workers=4) as pool:
        for first in range(0, containers, batch):
            group = f"{SANDBOX['name']}-{first // batch}"
            pod_id, pod_config = _sandbox(rig, work, group, f"{SANDBOX['uid']}-{first // batch}")

            def create(i: int, pod_id: str = pod_id, pod_config: Path = pod_config) -> str:
                config = _write_json(
                    work / f"c{i}.json",
                    {
                        "metadata": {"name": f"c{i}"},
                        "image": {"image": IDLE_IMAGE},
                        "log_path": f"c{i}.log",
                        "labels": CONTAINER_LABELS,
                        "linux": {},
                    },
                )
                return _ok(rig, "create", "--no-pull", pod_id, str(config), str(pod_config))

            ids = list(pool.map(create, range(first, min(first + batch, containers))))
            _ok(rig, "start", *ids)
            _ok(rig, "stop", "--timeout", "0", *ids)
    return time.monotonic() - start


def fire(
    rig: RealNode, *, containers: int = CONTAINERS, batch: int = BATCH, watch: float = WATCH_SECONDS
) -> Fired:
    """Stop the kubelet, churn `containers` through CRI, start it; watch its log `watch` s for the wedge."""
    spec = rig.spec()
    if spec is None or rig.sup.pid(KUBELET) is None:
        raise RigError("the rig is not up: `eventedpleg realnode up --kubelet 1.36 --gate on` first")
    rig.sup.stop(KUBELET)
    start = time.monotonic()
    churn(rig, containers, batch)
    churn_seconds = time.monotonic() - start
    log = rig.layout.at(lay.KUBELET_LOG)
    offset = log.stat().st_size if log.exists() else 0
    started = time.monotonic()
    rig.start_kubelet(spec, wait=False)
    line, after = "", None
    while time.monotonic() - started < watch:
        if found := wedge_lines(rig, offset):
            line, after = found[0].strip(), time.monotonic() - started
            break
        time.sleep(0.2)
    return Fired(spec.kubelet, containers, churn_seconds, offset, line, after)


def clear(rig: RealNode) -> None:
    """Remove our sandboxes and their containers (whatever the kubelet did to them)."""
    for pod_id in _ok(rig, "pods", "-q", "--namespace", SANDBOX["namespace"]).split():
        rig.crictl("stopp", pod_id, timeout=120)
        rig.crictl("rmp", "-f", pod_id, timeout=180)
