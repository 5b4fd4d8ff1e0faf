"""The agent's view of a node's host: a small Protocol a real host and a simulated one both implement.

The agent does file work itself under `root` (the host's `/` as mounted in its pod, or a temp dir for a
simulated host); everything else that touches the host goes through these few calls so tests can run the
real agent against `eventedpleg_lab.sim` without root, systemd or a clock that takes real time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class CommandResult:
    """What a host command did; `returncode` 127 means the command does not exist on the host, and
    `timed_out` that it was killed at its timeout (returncode 124, as timeout(1) reports it)."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def summary(self, limit: int = 200) -> str:
        text = (self.stderr or self.stdout).strip().replace("\n", " | ")
        return f"`{' '.join(self.argv)}` exited {self.returncode}: {text[:limit]}"


@dataclass(frozen=True)
class KubeletProcess:
    """The running kubelet (kubelet.service's main process) as /proc shows it: argv from `cmdline`,
    environment from `environ`, the binary from `exe` (a host path: the only kubelet binary the agent
    runs)."""

    pid: int
    argv: tuple[str, ...]
    environ: Mapping[str, str] = field(default_factory=dict)
    started_at: datetime | None = None
    exe: str | None = None


@dataclass(frozen=True)
class JournalChunk:
    """Log messages read on from a cursor, and the cursor after them (the same one when nothing was new)."""

    lines: tuple[str, ...]
    cursor: str


class KubeletEndpoint(StrEnum):
    HEALTHZ = "healthz"  # http://127.0.0.1:10248/healthz, answers "ok"
    METRICS = "metrics"  # the kubelet's /metrics (Prometheus text)


@dataclass(frozen=True)
class HttpResult:
    """`status` 0 means no answer at all (connection refused, timeout). `untrusted`: the server answered
    with a certificate that is not this node's kubelet's, so nothing was sent (one line, also in `error`);
    a host fault, where a server that does not answer is only a wait."""

    status: int
    body: str = ""
    error: str = ""
    untrusted: str = ""

    @property
    def ok(self) -> bool:
        return self.status == 200


class HostClock(Protocol):
    """The host's time, and sleeping on it (a simulated host's time moves when its agent sleeps)."""

    def now(self) -> datetime:
        """Aware UTC time."""
        ...

    def sleep(self, seconds: float) -> None: ...


class Host(Protocol):
    """One node's host, as seen by its agent."""

    @property
    def root(self) -> Path:
        """Where the host's `/` is (files under it are read and written by the agent directly)."""
        ...

    @property
    def clock(self) -> HostClock: ...

    def run(self, argv: Sequence[str], *, timeout: float = 120.0) -> CommandResult:
        """Run a command in the host's namespaces (systemctl, crio, kubelet --help)."""
        ...

    def kubelet_process(self) -> KubeletProcess | None:
        """The running kubelet: the main process of the service manager's kubelet unit (never a process
        found by its name alone), or None when the unit runs none."""
        ...

    def journal(self, unit: str, since: datetime) -> list[str]:
        """The unit's log messages (journalctl -o cat) logged at or after `since`, oldest first."""
        ...

    def journal_after(self, unit: str, cursor: str, since: datetime, match: str) -> JournalChunk:
        """The unit's messages containing `match` logged after `cursor` (an opaque string this host gave;
        "" means: since `since`), and the cursor to go on from. Reads only what is new."""
        ...

    def kubelet_get(self, endpoint: KubeletEndpoint) -> HttpResult:
        """GET one of the kubelet's local endpoints."""
        ...
