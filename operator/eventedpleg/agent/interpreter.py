"""Perform the agent's effects (core.node.blocks.effects) on one host and against the API: the only place
where
the agent's phases touch anything. The same interpreter runs on the real host (agent.linuxhost) and, in
tests, on a simulated one (eventedpleg_lab.sim).

Every host effect is contained here: an OSError (by its errno), a command that is missing or timed out, a
subprocess error, or a kubelet port answering with another node's certificate (agent.observe) becomes a
HostFault answer (core.node.blocks.hostfault) naming the operation, the host path or command, the errno
(or the mismatch) in words and the fix, so a phase ends in a report and never in a traceback.
API effects are not contained: the loop (agent.runner) retries an API that fails.

A phase becomes a `Work`: a generator of the seconds to wait (each Wait), so one agent can be driven by a
blocking loop (agent.agent.drive) and many by one scheduler over an injected clock.
"""

from __future__ import annotations

import errno
import logging
import os
import subprocess
from collections.abc import Callable, Generator, Mapping
from dataclasses import InitVar, dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from eventedpleg import protocol
from eventedpleg.agent.hostfiles import HostFiles
from eventedpleg.agent.hostread import read_facts
from eventedpleg.agent.metrics import AgentMetrics
from eventedpleg.agent.observe import UNTRUSTED_FIX, Observer, UntrustedKubeletError
from eventedpleg.agent.statestore import StateStore
from eventedpleg.core import guardincidents
from eventedpleg.core.node import narration
from eventedpleg.core.node.blocks.effects import (
    Backup,
    DropConfigBaseline,
    Effect,
    EffectAnswer,
    EndTransaction,
    FindKubelet,
    FollowJournal,
    GuardCount,
    Healthz,
    MarkHalted,
    NodeEvent,
    Observe,
    Phase,
    PublishBenefit,
    PublishHostCheck,
    PublishIncidents,
    ReadApplied,
    ReadConfigMap,
    ReadFile,
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
    SetHealthCondition,
    Wait,
    WriteFiles,
)
from eventedpleg.core.node.blocks.host import CommandResult, Host, KubeletEndpoint
from eventedpleg.core.node.blocks.hostfault import HostFault, fault
from eventedpleg.core.node.blocks.nodeapi import AgentApi, AgentNode
from eventedpleg.core.node.blocks.transaction import Transaction
from eventedpleg.core.node.facts.hostplan import FileChange
from eventedpleg.logfields import fields

log = logging.getLogger(__name__)

T = TypeVar("T")
Work = Generator[float, None, T]
MESSAGE_LIMIT = 1024
# What each host effect does, as its HostFault names it (the API effects are not here: see the docstring).
OPERATIONS: dict[type, str] = {
    Run: "run",
    Restart: "restart",
    WriteFiles: "write",
    RestoreFiles: "restore",
    SaveTransaction: "record the transaction in",
    MarkHalted: "record the halt in",
    EndTransaction: "end the transaction in",
    SaveApplied: "record the applied state in",
    SaveConfigBaseline: "keep the kubelet config in",
    DropConfigBaseline: "drop the kept kubelet config in",
    ReadTransaction: "read the transaction in",
    ReadApplied: "read the applied state in",
    ReadHost: "read",
    Backup: "back up",
    ReadFile: "read",
    Healthz: "ask the kubelet's /healthz on",
    Scrape: "scrape the kubelet's /metrics on",
    ReadJournal: "read the journal of",
    FollowJournal: "follow the journal of",
    Observe: "observe the kubelet on",
    FindKubelet: "find the kubelet on",
}


