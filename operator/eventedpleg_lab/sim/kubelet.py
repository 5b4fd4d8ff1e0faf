# ruff: noqa: E501 - verbatim kubelet log lines and metric HELP texts
"""A simulated kubelet that reads the real files on the simulated root by the kubelet's rules.

What it models (docs/compatibility.md §1, §3, §4):
- startup: `--config`, then only `*.conf` drop-ins from `--config-dir` in lexical WalkDir order, each needing
  apiVersion/kind and JSON-merge-patched over the result (maps merge key by key); `--feature-gates` on the
  command line wins per key; an unknown gate or a bad drop-in stops the kubelet with the real message;
  `--config-dir` is unknown before 1.28 and needs KUBELET_CONFIG_DROPIN_DIR_ALPHA on 1.28-1.29.
- Evented PLEG: with the gate on it opens the runtime's event stream once healthy. A runtime without events
  (containerd 1.6: Unimplemented; CRI-O with enable_pod_events=false: EOF) burns the 5 retries at once and
  the kubelet falls back to the 1 s relist. A runtime restart does the same to a running kubelet, for good
  until the kubelet restarts (k8s#129827). 1.37 keeps the 1 s relist and logs the narrowed lines.
- output: klog lines at the verbosity the command line asks for, and the Prometheus text of
  kubernetes_feature_enabled, kubelet_evented_pleg_connection_*, kubelet_pleg_relist_interval_seconds.

Nothing runs in the background: state advances when someone looks (`advance(now)`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

import yaml

from eventedpleg.core.versions import Version
from eventedpleg_lab.sim.journal import Journal, klog

UNIT = "kubelet"
EVENTED = "EventedPLEG"
MAX_RETRIES = 5  # evented.go eventedPlegMaxStreamRetries
RELIST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
MAX_EVENT_LINES_PER_ADVANCE = 20


class StreamProblem(StrEnum):
    UNIMPLEMENTED = "unimplemented"  # containerd 1.6, CRI-O < 1.26
    EOF = "eof"  # CRI-O with enable_pod_events = false, or a broken runtime
    DOWN = "down"  # the runtime is not running / restarting


class EventSource(Protocol):
    """The runtime as the kubelet's CRI client sees it."""

    def event_stream_problem(self) -> StreamProblem | None: ...


class Status(StrEnum):
    STOPPED = "stopped"
    RUNNING = "running"
    FAILED = "failed"


class Stream(StrEnum):
    NONE = "none"
    CONNECTED = "connected"
    FALLEN_BACK = "fallenBack"


@dataclass
class KubeletFaults:
    fails_when_evented: bool = False  # "kubelet will not start after apply"
    never_starts: bool = False  # not even after a rollback
    metrics_unavailable: bool = False
    startup_seconds: float = 2.0


def evented_stage(version: Version) -> str | None:
    """The gate's stage in this build (docs/compatibility.md §0, §1); None when the gate does not exist."""
    triple = (version.major, version.minor, version.patch)
    if triple < (1, 26, 0):
        return None
    beta = (1, 27, 0) <= triple < (1, 27, 10) or (1, 28, 0) <= triple < (1, 28, 6) or triple == (1, 29, 0)
    return "BETA" if beta else "ALPHA"


def known_gates(version: Version) -> dict[str, tuple[str, bool]]:
    """name -> (stage, default) for the gates this simulated build registers."""
    gates = {
        "AllAlpha": ("ALPHA", False),
        "AllBeta": ("BETA", False),
        "GracefulNodeShutdown": ("BETA", True),
        "KubeletTracing": ("BETA", True),
    }
    stage = evented_stage(version)
    if stage is not None:
        gates[EVENTED] = (stage, False)
    return dict(sorted(gates.items()))


