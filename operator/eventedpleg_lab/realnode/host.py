"""`eventedpleg.core.node.blocks.host.Host` for the rig: the production LinuxHost, with our supervisor as the
service
manager and the kubelet's log file as its journal.

- root: the rig's `host/` directory (absolute paths inside it resolve through its self-alias, see layout);
- run: `systemctl restart|start|stop|is-active kubelet|containerd` go to the supervisor, everything else
  (`kubelet --help`, `kubelet --version`) runs for real;
- kubelet_process: the supervisor's PID for the kubelet (what systemd's MainPID is on a node), read from
  /proc by LinuxHost.process (the production code path);
- journal: klog lines of the log file at or after `since` (klog prints local time without a year);
- kubelet_get: the real /healthz (10248) and /metrics on the read-only port (10255, plain HTTP).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from eventedpleg.agent.linuxhost import LinuxHost, RealClock
from eventedpleg.core.node.blocks.host import (
    CommandResult,
    HostClock,
    HttpResult,
    JournalChunk,
    KubeletEndpoint,
    KubeletProcess,
)
from eventedpleg_lab.realnode import config as cfg
from eventedpleg_lab.realnode import layout as lay
from eventedpleg_lab.realnode.rig import CONTAINERD, KUBELET, RealNode, RigError
from eventedpleg_lab.realnode.supervisor import UnitState

_KLOG = re.compile(r"^[IWEF](?P<mon>\d{2})(?P<day>\d{2}) (?P<time>\d{2}:\d{2}:\d{2}\.\d+)\s")
# containerd (logrus text): time="2026-11-22T09:14:58.123456789Z" level=info msg=...
_LOGRUS = re.compile(r'^time="(?P<stamp>[^"]+)"')
CHUNK = 1 << 20
MAX_LINES = 20000
UNIT_LOGS = {KUBELET: lay.KUBELET_LOG, CONTAINERD: lay.CONTAINERD_LOG}


def line_time(line: str, year: int) -> datetime | None:
    """The time a klog or containerd line was logged (UTC), None for continuation lines."""
    match = _KLOG.match(line)
    if match:
        stamp = f"{year}-{match['mon']}-{match['day']} {match['time'][:15]}"
        local = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f")  # noqa: DTZ007 - klog logs local time
        return local.astimezone(UTC)
    match = _LOGRUS.match(line)
    if match:
        text = re.sub(r"(\.\d{6})\d*", r"\1", match["stamp"]).replace("Z", "+00:00")
        try:
            return datetime.fromisoformat(text).astimezone(UTC)
        except ValueError:
            return None
    return None


def read_since(path: Path, since: datetime, *, limit: int = MAX_LINES) -> list[str]:
    """Lines logged at or after `since`, reading the file backwards only as far as needed."""
    try:
        size = path.stat().st_size
        handle = path.open("rb")
    except OSError:
        return []
    year = since.astimezone().year
    kept: list[str] = []
    pending: bytes = b""
    with handle:
        end = size
        while end > 0:
            start = max(0, end - CHUNK)
            handle.seek(start)
            block = handle.read(end - start) + pending
            end = start
            lines = block.split(b"\n")
            pending = lines.pop(0) if start > 0 else b""
            older = False
            batch: list[str] = []
            for raw in lines:
                text = raw.decode(errors="replace")
                stamp = line_time(text, year)
                if stamp is not None and stamp < since:
                    older = True
                    batch = []  # everything up to here is older
                    continue
                if stamp is None and older and not batch:
                    continue  # continuation of an older line
                batch.append(text)
            kept = batch + kept
            if older or len(kept) >= limit:
                break
    return [line for line in kept if line][-limit:]


class RigHost:
    def __init__(self, rig: RealNode, *, clock: HostClock | None = None) -> None:
        self.rig = rig
        self._clock: HostClock = clock or RealClock()
        self._linux = LinuxHost(
            rig.layout.host,
            nsenter=False,
            healthz_url=f"http://127.0.0.1:{cfg.HEALTHZ_PORT}/healthz",
            metrics_url=f"http://127.0.0.1:{cfg.READ_ONLY_PORT}/metrics",
            token_file=Path(os.devnull),
            clock=self._clock,
        )
        self.commands: list[tuple[str, ...]] = []

    @property
    def root(self) -> Path:
        return self.rig.layout.host

    @property
    def clock(self) -> HostClock:
        return self._clock

    def run(self, argv: Sequence[str], *, timeout: float = 120.0) -> CommandResult:
        args = tuple(argv)
        self.commands.append(args)
        if args and Path(args[0]).name == "systemctl":
            return self._systemctl(args)
        return self._linux.run(argv, timeout=timeout)

    def _systemctl(self, args: tuple[str, ...]) -> CommandResult:
        verb = args[1] if len(args) > 1 else ""
        unit = (args[2] if len(args) > 2 else "").removesuffix(".service")
        if unit not in (KUBELET, CONTAINERD):
            return CommandResult(args, 5, stderr=f"Unit {unit}.service not found.")
        if verb == "is-active":
            state = self.rig.sup.state(unit)
            return CommandResult(args, 0 if state is UnitState.ACTIVE else 3, stdout=state.value + "\n")
        try:
            if verb in ("restart", "start"):
                if unit == KUBELET:
                    # Type=simple semantics: return once the process runs; readiness is the agent's to check.
                    if verb == "start" and self.rig.sup.pid(KUBELET) is not None:
                        return CommandResult(args, 0)
                    self.rig.restart_kubelet(wait=False)
                else:
                    self.rig.restart_containerd()
                return CommandResult(args, 0)
            if verb == "stop":
                self.rig.sup.stop(unit)
                return CommandResult(args, 0)
        except (RigError, RuntimeError, OSError) as exc:
            return CommandResult(args, 1, stderr=str(exc))
        return CommandResult(args, 1, stderr=f"the rig's systemctl does not support {verb!r}")

    def kubelet_process(self) -> KubeletProcess | None:
        pid = self.rig.sup.pid(KUBELET)
        return None if pid is None else self._linux.process(pid)

    def journal(self, unit: str, since: datetime) -> list[str]:
        node_path = UNIT_LOGS.get(unit)
        if node_path is None:
            return []
        return read_since(self.rig.layout.at(node_path), since)

    def journal_after(self, unit: str, cursor: str, since: datetime, match: str) -> JournalChunk:
        """The rig's unit logs are files: the cursor is a byte offset (a shorter file was started anew)."""
        node_path = UNIT_LOGS.get(unit)
        if node_path is None:
            return JournalChunk((), cursor)
        path = self.rig.layout.at(node_path)
        try:
            size = path.stat().st_size
        except OSError:
            return JournalChunk((), cursor)
        wanted = re.compile(match)  # a regular expression, as journalctl --grep takes it
        if not cursor:
            return JournalChunk(tuple(ln for ln in read_since(path, since) if wanted.search(ln)), str(size))
        offset = int(cursor) if int(cursor) <= size else 0
        found: list[str] = []
        with path.open("rb") as handle:  # in chunks: a kubelet at --v=4 may log hundreds of MB meanwhile
            handle.seek(offset)
            pending = b""
            while offset + len(pending) < size:
                block = pending + handle.read(min(CHUNK, size - offset - len(pending)))
                done = block.rfind(b"\n") + 1  # a line still being written is read next time
                text = block[:done].decode(errors="replace")
                found.extend(ln for ln in text.splitlines() if wanted.search(ln))
                offset, pending = offset + done, block[done:]
                if not done and len(pending) >= 8 * CHUNK:  # a line this long is no kubelet line of ours
                    offset, pending = offset + len(pending), b""
        return JournalChunk(tuple(found[-MAX_LINES:]), str(offset))

    def kubelet_get(self, endpoint: KubeletEndpoint) -> HttpResult:
        return self._linux.kubelet_get(endpoint)
