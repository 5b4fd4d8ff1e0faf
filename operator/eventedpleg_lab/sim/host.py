"""A simulated node host: real files under a temp root, simulated systemd, kubelet, runtime and journal.

It implements `eventedpleg.core.node.blocks.host.Host`, so the real agent runs against it unchanged. It is
cheap: no
threads, no processes; the kubelet and runtime advance when they are looked at, by the injected clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path, PurePosixPath

from eventedpleg.core.node.blocks.host import (
    CommandResult,
    HostClock,
    HttpResult,
    JournalChunk,
    KubeletEndpoint,
    KubeletProcess,
)
from eventedpleg.core.versions import parse_runtime, parse_version
from eventedpleg_lab.sim import systemd
from eventedpleg_lab.sim.files import FileFaults, SimFiles
from eventedpleg_lab.sim.journal import Journal
from eventedpleg_lab.sim.kubelet import KubeletFaults, SimKubelet, Status
from eventedpleg_lab.sim.profiles import HostProfile, layout
from eventedpleg_lab.sim.runtime import RuntimeFaults, SimCrio, SimRuntime

BOOT_UPTIME_SECONDS = 3600.0
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"


@dataclass
class CommandFaults:
    """Commands that fail the way they do on a real host (agent.linuxhost runs them through nsenter)."""

    missing: set[str] = field(default_factory=set)  # names not installed: exit 127, as execvp's ENOENT
    hangs: dict[tuple[str, ...], int] = field(default_factory=dict)  # argv prefix -> times it hangs
    # A hanging command is killed at its timeout: subprocess.run raises TimeoutExpired, which LinuxHost.run
    # answers with exit 124 and timed_out (the clock moves by the whole timeout).


@dataclass
class Faults:
    """Failure injection: flip these in a test before or during a run."""

    kubelet: KubeletFaults = field(default_factory=KubeletFaults)
    runtime: RuntimeFaults = field(default_factory=RuntimeFaults)
    files: FileFaults = field(default_factory=FileFaults)
    commands: CommandFaults = field(default_factory=CommandFaults)
    host_calls: dict[str, OSError] = field(default_factory=dict)  # Host method -> the OSError it raises


class SimHost:
    def __init__(
        self,
        root: Path,
        profile: HostProfile,
        clock: HostClock,
        *,
        faults: Faults | None = None,
        boot: bool = True,
    ) -> None:
        self._root = root
        self.profile = profile
        self._clock = clock
        self.faults = faults or Faults()
        self.logs = Journal()
        self.commands: list[tuple[str, ...]] = []
        self.files = SimFiles(root, self.faults.files)  # for the agent's interpreter (Agent(files=...))
        root.mkdir(parents=True, exist_ok=True)
        layout(profile, root)
        self.faults.files.read_only.update(profile.read_only)
        runtime_kind = parse_runtime(profile.runtime)
        assert runtime_kind.version is not None
        runtime_cls: type[SimRuntime] = SimCrio if profile.runtime_kind == "cri-o" else SimRuntime
        self.runtime = runtime_cls(root, runtime_kind.version, self.logs, self.faults.runtime)
        environ = {"PATH": PATH, **profile.unit_environment}
        self.kubelet = SimKubelet(
            root=root,
            version=parse_version(profile.kubelet_version),
            argv=profile.argv(),
            environ=environ,
            journal=self.logs,
            faults=self.faults.kubelet,
            pod_event_period=profile.pod_event_period,
        )
        if boot:
            # The node has been up for a while: history in the journal and the relist histogram.
            booted = clock.now() - timedelta(seconds=BOOT_UPTIME_SECONDS)
            self.runtime.start(booted)
            self.kubelet.start(booted, self.runtime)
            self.advance()

    # --- Host protocol ----------------------------------------------------------------------------------

    @property
    def root(self) -> Path:
        return self._root

    @property
    def clock(self) -> HostClock:
        return self._clock

    def run(self, argv: Sequence[str], *, timeout: float = 120.0) -> CommandResult:
        args = tuple(argv)
        self.commands.append(args)
        self.advance()
        if not args:
            return CommandResult(args, 127, stderr="empty command")
        name = PurePosixPath(args[0]).name
        if name in self.faults.commands.missing:
            return CommandResult(
                args, 127, stderr=f"nsenter: failed to execute {args[0]}: No such file or directory"
            )
        hang = next((p for p, n in self.faults.commands.hangs.items() if n > 0 and args[: len(p)] == p), None)
        if hang is not None:
            self.faults.commands.hangs[hang] -= 1
            self._clock.sleep(timeout)
            return CommandResult(args, 124, stderr=f"timed out after {timeout:.0f}s", timed_out=True)
        if name == "systemctl":
            return self._systemctl(args)
        if name == "kubelet":
            if "--help" in args or "-h" in args:
                return CommandResult(args, 0, stdout=self.kubelet.help_text())
            if "--version" in args:
                return CommandResult(args, 0, stdout=f"Kubernetes v{self.kubelet.version}\n")
            return CommandResult(args, 1, stderr="the simulated kubelet only answers --help and --version")
        if name in ("crio", "crio-status") and isinstance(self.runtime, SimCrio):
            return self._crio(args)
        return CommandResult(args, 127, stderr=f"{name}: command not found")

    def _call(self, method: str) -> None:
        """An OSError injected into a Host call (a real host's /proc or journal read can fail so)."""
        error = self.faults.host_calls.get(method)
        if error is not None:
            raise error

    def kubelet_process(self) -> KubeletProcess | None:
        self._call("kubelet_process")
        self.advance()
        # As agent.linuxhost finds it: kubelet.service's main process. k3s runs its kubelet inside
        # `k3s agent`, under a unit of its own: there is no kubelet.service main process then.
        if self.kubelet.status is not Status.RUNNING or PurePosixPath(self.kubelet.argv[0]).name != "kubelet":
            return None
        if self.profile.bootstrap is not None and not self.profile.bootstrap.kubelet_unit:
            return None  # a kubelet that no kubelet.service runs (Talos, RKE2)
        kubelet = self.kubelet
        return KubeletProcess(
            kubelet.pid, kubelet.argv, dict(kubelet.environ), kubelet.started_at, kubelet.argv[0]
        )

    def journal(self, unit: str, since: datetime) -> list[str]:
        self._call("journal")
        self.advance()
        return self.logs.read(unit, since)

    def journal_after(self, unit: str, cursor: str, since: datetime, match: str) -> JournalChunk:
        self._call("journal")
        self.advance()
        lines, after = self.logs.read_after(unit, cursor, since, match)
        return JournalChunk(tuple(lines), after)

    def kubelet_get(self, endpoint: KubeletEndpoint) -> HttpResult:
        self._call("kubelet_get")
        self.advance()
        now = self._clock.now()
        if not self.kubelet.healthy(now):
            return HttpResult(0, error="dial tcp 127.0.0.1:10248: connect: connection refused")
        if endpoint is KubeletEndpoint.HEALTHZ:
            return HttpResult(200, "ok")
        if self.faults.kubelet.metrics_unavailable:
            return HttpResult(503, error="metrics unavailable (injected)")
        return HttpResult(200, self.kubelet.metrics_text(now))

    # --- simulation -------------------------------------------------------------------------------------

    def advance(self) -> None:
        self.kubelet.advance(self._clock.now(), self.runtime)

    def node_ready(self) -> bool:
        """What the node's Ready condition would say (kubelet up and posting status)."""
        self.advance()
        return self.kubelet.healthy(self._clock.now())

    def restart_runtime(self) -> bool:
        """A runtime restart by someone else (package upgrade, admin): k8s#129827."""
        now = self._clock.now()
        self.runtime.stop(now)
        ok, _ = self.runtime.start(now)
        self.kubelet.runtime_restarted(now)
        return ok

    def daemon_reload(self) -> None:
        """systemd re-reads kubelet.service and its drop-ins; the next (re)start runs what they say."""
        loaded = systemd.load(self._root, "kubelet")
        if loaded is not None:
            self.kubelet.argv = loaded.argv
            self.kubelet.environ = {"PATH": PATH, **loaded.environment}

    def path(self, host_path: str) -> Path:
        return self._root / host_path.lstrip("/")

    def _systemctl(self, args: tuple[str, ...]) -> CommandResult:
        verb = args[1] if len(args) > 1 else ""
        unit = (args[2] if len(args) > 2 else "").removesuffix(".service")
        now = self._clock.now()
        units = ("k3s-agent",) if self.profile.distribution == "k3s" else ("kubelet", self.runtime.unit)
        if verb == "daemon-reload":
            self.daemon_reload()
            return CommandResult(args, 0)
        if unit not in units:
            return CommandResult(
                args, 5, stderr=f"Failed to {verb} {unit}.service: Unit {unit}.service not found."
            )
        if verb in ("restart", "start"):
            if unit == "kubelet":
                self.kubelet.start(now, self.runtime)  # Type=simple: systemctl returns before it can fail
                return CommandResult(args, 0)
            self.runtime.stop(now)
            ok, why = self.runtime.start(now)
            self.kubelet.runtime_restarted(now)
            if not ok:
                return CommandResult(
                    args,
                    1,
                    stderr=f"Job for {unit}.service failed because the control process exited with error "
                    f'code. See "systemctl status {unit}.service" and "journalctl -xeu {unit}.service" for '
                    f"details. ({why})",
                )
            return CommandResult(args, 0)
        if verb == "stop":
            if unit == "kubelet":
                self.kubelet.stop(now)
            else:
                self.runtime.stop(now)
                self.kubelet.runtime_restarted(now)
            return CommandResult(args, 0)
        if verb == "is-active":
            if unit == "kubelet":
                state = {Status.RUNNING: "active", Status.FAILED: "activating", Status.STOPPED: "inactive"}
                word = state[self.kubelet.status]
            else:
                word = "active" if self.runtime.running else "failed"
            return CommandResult(args, 0 if word == "active" else 3, stdout=word + "\n")
        return CommandResult(args, 1, stderr=f"simulated systemctl does not support {verb!r}")

    def _crio(self, args: tuple[str, ...]) -> CommandResult:
        assert isinstance(self.runtime, SimCrio)
        crio = self.runtime
        name = PurePosixPath(args[0]).name
        rest = args[1:]
        if rest[:1] == ("--version",) or rest[:1] == ("version",):
            return CommandResult(args, 0, stdout=f"crio version {crio.version}\n")
        status_cmd = (name == "crio" and rest[:2] == ("status", "config")) or (
            name == "crio-status" and rest[:1] == ("config",)
        )
        if status_cmd:
            has_status = crio.version.minor_pair >= (1, 28)
            if (name == "crio") != has_status:
                return CommandResult(args, 1, stderr=f"{name}: unknown command {' '.join(rest)!r}")
            if not crio.running:
                return CommandResult(
                    args, 1, stderr="connect: no such file or directory: /var/run/crio/crio.sock"
                )
            return CommandResult(args, 0, stdout=crio.render(crio.running_config))
        if name == "crio" and rest[:1] == ("config",):
            try:
                return CommandResult(args, 0, stdout=crio.render(crio.load()))
            except ValueError as exc:
                return CommandResult(args, 1, stderr=f'level=fatal msg="{exc}"')
        return CommandResult(args, 1, stderr=f"simulated {name} does not support {' '.join(rest)!r}")
