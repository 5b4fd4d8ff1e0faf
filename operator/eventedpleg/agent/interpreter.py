"""Perform the agent's effects (core.node.phases.effects) on one host and against the API: the only place
where
the agent's phases touch anything. The same interpreter runs on the real host (agent.linuxhost) and, in
tests, on a simulated one (eventedpleg_lab.sim).

A phase becomes a `Work`: a generator of the seconds to wait (each Wait), so one agent can be driven by a
blocking loop (agent.agent.drive) and many by one scheduler over an injected clock.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field, replace
from typing import TypeVar

from eventedpleg import constants as c
from eventedpleg.agent.hostfiles import HostFiles
from eventedpleg.agent.hostread import read_facts
from eventedpleg.agent.observe import Observer
from eventedpleg.agent.statestore import StateStore
from eventedpleg.core.node.phases.effects import (
    Backup,
    DropConfigBaseline,
    Effect,
    EffectAnswer,
    EndTransaction,
    FindKubelet,
    Healthz,
    MarkHalted,
    NodeEvent,
    Observe,
    Phase,
    PublishBenefit,
    PublishHostCheck,
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
    Wait,
    WriteFiles,
)
from eventedpleg.core.node.phases.host import Host, KubeletEndpoint
from eventedpleg.core.node.phases.nodeapi import AgentApi, AgentNode
from eventedpleg.core.node.phases.transaction import Transaction

T = TypeVar("T")
Work = Generator[float, None, T]
MESSAGE_LIMIT = 1024


@dataclass
class Interpreter:
    node: str
    host: Host
    api: AgentApi
    trace: list[Effect] | None = field(default=None)  # every effect performed, when a list is given

    def __post_init__(self) -> None:
        self.files = HostFiles(self.host.root)
        self.store = StateStore(self.files)
        self.observer = Observer(self.host, self.api, self.node)

    def run(self, phase: Phase[T], node: AgentNode) -> Work[T]:
        """Perform `phase`, which acts on `node` as read when it began."""
        answer: EffectAnswer = None
        while True:
            try:
                effect = phase.send(answer)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            if self.trace is not None:
                self.trace.append(effect)
            if isinstance(effect, Wait):
                yield effect.seconds
                answer = None
            else:
                answer = self.perform(effect, node)

    def perform(self, effect: Effect, node: AgentNode) -> EffectAnswer:
        match effect:
            case Run(argv, timeout):
                return self.host.run(list(argv), timeout=timeout)
            case Restart(unit):
                return self.host.run(["systemctl", "restart", unit])
            case WriteFiles(changes, protected, remove_dirs):
                self.files.sweep_temp_files([ch.path for ch in changes], protected)
                try:
                    for change in changes:
                        if change.content is None:
                            self.files.remove(change.path)
                        else:
                            self.files.write_atomic(change.path, change.content.encode(), protected=protected)
                    for directory in remove_dirs:
                        self.files.remove_empty_dir(directory)
                except OSError as exc:
                    return str(exc)
                return None
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
                return self._patch(effect.annotations(self.host.clock.now()), node)
            case PublishBenefit(text):
                return self._patch({c.ANN_BENEFIT: text}, node)
            case PublishHostCheck(check):
                # Unconditional, unlike Report: the key is the agent's alone and what the host allows
                # does not depend on what the operator asks (desired-config, state).
                written = self.api.patch_node_annotations(self.node, {c.ANN_HOST_CHECK: check.to_json()})
                return written is not None
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
                return tuple(self.files.copy_of(path) for path in paths)
            case ReadFile(path):
                return self.files.read_bytes(path)
            case Healthz():
                return self.host.kubelet_get(KubeletEndpoint.HEALTHZ)
            case Scrape(only):
                return self.observer.metrics(only)
            case ReadJournal(unit, since):
                return tuple(self.host.journal(unit, since))
            case Observe(baseline, window, since, crio):
                return self.observer.observe(baseline=baseline, window=window, since=since, crio=crio)
            case FindKubelet():
                return self.host.kubelet_process()
            case _:
                raise AssertionError(f"unknown effect {effect!r}")
        return None

    def _restore(self, txn: Transaction) -> str | None:
        try:
            for path, copy in txn.backups:
                self.files.restore(path, copy, protected=txn.protected)
            for directory in reversed(txn.created_dirs):
                self.files.remove_empty_dir(directory)
        except OSError as exc:
            return str(exc)
        return None

    def _patch(self, changes: Mapping[str, str | None], node: AgentNode) -> bool:
        """Patch our annotations, only while desired-config is still what the phase acted on."""
        require = {c.ANN_DESIRED: node.annotations.get(c.ANN_DESIRED, "")}
        return self.api.patch_node_annotations(self.node, changes, require=require) is not None


def drive(work: Work[T], sleep: Callable[[float], None]) -> T:
    """Run a step to completion, sleeping whenever it asks to wait."""
    try:
        while True:
            sleep(next(work))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
