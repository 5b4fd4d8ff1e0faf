"""core.node.phases.guardphase: incidents, the heal and its proof, the rollback threshold and window, and the
guard off -- the kubelet's answers scripted, the time injected (tests.agent.scripted)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from eventedpleg import protocol
from eventedpleg.core import guardincidents as gi
from eventedpleg.core.agentoptions import AgentOptions
from eventedpleg.core.node.blocks.agentsettings import AgentSettings
from eventedpleg.core.node.blocks.effects import (
    Effect,
    EffectAnswer,
    FindKubelet,
    FollowJournal,
    GuardCount,
    NodeEvent,
    PublishIncidents,
    ReadApplied,
    Restart,
    Scrape,
    SetHealthCondition,
)
from eventedpleg.core.node.blocks.host import CommandResult, JournalChunk, KubeletProcess
from eventedpleg.core.node.blocks.nodeapi import AgentNode
from eventedpleg.core.node.facts import guardsigns
from eventedpleg.core.node.facts.hostplan import ManagedState
from eventedpleg.core.node.facts.promtext import Metrics, parse_metrics
from eventedpleg.core.node.phases import guardphase
from eventedpleg.core.node.phases.guardphase import GuardMemory
from eventedpleg.reasons import EventReason
from tests.agent.scripted import ScriptedHost
from tests.unit.core.node.facts.test_guardsigns import LINES, LOST

T0 = datetime(2026, 11, 28, 13, 15, 56, tzinfo=UTC)  # two seconds after the fixture's first wedge line
SETTINGS = AgentSettings(namespace="ns", poll_seconds=2.0, min_window_seconds=10.0)
WEDGE = tuple(ln for ln in LINES if guardsigns.WEDGE_MATCH in ln)


def node(options: AgentOptions | None = None, incidents: str = "") -> AgentNode:
    annotations = {protocol.ANN_STATE: "Done", protocol.ANN_DESIRED: "h1", protocol.ANN_CURRENT: "h1"}
    if options is not None:
        annotations[protocol.ANN_AGENT_OPTIONS] = options.to_json()
    if incidents:
        annotations[protocol.ANN_GUARD_INCIDENTS] = incidents
    return AgentNode(
        "n1", annotations=annotations, kubelet_version="v1.36.4", runtime_version="containerd://2.2.9"
    )


def metrics(host: ScriptedHost, *, discards: float, age: float) -> Metrics:
    now = host.now.timestamp()
    return parse_metrics(
        f"{guardsigns.DISCARDS} {discards}\n{guardsigns.LAST_SEEN} {now - age}\n"
        "kubelet_evented_pleg_connection_error_count 0\n"
    )


class Kubelet:
    """The scripted kubelet: journal chunks in turn (then nothing new), and its gauge's age at each scrape
    (wedged: stale; after a restart: fresh unless told to wedge again)."""

    def __init__(
        self, chunks: list[tuple[str, ...]], *, rewedge: bool = False, lingers: bool = False
    ) -> None:
        self.chunks: Iterator[tuple[str, ...]] = iter(chunks)
        self.restarts = 0
        self.rewedge = rewedge
        self.lingers = lingers  # the wedged kubelet (pid 7355, the fixture's) logs on after the restart began
        self.host: ScriptedHost | None = None

    def answer(self, effect: Effect) -> EffectAnswer:
        host = self.host
        assert host is not None
        match effect:
            case ReadApplied():
                return ManagedState(hash="h1", enabled=True)
            case FindKubelet():
                return KubeletProcess(7355 + self.restarts, ("kubelet",), started_at=T0 - timedelta(hours=1))
            case FollowJournal(cursor=cursor):
                lines = next(self.chunks, ())
                now = host.now.strftime("E%m%d %H:%M:%S.000000")
                if self.restarts and self.rewedge:  # the new kubelet's own line
                    lines = (now + " 7356 " + WEDGE[0].split(" ", 3)[3],)
                elif self.restarts and self.lingers:
                    lines = (now + " " + WEDGE[0].split(" ", 2)[2],)
                return JournalChunk(lines, f"{cursor}+")
            case Scrape():
                wedged = not self.restarts or self.rewedge
                return metrics(host, discards=110 if wedged else 0, age=40 if wedged else 0.5)
            case Restart():
                self.restarts += 1
                return CommandResult(("systemctl", "restart", effect.unit), 0)
            case PublishIncidents():
                return True
        return None


def play(
    kubelet: Kubelet, the_node: AgentNode, memory: GuardMemory | None = None, start: datetime = T0
) -> tuple[GuardMemory, ScriptedHost]:
    host = ScriptedHost(kubelet.answer, start)
    kubelet.host = host
    result = host.play(guardphase.guard(the_node, memory or GuardMemory(), SETTINGS, host.clock))
    assert isinstance(result, GuardMemory)
    return result, host


E = TypeVar("E")


def of(host: ScriptedHost, kind: type[E]) -> list[E]:
    return [e for e in host.effects if isinstance(e, kind)]


def events(host: ScriptedHost) -> list[EventReason]:
    return [e.reason for e in host.effects if isinstance(e, NodeEvent)]


def test_a_healthy_node_says_so_once() -> None:
    kubelet = Kubelet([()])
    kubelet.restarts = 1  # a fresh gauge, nothing discarded
    memory, host = play(kubelet, node())
    assert of(host, SetHealthCondition) == [
        SetHealthCondition(True, gi.HealthReason.HEALTHY, guardphase.HEALTHY_MESSAGE)
    ]
    memory, host = play(kubelet, node(), memory)
    assert of(host, SetHealthCondition) == []
    assert of(host, Restart) == []


def test_a_wedge_is_healed_by_a_kubelet_restart_and_proven() -> None:
    kubelet = Kubelet([WEDGE])
    memory, host = play(kubelet, node())
    assert events(host) == [EventReason.PLEG_WEDGED, EventReason.PLEG_WEDGE_HEALED]
    assert [e.unit for e in of(host, Restart)] == ["kubelet"]  # the kubelet alone
    conditions = of(host, SetHealthCondition)
    assert [(x.healthy, x.reason) for x in conditions] == [
        (False, gi.HealthReason.WEDGED),
        (True, gi.HealthReason.HEALTHY),
    ]
    (published,) = of(host, PublishIncidents)
    incidents = gi.parse(published.text)
    assert [(i.kind, i.at) for i in incidents] == [
        (gi.Kind.WEDGE, T0.replace(microsecond=0) - timedelta(seconds=2))
    ]
    counts = of(host, GuardCount)
    assert counts[0] == GuardCount(incident="wedge")
    heal = counts[-1].heal_seconds
    assert heal is not None
    # From the first line to a proof held for the window: the restart pause, the polls, the window.
    assert heal == (host.now - datetime(2026, 11, 28, 13, 15, 54, 855580, tzinfo=UTC)).total_seconds()
    assert heal < 30
    assert memory.said_healthy
    assert memory.incidents == incidents


def test_a_kubelet_that_wedges_again_after_the_restart_is_not_healed() -> None:
    kubelet = Kubelet([WEDGE], rewedge=True)
    memory, host = play(kubelet, node())
    assert events(host) == [EventReason.PLEG_WEDGED, EventReason.PLEG_WEDGE_NOT_HEALED]
    not_healed = of(host, NodeEvent)[-1]
    assert "wedged again" in not_healed.message
    assert not memory.said_healthy
    assert memory.open is None  # the next look that sees it is the next incident


def test_the_wedged_kubelets_own_lines_after_the_restart_began_do_not_fail_the_proof() -> None:
    memory, host = play(Kubelet([WEDGE], lingers=True), node())
    assert events(host) == [EventReason.PLEG_WEDGED, EventReason.PLEG_WEDGE_HEALED]
    assert memory.said_healthy


def test_the_second_incident_in_the_window_asks_for_the_rollback() -> None:
    first = gi.to_json((gi.Incident(T0 - timedelta(minutes=3), gi.Kind.WEDGE),))
    kubelet = Kubelet([WEDGE])
    memory, host = play(kubelet, node(incidents=first))
    assert of(host, Restart) == []
    assert events(host) == [EventReason.PLEG_WEDGED]
    assert "taking the gate off" in of(host, NodeEvent)[0].message
    assert memory.take_back is not None
    assert memory.take_back.evidence.lines is not None and len(memory.take_back.evidence.lines) == 2
    done = ScriptedHost(kubelet.answer, T0)
    ended = done.play(guardphase.taken_back(memory, True))
    assert isinstance(ended, GuardMemory) and ended.take_back is None
    assert of(done, GuardCount) == [GuardCount(rolled_back=True)]
    assert [(x.healthy, x.reason) for x in of(done, SetHealthCondition)] == [
        (False, gi.HealthReason.ROLLED_BACK)
    ]


def test_an_incident_outside_the_window_does_not_count() -> None:
    old = gi.to_json((gi.Incident(T0 - timedelta(hours=25), gi.Kind.WEDGE),))
    memory, host = play(Kubelet([WEDGE]), node(incidents=old))
    assert memory.take_back is None
    assert len(of(host, Restart)) == 1
    assert len(gi.parse(of(host, PublishIncidents)[0].text)) == 1  # the old one is dropped


def test_the_threshold_follows_the_options() -> None:
    one = AgentOptions(guard_incidents=1)
    memory, host = play(Kubelet([WEDGE]), node(one))
    assert memory.take_back is not None
    assert of(host, Restart) == []
    three = AgentOptions(guard_incidents=3)
    two = gi.to_json(tuple(gi.Incident(T0 - timedelta(minutes=m), gi.Kind.WEDGE) for m in (5, 9)))
    memory, _ = play(Kubelet([WEDGE]), node(three, two))
    assert memory.take_back is not None
    memory, _ = play(Kubelet([WEDGE]), node(three, two), start=T0 + timedelta(days=1))
    assert memory.take_back is None


def test_with_the_guard_off_it_only_detects_and_says_so_once() -> None:
    off = AgentOptions(guard=False)
    kubelet = Kubelet([WEDGE, WEDGE])
    memory, host = play(kubelet, node(off))
    assert of(host, Restart) == []
    assert events(host) == [EventReason.PLEG_WEDGED]
    assert "the guard is off" in of(host, NodeEvent)[0].message
    assert [(x.healthy, x.reason) for x in of(host, SetHealthCondition)] == [(False, gi.HealthReason.WEDGED)]
    assert of(host, GuardCount) == [GuardCount(incident="wedge")]
    memory, host = play(kubelet, node(off), memory)
    assert of(host, NodeEvent) == []
    assert of(host, Restart) == []
    assert memory.take_back is None


def test_incidents_annotation_round_trips_and_ignores_what_it_cannot_read() -> None:
    kept = (gi.Incident(T0, gi.Kind.WEDGE), gi.Incident(T0 + timedelta(hours=1), gi.Kind.EVENTS_LOST))
    assert gi.parse(gi.to_json(kept)) == kept
    assert gi.parse("not json") == ()
    assert (
        gi.parse('[{"at": "x", "kind": "wedge"}, {"at": "2026-11-28T00:00:00+00:00", "kind": "?"}, 3]') == ()
    )
    assert gi.parse(None) == ()


def test_nothing_is_looked_at_on_a_node_with_the_gate_off() -> None:
    def answer(effect: Effect) -> EffectAnswer:
        return ManagedState(hash="off", enabled=False) if isinstance(effect, ReadApplied) else None

    host = ScriptedHost(answer, T0)
    host.play(guardphase.guard(node(), GuardMemory(), SETTINGS, host.clock))
    assert [type(e) for e in host.effects] == [ReadApplied, FindKubelet]


REFUSALS = tuple(ln for ln in LOST if guardsigns.refused_first(ln) is not None)[:2]  # 16:00:02, 16:00:17
AFTER_SECOND = datetime(2026, 11, 28, 16, 0, 19, tzinfo=UTC)


class LosingKubelet(Kubelet):
    """A kubelet that lost a pod's status: healthy metrics, two refusals of its first sandbox; after the
    restart, with `refuses_again`, the new kubelet (its own pid) refuses it at every look."""

    def __init__(self, *, refuses_again: bool = False) -> None:
        super().__init__([REFUSALS])
        self.restarts = 0
        self.refuses_again = refuses_again

    def answer(self, effect: Effect) -> EffectAnswer:
        host = self.host
        assert host is not None
        match effect:
            case FollowJournal(cursor=cursor) if self.restarts and self.refuses_again:
                now = host.now.strftime("E%m%d %H:%M:%S.000000")
                return JournalChunk((f"{now} 7356 " + REFUSALS[0].split(" ", 3)[3],), f"{cursor}+")
            case Scrape():
                return metrics(host, discards=0, age=0.5)
        return super().answer(effect)


def test_a_lost_pod_status_is_healed_by_a_kubelet_restart_and_proven() -> None:
    memory, host = play(LosingKubelet(), node(), start=AFTER_SECOND)
    assert events(host) == [EventReason.POD_STATUS_LOST, EventReason.PLEG_WEDGE_HEALED]
    first = of(host, NodeEvent)[0]
    assert first.warning and "default/idle-000-realnode" in first.message
    assert [e.unit for e in of(host, Restart)] == ["kubelet"]
    assert [(x.healthy, x.reason) for x in of(host, SetHealthCondition)] == [
        (False, gi.HealthReason.STATUS_LOST),
        (True, gi.HealthReason.HEALTHY),
    ]
    (published,) = of(host, PublishIncidents)
    assert [i.kind for i in gi.parse(published.text)] == [gi.Kind.STATUS_LOST]
    assert of(host, GuardCount)[0] == GuardCount(incident="podStatusLost")
    assert memory.said_healthy


def test_a_restarted_kubelet_that_keeps_refusing_the_first_sandbox_is_not_healed() -> None:
    memory, host = play(LosingKubelet(refuses_again=True), node(), start=AFTER_SECOND)
    assert events(host) == [EventReason.POD_STATUS_LOST, EventReason.PLEG_WEDGE_NOT_HEALED]
    not_healed = of(host, NodeEvent)[-1].message
    assert "a pod's first sandbox refused again" in not_healed, not_healed
    assert not memory.said_healthy