def _merge_patch(base: Any, patch: Any) -> Any:
    # RFC 7386, as mergeKubeletConfigurations applies it (independent of eventedpleg.core on purpose: the
    # simulator is the reference the agent is tested against).
    if not isinstance(patch, dict):
        return patch
    out = dict(base) if isinstance(base, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge_patch(out.get(key), value)
    return out


def _walk(directory: Path) -> list[Path]:
    """filepath.WalkDir: lexical order within each directory, depth first."""
    out: list[Path] = []
    for entry in sorted(directory.iterdir(), key=lambda p: p.name):
        if entry.is_dir():
            out.extend(_walk(entry))
        elif entry.is_file():
            out.append(entry)
    return out


class StartError(Exception):
    pass


@dataclass
class SimKubelet:
    root: Path
    version: Version
    argv: tuple[str, ...]
    environ: Mapping[str, str]
    journal: Journal
    faults: KubeletFaults = field(default_factory=KubeletFaults)
    pod_event_period: float = 30.0
    status: Status = Status.STOPPED
    pid: int = 0
    started_at: datetime | None = None
    healthy_at: datetime | None = None
    gates: dict[str, bool] = field(default_factory=dict)  # explicitly set (what the V(1) line prints)
    evented: bool = False
    stream: Stream = Stream.NONE
    stream_since: datetime | None = None
    stream_attempted: bool = False
    conn_success: int = 0
    conn_error: int = 0
    latency_count: int = 0
    events_emitted: int = 0
    relist_segments: list[tuple[datetime, float]] = field(default_factory=list)
    starts: int = 0
    next_pid: int = 4000

    # --- command line -----------------------------------------------------------------------------------

    def _flag(self, name: str) -> list[str]:
        values: list[str] = []
        args = list(self.argv[1:])
        for i, arg in enumerate(args):
            if arg.startswith(f"--{name}="):
                values.append(arg.split("=", 1)[1])
            elif arg == f"--{name}" and i + 1 < len(args):
                values.append(args[i + 1])
        return values

    @property
    def verbosity(self) -> int:
        values = self._flag("v")
        return int(values[-1]) if values and values[-1].isdigit() else 0

    @property
    def narrowed(self) -> bool:
        return self.version.minor_pair >= (1, 37)

    def _log(self, severity: str, at: datetime, source: str, message: str, *, v: int = 0) -> None:
        if v <= self.verbosity:
            self.journal.write(UNIT, at, klog(severity, at, self.pid, source, message))

    # --- lifecycle --------------------------------------------------------------------------------------

    def stop(self, now: datetime) -> None:
        if self.status is Status.RUNNING:
            self._log("I", now, "server.go:1234", '"Shutting down kubelet"')
        self.status = Status.STOPPED
        self.stream = Stream.NONE

    def start(self, now: datetime, runtime: EventSource) -> bool:
        """What `systemctl restart kubelet` leads to; False when the kubelet exits during startup."""
        self.stop(now)
        self.next_pid += 17
        self.pid = self.next_pid
        self.starts += 1
        self.conn_success = self.conn_error = self.latency_count = self.events_emitted = 0
        self.stream, self.stream_since, self.stream_attempted = Stream.NONE, None, False
        self._log("I", now, "server.go:484", f'"Kubelet version" kubeletVersion="v{self.version}"')
        for arg in self.argv[1:]:
            if arg.startswith("--"):
                name, _, value = arg.partition("=")
                self._log("I", now, "flags.go:64", f'FLAG: {name}="{value}"', v=1)
        try:
            self.gates, self.evented = self._load(now)
            if self.faults.never_starts:
                raise StartError("failed to run Kubelet: injected fault: kubelet does not start")
            if self.faults.fails_when_evented and self.evented:
                raise StartError("failed to run Kubelet: injected fault: kubelet exits with EventedPLEG on")
        except StartError as exc:
            self.status = Status.FAILED
            self.started_at = self.healthy_at = None
            self._log("E", now, "run.go:72", f'"command failed" err="{exc}"')
            return False
        self._log_gates(now)
        self.status = Status.RUNNING
        self.started_at = now
        self.healthy_at = now + timedelta(seconds=self.faults.startup_seconds)
        period = 300.0 if self.evented and not self.narrowed else 1.0
        self.relist_segments = [(self.healthy_at, period)]
        return True

    def _log_gates(self, now: datetime) -> None:
        """component-base's V(1) line for the gates the configuration set (docs/compatibility.md §4; the format
        changed in 1.36, as real v1.36.4/v1.37.2 kubelets print it)."""
        if self.version.minor_pair >= (1, 36):
            body = json.dumps(dict(sorted(self.gates.items())), separators=(",", ":"))
            self._log("I", now, "feature_gate.go:477", f'"Updated" featureGates={body}', v=1)
        elif self.gates:
            body = " ".join(f"{k}:{str(v).lower()}" for k, v in sorted(self.gates.items()))
            self._log("I", now, "feature_gate.go:387", f"feature gates: &{{map[{body}]}}", v=1)

    def _load(self, now: datetime) -> tuple[dict[str, bool], bool]:
        config_dirs = self._flag("config-dir")
        if config_dirs and self.version.minor_pair < (1, 28):
            raise StartError("unknown flag: --config-dir")
        if (
            config_dirs
            and self.version.minor_pair < (1, 30)
            and "KUBELET_CONFIG_DROPIN_DIR_ALPHA" not in self.environ
        ):
            raise StartError(
                "the flag --config-dir is an alpha feature: set the KUBELET_CONFIG_DROPIN_DIR_ALPHA environment "
                "variable to use it"
            )
        known = known_gates(self.version)
        cli: dict[str, bool] = {}
        for text in self._flag("feature-gates"):
            for item in text.split(","):
                name, _, value = item.partition("=")
                cli[name.strip()] = value.strip().lower() == "true"
        for name in cli:
            if name not in known:
                raise StartError(
                    f"failed to set feature gates from initial flags-based config: unrecognized feature gate: {name}"
                )
        merged: Any = {}
        for path in self._flag("config")[-1:]:
            file = self.root / path.lstrip("/")
            try:
                merged = yaml.safe_load(file.read_text()) or {}
            except (OSError, yaml.YAMLError) as exc:
                raise StartError(f"failed to load Kubelet config file {path}, error: {exc}") from exc
        for directory in config_dirs[-1:]:
            base = self.root / directory.lstrip("/")
            if not base.is_dir():
                continue
            for file in _walk(base):
                host_path = "/" + str(file.relative_to(self.root))
                if not file.name.endswith(".conf"):
                    self._log(
                        "I",
                        now,
                        "server.go:312",
                        f'"Skipped file in drop-in directory (does not have .conf extension)" path="{host_path}"',
                        v=4,
                    )
                    continue
                try:
                    doc = yaml.safe_load(file.read_text()) or {}
                except yaml.YAMLError as exc:
                    raise StartError(
                        f"failed to load kubelet dropin file, path: {host_path}, error: {exc}"
                    ) from exc
                if (
                    not isinstance(doc, dict)
                    or doc.get("apiVersion") != "kubelet.config.k8s.io/v1beta1"
                    or doc.get("kind") != "KubeletConfiguration"
                ):
                    raise StartError(
                        f"failed to load kubelet dropin file, path: {host_path}, no apiVersion/kind"
                    )
                merged = _merge_patch(merged, doc)
        file_gates = merged.get("featureGates") if isinstance(merged, dict) else None
        gates: dict[str, bool] = dict(file_gates) if isinstance(file_gates, dict) else {}
        for name in gates:
            if name not in known:
                raise StartError(f"unrecognized feature gate: {name}")
        gates.update(cli)  # "feature gates from cli have the highest precedence" (k8s#119390)
        evented = False
        if EVENTED in known:
            evented = gates.get(EVENTED, gates.get("AllAlpha", False) and known[EVENTED][0] == "ALPHA")
        return gates, evented

    # --- runtime interaction ----------------------------------------------------------------------------

    def advance(self, now: datetime, runtime: EventSource) -> None:
        if self.status is not Status.RUNNING or self.healthy_at is None or now < self.healthy_at:
            return
        if self.evented and not self.stream_attempted:
            self.stream_attempted = True
            problem = runtime.event_stream_problem()
            if problem is None:
                self.conn_success += 1
                self.stream, self.stream_since = Stream.CONNECTED, self.healthy_at
            else:
                self._burn_retries(self.healthy_at, problem)
        if self.stream is Stream.CONNECTED and self.stream_since is not None and self.pod_event_period > 0:
            due = int((now - self.stream_since).total_seconds() // self.pod_event_period)
            new = due - self.events_emitted
            if new > 0:
                self.latency_count += new
                if not self.narrowed:
                    first = max(self.events_emitted + 1, due - MAX_EVENT_LINES_PER_ADVANCE + 1)
                    for k in range(first, due + 1):
                        at = self.stream_since + timedelta(seconds=k * self.pod_event_period)
                        self._log(
                            "I",
                            at,
                            "evented.go:272",
                            f'"Evented PLEG: Generated pod status from the received event" podUID="pod-{k:04d}"',
                            v=4,
                        )
                self.events_emitted = due

    def runtime_restarted(self, now: datetime) -> None:
        """The runtime went away under a running kubelet (k8s#129827): all retries fail within milliseconds."""
        if self.status is Status.RUNNING and self.stream is Stream.CONNECTED:
            self._burn_retries(now, StreamProblem.DOWN)

    def _burn_retries(self, at: datetime, problem: StreamProblem) -> None:
        source = "evented.go:206" if not self.narrowed else "evented.go:190"
        while self.conn_error < MAX_RETRIES:
            first = self.conn_error == 0 or self.stream is Stream.CONNECTED
            if problem is StreamProblem.UNIMPLEMENTED:
                self.conn_success += 1  # the stream client is created, Recv then fails
                err = "rpc error: code = Unimplemented desc = method GetContainerEvents not implemented"
                self._log("E", at, "log.go:32", f'"failed to receive streaming container event" err="{err}"')
            elif problem is StreamProblem.EOF:
                self.conn_success += 1  # "CRI-O with events off still increments it" (§4)
                err = "EOF"
                self._log("E", at, "log.go:32", f'"container events stream is closed" err="{err}"')
            elif first:
                err = "rpc error: code = Unavailable desc = error reading from server: EOF"
                self._log("E", at, "log.go:32", f'"failed to receive streaming container event" err="{err}"')
            else:
                err = (
                    'rpc error: code = Unavailable desc = connection error: desc = \\"transport: Error while '
                    'dialing: dial unix /var/run/containerd/containerd.sock: connect: connection refused\\"'
                )
                self._log(
                    "E", at, "log.go:32", f'"GetContainerEvents failed to get streaming client" err="{err}"'
                )
            self.stream = Stream.NONE
            self.conn_error += 1
            if self.narrowed:
                self._log(
                    "I",
                    at,
                    source,
                    f'"Evented PLEG: failed to get container events, retrying" err="{err}"',
                    v=4,
                )
            else:
                self._log(
                    "I",
                    at,
                    source,
                    f'"Evented PLEG: Failed to get container events, retrying: " err="{err}"',
                    v=4,
                )
        self.stream = Stream.FALLEN_BACK
        if self.narrowed:
            self._log(
                "E",
                at,
                "evented.go:176",
                '"Evented PLEG: disabling container-termination fast path after exhausting event stream retries"',
            )
        else:
            self._log(
                "I",
                at,
                "evented.go:181",
                '"Fall back to Generic PLEG relisting since Evented PLEG is not working"',
                v=4,
            )
            self.relist_segments.append((at, 1.0))

    # --- endpoints --------------------------------------------------------------------------------------

    def healthy(self, now: datetime) -> bool:
        return self.status is Status.RUNNING and self.healthy_at is not None and now >= self.healthy_at

    def metrics_text(self, now: datetime) -> str:
        count, total, buckets = self._relist_histogram(now)
        lines = [
            "# HELP kubernetes_feature_enabled [BETA] This metric records the data about the stage and enablement "
            "of a k8s feature.",
            "# TYPE kubernetes_feature_enabled gauge",
        ]
        for name, (stage, default) in known_gates(self.version).items():
            value = self.gates.get(name, default)
            if name == EVENTED:
                value = self.evented
            lines.append(f'kubernetes_feature_enabled{{name="{name}",stage="{stage}"}} {int(value)}')
        if self.version.at_least(1, 27):
            lines += [
                "# HELP kubelet_evented_pleg_connection_error_count [ALPHA] The number of errors encountered during "
                "the establishment of streaming connection with the CRI runtime.",
                "# TYPE kubelet_evented_pleg_connection_error_count counter",
                f"kubelet_evented_pleg_connection_error_count {self.conn_error}",
                "# HELP kubelet_evented_pleg_connection_success_count [ALPHA] The number of times a streaming client "
                "was obtained to receive CRI Events.",
                "# TYPE kubelet_evented_pleg_connection_success_count counter",
                f"kubelet_evented_pleg_connection_success_count {self.conn_success}",
                "# HELP kubelet_evented_pleg_connection_latency_seconds [ALPHA] The latency of streaming connection "
                "with the CRI runtime, measured in seconds.",
                "# TYPE kubelet_evented_pleg_connection_latency_seconds histogram",
            ]
            for le in LATENCY_BUCKETS:
                lines.append(
                    f'kubelet_evented_pleg_connection_latency_seconds_bucket{{le="{le:g}"}} '
                    f"{self.latency_count if le >= 0.01 else 0}"
                )
            lines += [
                f'kubelet_evented_pleg_connection_latency_seconds_bucket{{le="+Inf"}} {self.latency_count}',
                f"kubelet_evented_pleg_connection_latency_seconds_sum {self.latency_count * 0.008:.3f}",
                f"kubelet_evented_pleg_connection_latency_seconds_count {self.latency_count}",
            ]
        lines += [
            "# HELP kubelet_pleg_relist_interval_seconds [ALPHA] Interval in seconds between relisting in PLEG.",
            "# TYPE kubelet_pleg_relist_interval_seconds histogram",
        ]
        for le, n in zip(RELIST_BUCKETS, buckets, strict=True):
            lines.append(f'kubelet_pleg_relist_interval_seconds_bucket{{le="{le:g}"}} {n}')
        lines += [
            f'kubelet_pleg_relist_interval_seconds_bucket{{le="+Inf"}} {count}',
            f"kubelet_pleg_relist_interval_seconds_sum {total:.6f}",
            f"kubelet_pleg_relist_interval_seconds_count {count}",
        ]
        return "\n".join(lines) + "\n"

    def _relist_histogram(self, now: datetime) -> tuple[int, float, list[int]]:
        count, total = 0, 0.0
        buckets = [0] * len(RELIST_BUCKETS)
        if self.status is not Status.RUNNING:
            return count, total, buckets
        for i, (start, period) in enumerate(self.relist_segments):
            end = self.relist_segments[i + 1][0] if i + 1 < len(self.relist_segments) else now
            if end <= start:
                continue
            n = math.floor((end - start).total_seconds() / period)
            count += n
            total += n * period
            for b, le in enumerate(RELIST_BUCKETS):
                if period <= le:
                    buckets[b] += n
        return count, total, buckets

    def help_text(self) -> str:
        lines = [
            'The kubelet is the primary "node agent" that runs on each node.',
            "",
            "Usage:",
            "  kubelet [flags]",
            "",
            "Flags:",
            "      --config string      The Kubelet will load its initial configuration from this file.",
        ]
        if self.version.minor_pair >= (1, 28):
            lines.append(
                "      --config-dir string  Path to a directory to specify drop-ins, allows the user to optionally "
                "specify additional configs to overwrite what is provided by default and in the `--config` flag."
            )
        lines.append(
            "      --feature-gates mapStringBool  A set of key=value pairs that describe feature gates for "
            "alpha/experimental features. Options are:"
        )
        for name, (stage, default) in known_gates(self.version).items():
            if name in ("AllAlpha", "AllBeta"):
                lines.append(
                    f"                                     {name}=true|false ({stage} - default=false)"
                )
            else:
                lines.append(
                    f"                                     {name}=true|false ({stage} - default={str(default).lower()})"
                )
        lines.append("  -v, --v Level            number for the log level verbosity")
        return "\n".join(lines) + "\n"
