"""The guard: a cheap look at a Done node with the gate on every few seconds (AgentSettings.
guard_interval_seconds) for the gate's own failures after the rollout (core.node.facts.guardsigns), and what
follows one. A phase that yields effects (core.node.blocks.effects). Pure.

An incident: a warning Event on the Node, the Node condition EventedPLEGHealthy False
(core.guardincidents), the incident kept in the Node's eventedpleg.io/guard-incidents and counted
(eventedpleg_agent_guard_incidents_total). Then, with AgentOptions.guard on:

- fewer than guard_incidents incidents in guard_window_seconds: restart the kubelet alone (the only way out
  of the wedge: nothing else drains its channel), and prove it syncs pods again: no wedge line from the
  new kubelet, kubelet_pleg_last_seen_seconds fresh and discards not rising for a window. Healed: Event
  PLEGWedgeHealed with the time from the first sign, the condition True, the heal time in
  eventedpleg_agent_guard_heal_seconds. Not proven: PLEGWedgeNotHealed; the next look decides again.
- that many: take the gate off in place (applyphase.take_back: the kubelet drop-in comes off, only the
  kubelet restarts, generic PLEG verified), RolledBack with the incidents as evidence, the condition False
  RolledBackByGuard.

With the guard off it only detects and says so, once per incident, and never restarts anything.

A look costs one `journalctl --after-cursor --grep` (the journal filters; the agent reads only the matching
lines logged since its last look) and one /metrics scrape parsed for three metrics; never a scan of the
whole log. Measured by tests/realnode/test_guard_realnode.py on the real-node rig (kubelet v1.36.4 at
--v=4, containerd 2.2.9, 2 shared cores under other load, 2026-11-28): 10.5 CPU seconds per hour of looks
every 5 s in the agent's process (0.3 % of a core; there the journal is the kubelet's log file, read on from
an offset in-process, so journalctl's own cost on a systemd host is not in the figure).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from eventedpleg.core import guardincidents as gi
from eventedpleg.core.agentoptions import AgentOptions, AgentOptionsError
from eventedpleg.core.evidence import Evidence
from eventedpleg.core.node.blocks.agentsettings import AgentSettings
from eventedpleg.core.node.blocks.effects import (
    FindKubelet,
    FollowJournal,
    GuardCount,
    NodeEvent,
    Now,
    Phase,
    PublishIncidents,
    ReadApplied,
    Scrape,
    SetHealthCondition,
    Wait,
    act,
    ask,
    ask_maybe,
)
from eventedpleg.core.node.blocks.host import JournalChunk, KubeletProcess
from eventedpleg.core.node.blocks.hostfault import Faulted
from eventedpleg.core.node.blocks.judge import node_version
from eventedpleg.core.node.blocks.nodeapi import AgentNode
from eventedpleg.core.node.blocks.restart import KUBELET_UNIT, restart_services
from eventedpleg.core.node.facts import guardsigns
from eventedpleg.core.node.facts.guardsigns import Sign, Streak
from eventedpleg.core.node.facts.hostplan import ManagedState
from eventedpleg.core.node.facts.promtext import Metrics
from eventedpleg.core.node.facts.verify import Check, Outcome, VerifyResult
from eventedpleg.core.versions import Version
from eventedpleg.protocol import ANN_AGENT_OPTIONS, ANN_GUARD_INCIDENTS, format_time
from eventedpleg.reasons import EventReason

LOOKBACK = timedelta(seconds=60)  # the first look's reach (a wedge logs every 5 s while it lasts)
FRESH_SECONDS = 5.0  # the last-seen gauge this young: the PLEG's checks pass again
PROVE_TIMEOUT_SECONDS = 120.0  # from the restart to a verdict
EVENT_OF = {
    gi.Kind.WEDGE: EventReason.PLEG_WEDGED,
    gi.Kind.EVENTS_LOST: EventReason.EVENT_STREAM_LOST,
    gi.Kind.STATUS_LOST: EventReason.POD_STATUS_LOST,
}
WHAT = {
    gi.Kind.WEDGE: "the kubelet stopped syncing pods: its PLEG channel is full and the evented health check "
    "holds the sync loop (kubelet <= 1.36, docs/compatibility.md kubelet-pleg-wedge)",
    gi.Kind.EVENTS_LOST: "the kubelet keeps losing its CRI event stream without falling back to relisting",
    gi.Kind.STATUS_LOST: "the kubelet lost a running pod's status: its evented PLEG deleted the pod's cache "
    "entry when an old sandbox was removed, so the pod is shown waiting while its container runs "
    "(kubelet <= 1.36, docs/compatibility.md kubelet-136-missed-restarts)",
}
HEALTHY_MESSAGE = "the kubelet syncs pods with Evented PLEG on"


@dataclass(frozen=True)
class GuardMemory:
    """What the guard keeps between looks (the incidents themselves are on the Node)."""

    cursor: str = ""  # where the kubelet's journal was read up to
    watch: Streak = field(default_factory=Streak)
    incidents: tuple[gi.Incident, ...] | None = None  # read from the Node at the first incident
    open: gi.Kind | None = None  # an incident said and not over (guard off): said once, not every look
    said_healthy: bool = False  # the condition is True as far as this agent knows
    take_back: TakeBack | None = None  # the gate is to come off (the agent runs applyphase.take_back)


@dataclass(frozen=True)
class TakeBack:
    """What the rollback reports: why, and the incidents as evidence."""

    why: str
    evidence: Evidence


def guard(node: AgentNode, memory: GuardMemory, settings: AgentSettings, clock: Now) -> Phase[GuardMemory]:
    """One look at a Done node (the caller checks it is Done); a host fault ends the look quietly (the
    after-Done check says host faults) and the next one tries again."""
    try:
        return (yield from _look(node, memory, settings, clock))
    except Faulted:
        return memory


def _options(node: AgentNode) -> AgentOptions:
    try:
        return AgentOptions.from_json(node.annotations.get(ANN_AGENT_OPTIONS))
    except AgentOptionsError:
        return AgentOptions()


def _look(node: AgentNode, memory: GuardMemory, settings: AgentSettings, clock: Now) -> Phase[GuardMemory]:
    managed = yield from ask(ReadApplied(), ManagedState)
    proc = yield from ask_maybe(FindKubelet(), KubeletProcess)
    version = node_version(node)
    if not managed.enabled or proc is None or version is None:
        return memory
    now = clock()
    since = max(proc.started_at or now, now - LOOKBACK)
    chunk = yield from ask(FollowJournal(KUBELET_UNIT, memory.cursor, since, guardsigns.MATCH), JournalChunk)
    metrics = yield from ask_maybe(Scrape(guardsigns.METRICS), Metrics)
    drives = version.minor_pair < (1, 37)
    sign, watch = guardsigns.detect(chunk.lines, metrics, memory.watch, clock(), stream_drives=drives)
    memory = replace(memory, cursor=chunk.cursor, watch=watch)
    if sign is None:
        if not memory.said_healthy:
            yield from act(SetHealthCondition(True, gi.HealthReason.HEALTHY, HEALTHY_MESSAGE))
        return replace(memory, open=None, said_healthy=True)
    options = _options(node)
    if memory.open is sign.kind and not options.guard:
        return memory
    return (yield from _incident(node, sign, memory, options, (version, proc.pid), settings, clock))


def _incident(
    node: AgentNode,
    sign: Sign,
    memory: GuardMemory,
    options: AgentOptions,
    kubelet: tuple[Version, int],
    settings: AgentSettings,
    clock: Now,
) -> Phase[GuardMemory]:
    """Say it, count it, keep it; then heal, or ask for the rollback. `kubelet`: its version and pid."""
    past = memory.incidents
    if past is None:
        past = gi.parse(node.annotations.get(ANN_GUARD_INCIDENTS))
    new = gi.Incident(sign.at.replace(microsecond=0), sign.kind)  # as the annotation keeps it
    incidents = gi.within((*past, new), clock(), options.guard_window_seconds)
    yield from act(PublishIncidents(gi.to_json(incidents)))
    yield from act(GuardCount(incident=sign.kind.value))
    count = f"incident {len(incidents)} of {options.guard_incidents} in {options.guard_window_seconds}s"
    message = f"{WHAT[sign.kind]}: {sign.seen} ({count})"
    rollback = options.guard and len(incidents) >= options.guard_incidents
    then = "not restarting the kubelet: the guard is off"
    if options.guard:
        then = "taking the gate off this node" if rollback else "restarting the kubelet"
    yield from act(NodeEvent(EVENT_OF[sign.kind], f"{message}; {then}", warning=True))
    yield from act(SetHealthCondition(False, gi.CONDITION_REASON[sign.kind], message))
    memory = replace(memory, incidents=incidents, open=sign.kind, said_healthy=False)
    if not options.guard:
        return memory
    if rollback:
        return _take_back(incidents, message)
    result, memory = yield from _heal(kubelet, memory, settings, clock)
    took = (clock() - sign.at).total_seconds()
    if result.outcome is Outcome.PASS:
        reason = f"healed by a kubelet restart, {took:.0f}s from the first sign: {result.reason}"
        yield from act(NodeEvent(EventReason.PLEG_WEDGE_HEALED, reason))
        yield from act(SetHealthCondition(True, gi.HealthReason.HEALTHY, f"{HEALTHY_MESSAGE} ({reason})"))
        yield from act(GuardCount(heal_seconds=took))
        return replace(memory, open=None, said_healthy=True)
    reason = f"a kubelet restart did not heal it: {result.reason}"
    yield from act(NodeEvent(EventReason.PLEG_WEDGE_NOT_HEALED, reason, warning=True))
    return replace(memory, open=None)  # the next look that sees it is the next incident


def _take_back(incidents: tuple[gi.Incident, ...], message: str) -> GuardMemory:
    """Ask for the rollback: the agent runs it through the apply's own steps (applyphase.take_back), then
    taken_back."""
    lines = tuple(f"{format_time(i.at)} {i.kind.value}" for i in incidents)
    why = f"the guard took EventedPLEG off: {len(incidents)} incidents in the window ({message})"
    return GuardMemory(incidents=incidents, take_back=TakeBack(why, Evidence(reason=message, lines=lines)))


def taken_back(memory: GuardMemory, done: bool) -> Phase[GuardMemory]:
    """After applyphase.take_back: counted and the condition says so when it ended RolledBack (else the
    Failed report and its Event say why)."""
    asked = memory.take_back
    if done and asked is not None:
        yield from act(GuardCount(rolled_back=True))
        yield from act(SetHealthCondition(False, gi.HealthReason.ROLLED_BACK, asked.why))
    return replace(memory, take_back=None)


def _heal(
    kubelet: tuple[Version, int], memory: GuardMemory, settings: AgentSettings, clock: Now
) -> Phase[tuple[VerifyResult, GuardMemory]]:
    """Restart the kubelet alone, then prove it syncs pods (prove)."""
    version, pid = kubelet
    # Read the old kubelet's lines up to now, so that the proof reads only what came after.
    before = yield from ask(
        FollowJournal(KUBELET_UNIT, memory.cursor, clock(), guardsigns.MATCH), JournalChunk
    )
    restarted = yield from restart_services(
        restart_runtime=False, runtime_unit="", version=version, clock=clock
    )
    if restarted.failure is not None:
        return restarted.failure, replace(memory, cursor=before.cursor)
    result, cursor = yield from prove(version, restarted.at, before.cursor, settings, clock, old_pid=pid)
    return result, replace(memory, cursor=cursor, watch=Streak())


def prove(
    version: Version, since: datetime, cursor: str, settings: AgentSettings, clock: Now, *, old_pid: int
) -> Phase[tuple[VerifyResult, str]]:
    """Poll until the restarted kubelet has synced for min_window_seconds: no wedge line of its own, the
    last-seen gauge fresh, discards not rising, no pod's first sandbox refused (a wedge line fails at once);
    or PROVE_TIMEOUT_SECONDS pass.
    The verdict (verification's evidence style) and the journal cursor after it. The wedged kubelet
    (`old_pid`) logs on until it is stopped, which may take a while after `since`: its lines never count."""
    synced: datetime | None = None  # since when every check held
    first_discards: float | None = None
    checks: tuple[Check, ...] = ()
    while True:
        yield from act(Wait(settings.poll_seconds))
        now = clock()
        chunk = yield from ask(FollowJournal(KUBELET_UNIT, cursor, since, guardsigns.MATCH), JournalChunk)
        cursor = chunk.cursor
        own = [
            ln
            for ln in chunk.lines
            if guardsigns.line_pid(ln) != old_pid and (guardsigns.line_time(ln, now) or now) >= since
        ]
        wedged = list(guardsigns.wedge_lines(tuple(own)))
        refused = [ln for ln in own if guardsigns.refused_first(ln) is not None]
        metrics = yield from ask_maybe(Scrape(guardsigns.METRICS), Metrics)
        checks = (*_checks(metrics, wedged, now, first_discards), _sandboxes(refused))
        if metrics is not None and first_discards is None:
            first_discards = metrics.value(guardsigns.DISCARDS) or 0.0
        window = (now - since).total_seconds()
        if wedged:
            why = f"the restarted kubelet wedged again: {wedged[0].strip()}"
            return VerifyResult(Outcome.FAIL, why, checks, (wedged[0].strip(),), str(version), window), cursor
        if all(ch.ok for ch in checks):
            synced = synced or now
            if (now - synced).total_seconds() >= settings.min_window_seconds:
                why = f"syncing pods again, held {settings.min_window_seconds:.0f}s"
                return VerifyResult(Outcome.PASS, why, checks, (), str(version), window), cursor
        else:
            synced = None
        if window >= PROVE_TIMEOUT_SECONDS:
            failing = "; ".join(ch.observed for ch in checks if not ch.ok)
            why = f"not syncing {window:.0f}s after the restart: {failing}"
            return VerifyResult(Outcome.FAIL, why, checks, (), str(version), window), cursor


def _sandboxes(refused: list[str]) -> Check:
    """The restarted kubelet reads every pod's sandboxes from its first relist: no first sandbox asked for
    again (a refusal resets the window; refusals until PROVE_TIMEOUT_SECONDS fail the proof)."""
    if not refused:
        return Check("sandboxes", True, "no pod's first sandbox refused since the restart")
    return Check("sandboxes", False, f"a pod's first sandbox refused again: {refused[-1].strip()}")


def _checks(
    metrics: Metrics | None, wedged: list[str], now: datetime, first_discards: float | None
) -> tuple[Check, ...]:
    wedge = Check("wedge", not wedged, "a wedge line since the restart" if wedged else "no wedge line")
    if metrics is None:
        return (wedge, Check("metrics", None, "the kubelet does not answer /metrics yet"))
    last_seen = metrics.value(guardsigns.LAST_SEEN)
    age = None if last_seen is None else now.timestamp() - last_seen
    fresh = Check(
        "lastSeen",
        age is not None and age <= FRESH_SECONDS,
        f"{guardsigns.LAST_SEEN} absent" if age is None else f"{guardsigns.LAST_SEEN} {age:.1f}s old",
    )
    discards = metrics.value(guardsigns.DISCARDS) or 0.0
    rising = first_discards is not None and discards > first_discards
    held = Check(
        "discards", not rising, f"{guardsigns.DISCARDS} {discards:g}" + (" (rising)" if rising else "")
    )
    return (wedge, fresh, held)
