"""Start and stop the rig's daemons without systemd: detached processes recorded by PID, stopped by PID.

This is the service manager the agent's `systemctl restart kubelet` maps to on the rig (RigHost). A record
is `run/<name>.json` = {pid, argv}; a PID counts as ours only while /proc/<pid>/cmdline still starts with
the recorded argv[0] and it is not a zombie (a reused PID is never signalled).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

STOP_GRACE_SECONDS = 15.0
EXEC_GRACE_SECONDS = 10.0  # see Supervisor.pid


class UnitState(StrEnum):
    ACTIVE = "active"
    INACTIVE = "inactive"  # never started, or stopped by us
    FAILED = "failed"  # it exited by itself


@dataclass(frozen=True)
class Record:
    name: str
    pid: int
    argv: tuple[str, ...]
    log: str
    started: float  # time.time() at spawn
    env: Mapping[str, str]


def proc_argv(pid: int) -> tuple[str, ...] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return tuple(part.decode(errors="replace") for part in raw.split(b"\0") if part)


def alive(pid: int) -> bool:
    """Running and not a zombie (a child we have not reaped yet still has a /proc entry)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


EXITS: dict[int, str] = {}  # pid -> how our child ended, once reaped


def _reap(pid: int) -> None:
    """Collect the exit status when the process is our child (no-op otherwise); remember how it ended."""
    with contextlib.suppress(ChildProcessError, OSError):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            if os.WIFSIGNALED(status):
                EXITS[pid] = f"killed by signal {os.WTERMSIG(status)}"
            else:
                EXITS[pid] = f"exited with status {os.waitstatus_to_exitcode(status)}"


def exit_of(pid: int) -> str:
    return EXITS.get(pid, "ended (not our child, or not reaped)")


def terminate(pid: int, *, grace: float = STOP_GRACE_SECONDS) -> None:
    """SIGTERM, wait `grace` seconds, SIGKILL: this PID only."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while True:
        _reap(pid)
        if not alive(pid):
            return
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
            _reap(pid)
            return
        time.sleep(0.05)


class Supervisor:
    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir

    def _file(self, name: str) -> Path:
        return self.run_dir / f"{name}.json"

    def record(self, name: str) -> Record | None:
        try:
            doc = json.loads(self._file(name).read_text())
            env = {str(k): str(v) for k, v in doc["env"].items()}
            return Record(
                name, int(doc["pid"]), tuple(doc["argv"]), str(doc["log"]), float(doc["started"]), env
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def pid(self, name: str) -> int | None:
        """The PID of the running daemon, or None."""
        rec = self.record(name)
        if rec is None:
            return None
        _reap(rec.pid)
        if not alive(rec.pid):
            return None
        argv = proc_argv(rec.pid)
        if not argv:
            # Popen returns once exec has closed its CLOEXEC pipe, but the kernel fills in the new
            # image's argument area (/proc/<pid>/cmdline) only after loading the ELF: for a ~100 MB
            # kubelet that window is long enough to look empty. Right after our own spawn, that is ours.
            return rec.pid if time.time() - rec.started < EXEC_GRACE_SECONDS else None
        return rec.pid if argv[0] == rec.argv[0] else None

    def state(self, name: str) -> UnitState:
        if self.pid(name) is not None:
            return UnitState.ACTIVE
        return UnitState.FAILED if self.record(name) is not None else UnitState.INACTIVE

    def start(self, name: str, argv: Sequence[str], *, log: Path, env: Mapping[str, str]) -> int:
        if self.pid(name) is not None:
            raise RuntimeError(f"{name} is already running (pid {self.pid(name)})")
        log.parent.mkdir(parents=True, exist_ok=True)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            # Own session: a Ctrl-C in the starting terminal must not reach it; it outlives the CLI that
            # started it and is stopped by PID (`eventedpleg realnode down`).
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(env),
                start_new_session=True,
                # Its own run directory, never "/": a kubelet removing a container that has no log path
                # (one created straight through CRI) globs "*" in its working directory and removes the
                # first match (logs/container_log_manager.go Clean, v1.36.4; k8s#107717, fix k8s#138379
                # unmerged): from "/" that was the host's /bin symlink, again and again while the wedge's
                # churn was collected.
                cwd=self.run_dir,
            )
        doc = {"pid": proc.pid, "argv": list(argv), "log": str(log), "started": time.time(), "env": dict(env)}
        self._file(name).write_text(json.dumps(doc))
        return proc.pid

    def stop(self, name: str, *, grace: float = STOP_GRACE_SECONDS) -> bool:
        """Stop it if running; forget the record. True when a process was stopped."""
        pid = self.pid(name)
        if pid is not None:
            terminate(pid, grace=grace)
        with contextlib.suppress(FileNotFoundError):
            self._file(name).unlink()
        return pid is not None

    def restart(self, name: str, *, grace: float = STOP_GRACE_SECONDS) -> int:
        rec = self.record(name)
        if rec is None:
            raise RuntimeError(f"{name} was never started")
        self.stop(name, grace=grace)
        return self.start(name, rec.argv, log=Path(rec.log), env=rec.env)
