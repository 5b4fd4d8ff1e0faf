"""The real agent's apply phase (core.node.phases.applyphase) on a model host, for the rollout world
(eventedpleg_lab.sim.rolloutworld): the world runs the product's phase and answers its effects from a few
facts per node -- the files the agent wrote, whether the running kubelet has the gate, whether it is up --
so nobody re-models the agent's rules by hand. Its pacing is shortened (AgentSettings below); the phases'
effects themselves are tested against simulated hosts in tests/agent."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from eventedpleg import protocol
from eventedpleg.core import runtimes
from eventedpleg.core.node.blocks.agentsettings import AgentSettings
from eventedpleg.core.node.blocks.effects import (
    Backup,
    DropConfigBaseline,
    Effect,
    EffectAnswer,
    EndTransaction,
    Healthz,
    MarkHalted,
    NodeEvent,
    Observe,
    Phase,
    PublishBenefit,
    ReadApplied,
    ReadConfigMap,
    ReadHost,
    ReadJournal,
    ReadTransaction,
    Report,
    Restart,
    RestoreFiles,
    Run,
    SaveApplied,
    SaveConfigBaseline,
    SaveTransaction,
    Scrape,
    Wait,
    WriteFiles,
)
from eventedpleg.core.node.blocks.host import CommandResult, HttpResult
from eventedpleg.core.node.blocks.nodeapi import AgentNode
from eventedpleg.core.node.blocks.transaction import FileCopy, Transaction
from eventedpleg.core.node.facts.hostplan import HostFacts, ManagedState
from eventedpleg.core.node.facts.kubeletlog import scan
from eventedpleg.core.node.facts.promtext import Metrics, parse_metrics
from eventedpleg.core.node.facts.verify import Observation
from eventedpleg.core.node.phases import applyphase
from eventedpleg.core.node.phases.agentdecide import AgentAction, next_action
from eventedpleg.core.versions import parse_runtime, parse_version

NAMESPACE = "evented-pleg-system"
# Verification needs >= 10 s without a relist to call the PLEG evented (core.node.facts.verify.relist_mode).
SETTINGS = AgentSettings(namespace=NAMESPACE, poll_seconds=1, min_window_seconds=10, benefit_window_seconds=0)
CONFIG = "/var/lib/kubelet/config.yaml"
CONFIG_DIR = "/etc/kubernetes/kubelet.conf.d"
CONFIG_TEXT = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n"
HELP = "  --feature-gates mapStringBool  Options are:\n      EventedPLEG=true|false (ALPHA - default=false)\n"
START_FAILURE = (
    'E1102 run.go:72] "command failed" err="injected: the kubelet will not start with EventedPLEG"'
)


@dataclass
class ModelHost:
    """One node's host, as few facts as the agent's effects need."""

    kubelet: str
    runtime: str
    fails: bool = False  # the kubelet will not start with Evented PLEG on
    files: dict[str, bytes] = field(default_factory=dict)  # what the agent wrote (host path -> bytes)
    gate_on: bool = False  # the running kubelet has EventedPLEG
    up: bool = True
    started: datetime | None = None
    txn: Transaction | None = None
    applied: ManagedState = field(default_factory=ManagedState)
    baseline: bytes | None = None

    def _files_say_on(self) -> bool:
        return any(
            b"EventedPLEG: true" in data for path, data in self.files.items() if path.startswith(CONFIG_DIR)
        )

    def facts(self) -> HostFacts:
        argv = ("/usr/bin/kubelet", f"--config={CONFIG}", f"--config-dir={CONFIG_DIR}")

        def under(directory: str) -> tuple[tuple[str, str], ...]:
            return tuple(
                (path.removeprefix(directory + "/"), data.decode())
                for path, data in sorted(self.files.items())
                if path.startswith(directory + "/")
            )

        profile = runtimes.profile_of(parse_runtime(self.runtime))
        dropin = profile.dropin if profile is not None else None
        return HostFacts(
            kubelet_version=parse_version(self.kubelet),
            runtime=parse_runtime(self.runtime),
            running_argv=argv,
            unit_argv=argv,
            config_text=CONFIG_TEXT,
            kubelet_dropins=under(CONFIG_DIR),
            runtime_dropins=under(dropin.directory) if dropin is not None else (),
            kubelet_help=HELP,
            config_baseline=None if self.baseline is None else self.baseline.decode(),
        )

    def metrics(self, now: datetime) -> Metrics | None:
        if not self.up:
            return None
        on = int(self.gate_on)
        # The generic PLEG relists every second; an evented one not within a verification window.
        relists = 0 if self.gate_on or self.started is None else int((now - self.started).total_seconds())
        return parse_metrics(
            f'kubernetes_feature_enabled{{name="EventedPLEG",stage="ALPHA"}} {on}\n'
            f"kubelet_evented_pleg_connection_success_count {on}\n"
            "kubelet_evented_pleg_connection_error_count 0\n"
            f"kubelet_pleg_relist_interval_seconds_count {relists}\n"
            f"kubelet_pleg_relist_interval_seconds_sum {relists}\n"
        )

    def restart(self, unit: str, now: datetime) -> CommandResult:
        if unit == "kubelet":
            self.gate_on = self._files_say_on()
            self.up = not (self.fails and self.gate_on)
            self.started = now
        return CommandResult(("systemctl", "restart", unit), 0)

    def runtime_events(self, runtime: runtimes.RuntimeProfile) -> bool | None:
        dropin = runtime.dropin
        ours = self.files.get(dropin.path) if dropin is not None else None
        return ours is not None and dropin is not None and f"{dropin.setting[-1]} = true".encode() in ours


# The agent's write of its Node's annotations: (annotations, the desired-config it requires) -> written
AnnotationWrite = Callable[[Mapping[str, str | None], str], bool]


@dataclass
class ModelAgent:
    """The agent of one node: starts the real apply phase when its Node asks (the real next_action rule),
    and performs its effects on the model host and, through `write` and `emit`, on the world's Node."""

    host: ModelHost
    configmaps: Mapping[str, Mapping[str, str]]  # ConfigMap name -> data
    phase: Phase[None] | None = None
    node: AgentNode | None = None
    wake: datetime | None = None
    answer: EffectAnswer = None
    now: datetime = field(default_factory=lambda: datetime.now(UTC))  # set by every step

    def clock(self) -> datetime:
        return self.now

    def step(
        self, node: AgentNode, now: datetime, write: AnnotationWrite, emit: Callable[[str], None]
    ) -> None:
        """Let the agent work until it waits past `now` (or is done)."""
        self.now = now
        if self.phase is None:
            if next_action(node.annotations) is not AgentAction.APPLY:
                return
            self.node, self.answer, self.wake = node, None, None
            self.phase = applyphase.apply(node, SETTINGS, self.clock)
        if self.wake is not None and now < self.wake:
            return
        while True:
            try:
                effect = self.phase.send(self.answer)
            except StopIteration:
                self.phase = None
                return
            if isinstance(effect, Wait):
                self.wake, self.answer = now + timedelta(seconds=effect.seconds), None
                return
            self.answer = self.perform(effect, now, write, emit)

    def perform(
        self, effect: Effect, now: datetime, write: AnnotationWrite, emit: Callable[[str], None]
    ) -> EffectAnswer:
        host, node = self.host, self.node
        assert node is not None
        match effect:
            case ReadConfigMap(_, name):
                data = self.configmaps.get(name)
                return None if data is None else dict(data)
            case ReadTransaction():
                return host.txn
            case ReadApplied():
                return host.applied
            case ReadHost():
                return host.facts()
            case Backup(paths):
                return tuple(FileCopy(host.files.get(p)) for p in paths)
            case SaveTransaction(txn):
                host.txn = txn
            case MarkHalted():
                host.txn = None if host.txn is None else replace(host.txn, halted=True)
            case EndTransaction():
                host.txn = None
            case WriteFiles(changes):
                for change in changes:
                    if change.content is None:
                        host.files.pop(change.path, None)
                    else:
                        host.files[change.path] = change.content.encode()
            case RestoreFiles(txn):
                for path, copy in txn.backups:
                    if copy.content is None:
                        host.files.pop(path, None)
                    else:
                        host.files[path] = copy.content
            case SaveApplied(state):
                host.applied = state
            case SaveConfigBaseline(content):
                host.baseline = content
            case DropConfigBaseline():
                host.baseline = None
            case Restart(unit):
                return host.restart(unit, now)
            case Run(("systemctl", "is-active", _)):
                return CommandResult(effect.argv, 0 if host.up else 3, "active\n" if host.up else "failed\n")
            case Healthz():
                return HttpResult(200, "ok") if host.up else HttpResult(0, error="connection refused")
            case ReadJournal():
                return () if host.up else (START_FAILURE,)
            case Scrape():
                return host.metrics(now)
            case Observe(baseline, window, _, runtime):
                return Observation(
                    window_seconds=window,
                    healthz=host.up,
                    node_ready=host.up,
                    baseline=baseline,
                    metrics=host.metrics(now),
                    log=scan([] if host.up else [START_FAILURE]),
                    runtime_events=host.runtime_events(runtime) if runtime is not None else None,
                    runtime_source=" ".join(runtime.config_commands[0]) if runtime is not None else "",
                )
            case Report():
                return write(effect.annotations(now), node.annotations.get(protocol.ANN_DESIRED, ""))
            case PublishBenefit(text):
                return write({protocol.ANN_BENEFIT: text}, node.annotations.get(protocol.ANN_DESIRED, ""))
            case NodeEvent(reason):
                emit(reason)
            case _:
                raise AssertionError(f"the model host has no answer for {effect!r}")
        return None
