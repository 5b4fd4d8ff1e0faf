"""After Done, every check interval: drift (our files changed or removed, the gate off in the running
kubelet) and silent fallback to generic PLEG (k8s#129827), healed by a kubelet restart when agent-options
allow and the hourly heal budget is not spent; on containerd 1.7, now and then, a second consumer of the
runtime's event stream (core.node.blocks.eventconsumers). A phase that yields effects
(core.node.blocks.effects). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from eventedpleg import protocol
from eventedpleg.core import runtimes
from eventedpleg.core.agentoptions import AgentOptions, AgentOptionsError
from eventedpleg.core.evidence import Evidence
from eventedpleg.core.node.blocks import eventconsumers
from eventedpleg.core.node.blocks.agentsettings import AgentSettings
from eventedpleg.core.node.blocks.effects import (
    FindKubelet,
    NodeEvent,
    Now,
    Phase,
    ReadApplied,
    ReadFile,
    Report,
    Scrape,
    act,
    ask,
    ask_maybe,
)
from eventedpleg.core.node.blocks.host import KubeletProcess
from eventedpleg.core.node.blocks.hostfault import Faulted
from eventedpleg.core.node.blocks.judge import node_version
from eventedpleg.core.node.blocks.nodeapi import AgentNode
from eventedpleg.core.node.blocks.restart import KUBELET_UNIT, journal, restart_services
from eventedpleg.core.node.blocks.transaction import sha256
from eventedpleg.core.node.blocks.verifyloop import verify
from eventedpleg.core.node.facts import kubeletconfig, kubeletlog
from eventedpleg.core.node.facts.hostplan import ManagedState
from eventedpleg.core.node.facts.promtext import Metrics
from eventedpleg.core.node.facts.verify import Expectation, Outcome, fallen_back, gate_metric
from eventedpleg.core.versions import Version, VersionError, parse_runtime
from eventedpleg.protocol import NodeState
from eventedpleg.reasons import EventReason


@dataclass(frozen=True)
class DoneMemory:
    """What the agent keeps between after-Done checks."""

    heals: tuple[datetime, ...] = ()  # when it healed a fallback (the last hour's count against the budget)
    consumers_checked: datetime | None = None  # its last look for another event consumer
    fault: str = ""  # the host fault that stopped the last look (said once in an Event, not every look)


def _runtime_profile(node: AgentNode) -> runtimes.RuntimeProfile | None:
    """The node's runtime profile: verification reads its running config back when it says so (CRI-O)."""
    try:
        return runtimes.profile_of(parse_runtime(node.runtime_version))
    except VersionError:
        return None


def _drift(managed: ManagedState, desired: str) -> Phase[str | None]:
    if managed.hash != desired:
        return f"the agent's record on the host is for {managed.hash or 'nothing'}, not {desired}"
    for path, digest in sorted(managed.files.items()):
        data = yield from ask_maybe(ReadFile(path), bytes)
        if data is None:
            return f"{path} was removed"
        if sha256(data) != digest:
            return f"{path} was changed"
    edit = managed.config_edit
    if managed.enabled and edit is not None:
        data = yield from ask_maybe(ReadFile(edit.path), bytes)
        try:
            text = None if data is None else data.decode()
            gate = None if text is None else kubeletconfig.config_gate(text, where=edit.path)
        except (UnicodeDecodeError, kubeletconfig.KubeletConfigError):
            gate = None
        if gate is not True:
            return f"featureGates.EventedPLEG in {edit.path} is no longer true (kubeadm upgrade rewrites it)"
    return None


def _drifted(reason: str, evidence: Evidence) -> Phase[None]:
    yield from act(Report(NodeState.DRIFTED, reason, evidence, forget_current=True))


def _event_consumers(
    node: AgentNode, version: Version, memory: DoneMemory, settings: AgentSettings, clock: Now
) -> Phase[DoneMemory]:
    """containerd 1.7 with a second consumer of its event stream: Failed (the rollout halts), and why."""
    try:
        runtime = parse_runtime(node.runtime_version)
    except VersionError:
        return memory
    if not eventconsumers.applies(version, runtime):
        return memory
    if not eventconsumers.due(memory.consumers_checked, settings, clock()):
        return memory
    memory = replace(memory, consumers_checked=clock())
    try:
        found = yield from eventconsumers.check(settings, clock)
    except Faulted:  # a command or read it needs failed: no verdict, as when containerd gives no dump
        return memory
    if found is None:
        return memory
    reason = (
        f"the kubelet misses container events: {found}. {runtime} gives each event to one consumer only, so "
        "the other consumer (`crictl events`, a monitoring agent) takes events from the kubelet, which sees "
        "those pods start and end only at its relist, up to 300 s late (containerd#7318). Stop that "
        "consumer or upgrade containerd to 2.0.9+, then `eventedpleg retry`; or leave the node out of "
        "spec.nodeSelector (its drop-ins come off the safe way)"
    )
    yield from act(Report(NodeState.FAILED, reason, Evidence(result="fail", error=str(found))))
    yield from act(NodeEvent(EventReason.EVENTS_MISSED, reason, warning=True))
    return memory


