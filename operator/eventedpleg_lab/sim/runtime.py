"""Simulated container runtimes: what they read at start and whether they deliver container events.

- containerd: GetContainerEvents is Unimplemented before 1.7; from 1.7 events are always on, with no switch
  (docs/compatibility.md §2).
- CRI-O: reads /etc/crio/crio.conf, then EVERY regular file under /etc/crio/crio.conf.d recursively in lexical
  order with no suffix filter; a file that is not valid TOML stops it from starting. `enable_pod_events`
  (default false) decides whether the event stream delivers or closes at once with EOF. `crio status config`
  (1.28+) shows the running daemon's config; `crio config` shows what a fresh start would load, with options
  at their default commented out (docs/compatibility.md §2).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from eventedpleg.core.versions import Version
from eventedpleg_lab.sim.journal import Journal
from eventedpleg_lab.sim.kubelet import StreamProblem

CRIO_MAIN = "etc/crio/crio.conf"
CRIO_DIR = "etc/crio/crio.conf.d"


@dataclass
class RuntimeFaults:
    events_broken: bool = False  # claims support but the stream closes (e.g. containerd 2.0.0-2.0.2, §2)
    restart_fails: bool = False


@dataclass
class SimRuntime:
    root: Path
    version: Version
    journal: Journal
    faults: RuntimeFaults = field(default_factory=RuntimeFaults)
    running: bool = False
    started_at: datetime | None = None
    restarts: int = 0

    unit = "containerd"

    def _log(self, now: datetime, level: str, message: str) -> None:
        stamp = now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        self.journal.write(self.unit, now, f'time="{stamp}" level={level} msg="{message}"')

    def start(self, now: datetime) -> tuple[bool, str]:
        self.restarts += 1
        if self.faults.restart_fails:
            self.running = False
            self._log(now, "fatal", "injected fault: runtime does not start")
            return False, "injected fault"
        self.running, self.started_at = True, now
        self._log(now, "info", f"starting {self.unit} version {self.version}")
        return True, ""

    def stop(self, now: datetime) -> None:
        self.running = False
        self._log(now, "info", f"stopping {self.unit}")

    def event_stream_problem(self) -> StreamProblem | None:
        if not self.running:
            return StreamProblem.DOWN
        if self.version.minor_pair < (1, 7):
            return StreamProblem.UNIMPLEMENTED  # containerd v1.6.39 container_events.go
        if self.faults.events_broken:
            return StreamProblem.EOF
        return None


@dataclass
class SimCrio(SimRuntime):
    running_config: dict[str, Any] = field(default_factory=dict)

    unit = "crio"

    def _files(self) -> list[Path]:
        files: list[Path] = []
        main = self.root / CRIO_MAIN
        if main.is_file():
            files.append(main)

        def walk(directory: Path) -> None:
            for entry in sorted(directory.iterdir(), key=lambda p: p.name):
                if entry.is_dir():
                    walk(entry)
                elif entry.is_file():
                    files.append(entry)  # no suffix filter: backups and temp files are parsed too

        drop_ins = self.root / CRIO_DIR
        if drop_ins.is_dir():
            walk(drop_ins)
        return files

    def load(self) -> dict[str, Any]:
        """The config a fresh start would load; raises ValueError naming the file that does not parse."""
        merged: dict[str, Any] = {}
        for path in self._files():
            try:
                doc = tomllib.loads(path.read_text())
            except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
                raise ValueError(f"/{path.relative_to(self.root)}: {exc}") from exc
            merged = _deep_update(merged, doc)
        return merged

    def start(self, now: datetime) -> tuple[bool, str]:
        self.restarts += 1
        try:
            config = self.load()
        except ValueError as exc:
            self.running = False
            self._log(now, "fatal", f"failed to load config from {exc}")
            return False, str(exc)
        if self.faults.restart_fails:
            self.running = False
            self._log(now, "fatal", "injected fault: crio does not start")
            return False, "injected fault"
        self.running_config, self.running, self.started_at = config, True, now
        self._log(now, "info", f"Starting CRI-O, version: {self.version}")
        return True, ""

    @property
    def pod_events(self) -> bool:
        return bool(self.running_config.get("crio", {}).get("runtime", {}).get("enable_pod_events", False))

    def event_stream_problem(self) -> StreamProblem | None:
        if not self.running:
            return StreamProblem.DOWN
        if self.version.minor_pair < (1, 26):
            return StreamProblem.UNIMPLEMENTED
        if not self.pod_events or self.faults.events_broken:
            return StreamProblem.EOF  # GetContainerEvents returns nil at once (server/container_events.go)
        return None

    def render(self, config: dict[str, Any]) -> str:
        """template.go style: options at their default are printed commented out."""
        runtime = config.get("crio", {}).get("runtime", {})
        pod_events = runtime.get("enable_pod_events", False)
        lines = ["# The CRI-O configuration file (rendered).", "[crio]", ""]
        log_dir = config.get("crio", {}).get("log_dir", "/var/log/crio/pods")
        lines += [f'log_dir = "{log_dir}"', "", "[crio.runtime]", ""]
        for key, value in sorted(runtime.items()):
            if key == "enable_pod_events" or isinstance(value, dict):
                continue
            lines.append(f"{key} = {_toml_value(value)}")
        lines += [
            "",
            "# Enable CRI-O to generate the container pod-level events in order to optimize the performance",
            "# of the Pod Lifecycle Event Generator (PLEG) module in Kubelet.",
            "enable_pod_events = true" if pod_events else "# enable_pod_events = false",
            "",
        ]
        return "\n".join(lines)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return str(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _deep_update(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_update(out[key], value)
        else:
            out[key] = value
    return out