@dataclass
class Interpreter:
    node: str
    host: Host
    api: AgentApi
    trace: list[Effect] | None = field(default=None)  # every effect performed, when a list is given
    host_files: InitVar[HostFiles | None] = None  # the host's file work (default: HostFiles on its root)
    metrics: AgentMetrics | None = None

    def __post_init__(self, host_files: HostFiles | None) -> None:
        self.files = host_files or HostFiles(self.host.root)
        self.store = StateStore(self.files)
        self.observer = Observer(self.host, self.api, self.node)

    def run(self, phase: Phase[T], node: AgentNode, name: str = "") -> Work[T]:
        """Perform `phase`, which acts on `node` as read when it began; its time goes to the metrics
        under `name` (agent.agent.Agent names them: service, apply, after_done, host_check, guard,
        guard_rollback) when it ends. Each step it takes is said in the log (core.node.narration), with
        the node's fields."""
        answer: EffectAnswer = None
        started = self.host.clock.now()
        extra = fields(
            node=self.node,
            nodeconfig=node.annotations.get(protocol.ANN_OWNER, ""),
            hash=node.annotations.get(protocol.ANN_DESIRED, ""),
            phase=name,
        )
        last_report = ""
        while True:
            try:
                effect = phase.send(answer)
            except StopIteration as stop:
                if self.metrics is not None and name:
                    self.metrics.phase(name, (self.host.clock.now() - started).total_seconds())
                return stop.value  # type: ignore[no-any-return]
            if self.trace is not None:
                self.trace.append(effect)
            if isinstance(effect, Wait):
                yield effect.seconds
                answer = None
            else:
                answer = self.perform(effect, node)
                for line in narration.narrate(effect, answer, last_report=last_report):
                    level = logging.WARNING if line.warning else logging.INFO
                    log.log(level, "%s", line.message, extra=extra)
                if isinstance(effect, Report):
                    last_report = effect.reason

    def perform(self, effect: Effect, node: AgentNode) -> EffectAnswer:
        """The effect's answer; for a host effect that failed, its HostFault."""
        operation = OPERATIONS.get(type(effect))
        if operation is None:
            return self._perform(effect, node)
        try:
            answer = self._perform(effect, node)
        except UntrustedKubeletError as exc:
            return HostFault(operation, self.node, "", str(exc), UNTRUSTED_FIX)
        except OSError as exc:
            return self.file_fault(operation, self._target(effect), exc)
        except subprocess.TimeoutExpired as exc:
            return fault(operation, _command(exc.cmd), errno.ETIMEDOUT)
        except subprocess.SubprocessError as exc:
            return fault(operation, self._target(effect), None, words=str(exc))
        if isinstance(answer, CommandResult):
            return _command_fault(answer) or answer
        return answer

    def file_fault(self, operation: str, target: str, exc: OSError) -> HostFault:
        """The HostFault of a file operation: the host path the error names (else `target`), the errno, and
        what HostFiles said beyond the errno's words (what kind of file stood there, where a link led)."""
        named = exc.filename2 or exc.filename  # a rename names its target second
        path = self._host_path(named) if isinstance(named, str | Path) else target
        said = exc.strerror or str(exc)
        if exc.errno is None:
            return fault(operation, path, None, words=said)
        return fault(operation, path, exc.errno, detail="" if said == os.strerror(exc.errno) else said)

    def _host_path(self, filename: str | Path) -> str:
        path, root = Path(filename), Path(self.host.root)
        for base in (root, root.resolve()):
            if path == base or base in path.parents:
                return "/" + str(path.relative_to(base)).removeprefix(".")
        return str(path)

    def _target(self, effect: Effect) -> str:
        """What the effect works on, for a fault that names no file."""
        match effect:
            case Run(argv):
                return _command(argv)
            case Restart(unit):
                return _command(("systemctl", "restart", unit))
            case WriteFiles(changes) if changes:
                return ", ".join(ch.path for ch in changes)
            case RestoreFiles(txn) if txn.backups:
                return ", ".join(txn.paths)
            case Backup(paths) if paths:
                return ", ".join(paths)
            case ReadFile(path):
                return path
            case ReadJournal(unit) | FollowJournal(unit):
                return unit
            case SaveTransaction() | MarkHalted() | EndTransaction() | ReadTransaction():
                return self.store.dir
            case SaveApplied() | ReadApplied() | SaveConfigBaseline() | DropConfigBaseline():
                return self.store.dir
        return "the host"

    def _perform(self, effect: Effect, node: AgentNode) -> EffectAnswer:
        match effect:
            case Run(argv, timeout):
                return self.host.run(list(argv), timeout=timeout)
            case Restart(unit):
                return self.host.run(["systemctl", "restart", unit])
            case WriteFiles(changes, remove_dirs):
                return self._write(changes, remove_dirs)
            case RestoreFiles(txn):
                return self._restore(txn)
            case SaveTransaction(txn):
                self.store.begin(txn)
            case MarkHalted():
                self.store.mark_halted()
            case EndTransaction():
                self.store.end()
            case SaveApplied(state):
                self.store.save_applied(state)
            case SaveConfigBaseline(content):
                self.store.save_config_baseline(content)
            case DropConfigBaseline():
                self.store.drop_config_baseline()
            case Report():
                patched = self._patch(effect.annotations(self.host.clock.now()), node)
                if patched and self.metrics is not None:
                    self.metrics.reported(effect.state, effect.evidence)
                return patched
            case PublishBenefit(text):
                return self._patch({protocol.ANN_BENEFIT: text}, node)
            case PublishHostCheck(check):
                # Unconditional, unlike Report: the key is the agent's alone and what the host allows
                # does not depend on what the operator asks (desired-config, state).
                written = self.api.patch_node_annotations(
                    self.node, {protocol.ANN_HOST_CHECK: check.to_json()}
                )
                return written is not None
            case PublishIncidents() | SetHealthCondition() | GuardCount():
                return self._guard(effect)
            case NodeEvent(reason, message, warning):
                self.api.emit_event(node, reason=reason, message=message[:MESSAGE_LIMIT], warning=warning)
            case ReadConfigMap(namespace, name):
                data = self.api.read_configmap(namespace, name)
                return None if data is None else dict(data)
            case ReadTransaction():
                return self.store.transaction()
            case ReadApplied():
                return self.store.applied()
            case ReadHost(enabling):
                facts = read_facts(self.host, self.files, node, enabling=enabling)
                return replace(facts, config_baseline=self.store.config_baseline())
            case Backup(paths):
                copies = []
                for path in paths:
                    try:
                        copies.append(self.files.copy_of(path))
                    except OSError as exc:
                        return self.file_fault("back up", path, exc)
                return tuple(copies)
            case ReadFile(path):
                return self.files.read_bytes(path)
            case Healthz():
                return self.host.kubelet_get(KubeletEndpoint.HEALTHZ)
            case Scrape(only):
                return self.observer.metrics(only)
            case ReadJournal(unit, since):
                return tuple(self.host.journal(unit, since))
            case FollowJournal(unit, cursor, since, match):
                return self.host.journal_after(unit, cursor, since, match)
            case Observe(baseline, window, since, runtime):
                return self.observer.observe(baseline=baseline, window=window, since=since, runtime=runtime)
            case FindKubelet():
                return self.host.kubelet_process()
            case _:
                raise AssertionError(f"unknown effect {effect!r}")
        return None

    def _guard(self, effect: PublishIncidents | SetHealthCondition | GuardCount) -> EffectAnswer:
        """The guard's writes (core.node.phases.guardphase): its annotation, its condition, its metrics."""
        match effect:
            case PublishIncidents(text):
                return (
                    self.api.patch_node_annotations(self.node, {protocol.ANN_GUARD_INCIDENTS: text})
                    is not None
                )
            case SetHealthCondition(healthy, reason, message):
                now = self.host.clock.now()
                condition = guardincidents.condition(healthy, reason, message[:MESSAGE_LIMIT], now)
                self.api.set_node_condition(self.node, condition)
            case GuardCount(incident, heal_seconds, rolled_back) if self.metrics is not None:
                self.metrics.guard(incident, heal_seconds, rolled_back=rolled_back)
        return None

    def _write(self, changes: tuple[FileChange, ...], remove_dirs: tuple[str, ...]) -> HostFault | None:
        """Sweep, then write or remove each file; the first failure stops there (the phase restores)."""
        operation, target = "sweep temp files for", ", ".join(ch.path for ch in changes)
        try:
            self.files.sweep_temp_files([ch.path for ch in changes])
            for change in changes:
                operation, target = (
                    ("remove", change.path) if change.content is None else ("write", change.path)
                )
                if change.content is None:
                    self.files.remove(change.path)
                else:
                    # A file edited in place (the kubelet's --config) keeps its mode, owner and xattrs.
                    was = self.files.copy_of(change.path)
                    like = was if was.content is not None else None
                    mode = was.mode if like is not None else 0o644
                    data = change.content.encode()
                    self.files.write_atomic(change.path, data, mode=mode, like=like)
            for directory in remove_dirs:
                operation, target = "remove the directory", directory
                self.files.remove_empty_dir(directory)
        except OSError as exc:
            return self.file_fault(operation, target, exc)
        return None

    def _restore(self, txn: Transaction) -> HostFault | None:
        operation, target = "restore", ", ".join(txn.paths)
        try:
            for path, copy in txn.backups:
                operation, target = "restore", path
                self.files.restore(path, copy)
            for directory in reversed(txn.created_dirs):
                operation, target = "remove the directory", directory
                self.files.remove_empty_dir(directory)
        except OSError as exc:
            return self.file_fault(operation, target, exc)
        return None

    def _patch(self, changes: Mapping[str, str | None], node: AgentNode) -> bool:
        """Patch our annotations, only while desired-config is still what the phase acted on."""
        require = {protocol.ANN_DESIRED: node.annotations.get(protocol.ANN_DESIRED, "")}
        return self.api.patch_node_annotations(self.node, changes, require=require) is not None


def _command(argv: object) -> str:
    if isinstance(argv, list | tuple):
        return "`" + " ".join(str(a) for a in argv) + "`"
    return f"`{argv}`"


def _command_fault(result: CommandResult) -> HostFault | None:
    """A command that did not run at all (missing: 127, as agent.linuxhost reports it) or did not finish in
    time is a fault; one that ran and failed is an answer the phase judges."""
    if result.timed_out:
        return fault("run", _command(result.argv), errno.ETIMEDOUT, detail=result.stderr.strip())
    if result.returncode == 127:
        return fault("run", _command(result.argv), errno.ENOENT, detail=result.stderr.strip())
    return None


def drive(work: Work[T], sleep: Callable[[float], None]) -> T:
    """Run a step to completion, sleeping whenever it asks to wait."""
    try:
        while True:
            sleep(next(work))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