def after_done(node: AgentNode, memory: DoneMemory, settings: AgentSettings, clock: Now) -> Phase[DoneMemory]:
    """Look at a Done node once; returns what to keep for the next look (the last hour's heals, this one
    included). A host fault stops the look: a warning Event names it the first time (the node's state is
    left alone: nothing is known to have changed), and the next looks try again."""
    try:
        kept = yield from _look(node, memory, settings, clock)
    except Faulted as exc:
        line = exc.fault.line()
        if line != memory.fault:
            yield from act(NodeEvent(EventReason.HOST_FAULT, f"after-Done check: {line}", warning=True))
        return replace(memory, fault=line)
    return replace(kept, fault="")


def _look(node: AgentNode, memory: DoneMemory, settings: AgentSettings, clock: Now) -> Phase[DoneMemory]:
    desired = node.annotations[protocol.ANN_DESIRED]
    managed = yield from ask(ReadApplied(), ManagedState)
    drift = yield from _drift(managed, desired)
    if drift:
        reason = f"drift: {drift}"
        yield from _drifted(reason, Evidence(result="drift", drift=drift))
        yield from act(NodeEvent(EventReason.DRIFT, reason, warning=True))
        return memory
    if not managed.enabled:
        return memory
    proc = yield from ask_maybe(FindKubelet(), KubeletProcess)
    metrics = yield from ask_maybe(Scrape(), Metrics)
    version = node_version(node)
    if proc is None or metrics is None or version is None:
        return memory  # kubelet down or restarting: the Node's Ready condition tells that story
    since = proc.started_at or (clock() - timedelta(hours=1))
    log = kubeletlog.scan(list((yield from journal(KUBELET_UNIT, since))))
    gate_on, gate_text = gate_metric(metrics)
    why = fallen_back(version, metrics, log)
    if gate_on is False:
        reason = f"drift: the running kubelet has EventedPLEG off ({gate_text})"
        yield from _drifted(reason, Evidence(result="drift", drift=gate_text))
        yield from act(NodeEvent(EventReason.DRIFT, reason, warning=True))
        return memory
    if why is None:
        return (yield from _event_consumers(node, version, memory, settings, clock))
    return (yield from _heal_fallback(node, version, why, memory, settings, clock))


def _heal_fallback(
    node: AgentNode, version: Version, why: str, memory: DoneMemory, settings: AgentSettings, clock: Now
) -> Phase[DoneMemory]:
    """A silent fallback to generic PLEG (k8s#129827): healed by a kubelet restart and proven, when the
    agent options allow and the hourly budget lasts; else the node reports Drifted."""
    try:
        options = AgentOptions.from_json(node.annotations.get(protocol.ANN_AGENT_OPTIONS))
    except AgentOptionsError:
        options = AgentOptions()
    heals = tuple(t for t in memory.heals if clock() - t < timedelta(hours=1))
    if not options.heal_fallback or len(heals) >= settings.max_heals_per_hour:
        cause = "healFallback is off" if not options.heal_fallback else "too many heals in the last hour"
        reason = f"fell back to generic PLEG ({why}); not healed: {cause}"
        yield from _drifted(reason, Evidence(fallback=why))
        yield from act(NodeEvent(EventReason.FALLBACK_DETECTED, reason, warning=True))
        return replace(memory, heals=heals)
    heals = (*heals, clock())
    message = f"fell back to generic PLEG ({why}); restarting the kubelet"
    yield from act(NodeEvent(EventReason.FALLBACK_DETECTED, message, warning=True))
    restarted = yield from restart_services(
        restart_runtime=False, runtime_unit="", version=version, clock=clock
    )
    result = restarted.failure
    if result is None:
        expect = Expectation.enabled(_runtime_profile(node))
        timeout = options.verify_timeout_seconds
        result = yield from verify(
            version, expect, since=restarted.at, timeout=timeout, settings=settings, clock=clock
        )
    evidence = Evidence(fallback=why, heal=result.evidence())
    if result.outcome is Outcome.PASS:
        reason = f"healed a silent fallback to generic PLEG by restarting the kubelet (k8s#129827): {why}"
        yield from act(Report(NodeState.DONE, reason, evidence))
        yield from act(NodeEvent(EventReason.FALLBACK_HEALED, reason))
    else:
        reason = f"fell back to generic PLEG ({why}); kubelet restart did not heal it: {result.reason}"
        yield from _drifted(reason, evidence)
        yield from act(NodeEvent(EventReason.FALLBACK_NOT_HEALED, reason, warning=True))
    return replace(memory, heals=heals)
