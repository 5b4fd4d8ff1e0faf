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

How this makes it happen, every time: the replay of containerd's held events when the kubelet starts.

- containerd 2.x holds CRI container events while nothing subscribes and hands them all to the next
  subscriber (`internal/eventq/eventq.go` `New`: the `discardQueue`, kept 5 minutes by
  `internal/cri/server/service.go`).
- The kubelet subscribes (`kubelet.go:1959-1961`, `eventedPleg.Start`) just before `syncLoop` starts, and
  `syncLoop`'s first passes are skipped anyway, with the same back-off, until the first runtime status
  check and the first relist are done (`runtime.go:126-127`, `pleg/generic.go:240-241`).
- Every replayed `CONTAINER_DELETED_EVENT` becomes two PLEG events, ContainerDied and ContainerRemoved,
  whatever the pod cache holds (`pleg/evented.go:254-264`, `:292-296`); STARTED and STOPPED one each when
  the cache takes them (`:266-268`).

So `fire` stops the kubelet, creates, starts, stops and removes `containers` containers straight through
CRI (crictl) in a sandbox of its own, and starts the kubelet again: ≥ 2 x `containers` events arrive
while `syncLoop` backs off. A kubelet restarted on a node with churn meets the same replay. Kubelet 1.37
registers no EventedPLEG health check (its evented PLEG sends nothing into the channel), so the same
trigger leaves it syncing.
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
CONTAINERS = 600  # ≥ 1200 PLEG events from the deletions alone
BATCH = 50  # containers alive at once: each event carries the status of every container in the sandbox
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


def sandbox(rig: RealNode) -> tuple[str, Path]:
    """Our hostNetwork sandbox (created if missing) and its config file, for `crictl create`."""
    work = rig.layout.run_dir / "wedge"
    work.mkdir(parents=True, exist_ok=True)
    pod_config = _write_json(
        work / "sandbox.json",
        {
            "metadata": {**SANDBOX, "attempt": 0},
            "linux": {
                "cgroup_parent": f"/kubepods/besteffort/pod{SANDBOX['uid']}",  # rig.remove_cgroups
                "security_context": {"namespace_options": {"network": 2}},  # NODE: no CNI here
            },
        },
    )
    found = _ok(
        rig, "pods", "-q", "--name", SANDBOX["name"], "--namespace", SANDBOX["namespace"], "--state", "ready"
    )
    pod_id = found.split()[0] if found else _ok(rig, "runp", str(pod_config))
    return pod_id, pod_config


def churn(rig: RealNode, containers: int = CONTAINERS, batch: int = BATCH) -> float:
    """Create, start, stop and remove `containers` containers in our sandbox; returns the seconds taken."""
    start = time.monotonic()
    pod_id, pod_config = sandbox(rig)
    work = pod_config.parent
    with ThreadPoolExecutor(max_workers=4) as pool:
        for first in range(0, containers, batch):
            names = [f"c{i}" for i in range(first, min(first + batch, containers))]
            configs = [
                _write_json(
                    work / f"{name}.json",
                    {"metadata": {"name": name}, "image": {"image": IDLE_IMAGE}, "linux": {}},
                )
                for name in names
            ]
            ids = list(
                pool.map(
                    lambda cfg: _ok(rig, "create", "--no-pull", pod_id, str(cfg), str(pod_config)), configs
                )
            )
            _ok(rig, "start", *ids)
            _ok(rig, "stop", "--timeout", "0", *ids)
            _ok(rig, "rm", *ids)
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
    """Remove our sandbox (whatever the kubelet did to it)."""
    for pod_id in _ok(
        rig, "pods", "-q", "--name", SANDBOX["name"], "--namespace", SANDBOX["namespace"]
    ).split():
        rig.crictl("stopp", pod_id, timeout=120)
        rig.crictl("rmp", "-f", pod_id, timeout=120)
