"""core.node.blocks.eventconsumers: a second consumer of containerd 1.7's event stream, found in goroutine
dumps.

The dump fixture is real: containerd v1.7.35 on the lab's kubeadm node after SIGUSR1, with two `crictl events`
running and a third that had already exited (goroutine 373, "chan receive, 3 minutes": a gone client's stream
waits for an event to fail on).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from eventedpleg import protocol
from eventedpleg.core.node.blocks import eventconsumers
from eventedpleg.core.node.blocks.agentsettings import AgentSettings
from eventedpleg.core.node.blocks.effects import (
    Effect,
    EffectAnswer,
    FindKubelet,
    NodeEvent,
    ReadApplied,
    ReadJournal,
    Report,
    Run,
    Scrape,
    Wait,
)
from eventedpleg.core.node.blocks.host import CommandResult, KubeletProcess
from eventedpleg.core.node.blocks.nodeapi import AgentNode
from eventedpleg.core.node.facts.hostplan import ManagedState
from eventedpleg.core.node.facts.promtext import parse_metrics
from eventedpleg.core.node.facts.verify import CONN_LATENCY_COUNT
from eventedpleg.core.node.phases import donephase
from eventedpleg.core.versions import parse_runtime, parse_version
from eventedpleg.protocol import NodeState
from tests.agent.scripted import ScriptedHost

DUMP = (
    Path(__file__).parent.parent / "realnode" / "fixtures" / "containerd-1.7.35-goroutines.txt"
).read_text()
T0 = datetime(2026, 11, 26, 9, 0, tzinfo=UTC)
SETTINGS = AgentSettings(namespace="ns", poll_seconds=2.0, event_consumer_wait_seconds=30.0)
PID = "61"
WRITTEN = (
    'time="2026-11-26T09:00:00Z" level=info '
    'msg="goroutine stack dump written to /tmp/containerd.61.stacks.log"'
)


def _dump_of(ids: tuple[int, ...]) -> str:
    """The fixture's goroutines, with its three subscriber goroutines renumbered to `ids` (or dropped)."""
    blocks = DUMP.split("\n\n")
    subs = [b for b in blocks if eventconsumers.SUBSCRIBER_FRAME in b]
    rest = [b for b in blocks if eventconsumers.SUBSCRIBER_FRAME not in b]
    renamed = [
        subs[i % len(subs)].replace(subs[i % len(subs)].split(" [", 1)[0], f"goroutine {g}", 1)
        for i, g in enumerate(ids)
    ]
    return "\n\n".join([*rest, *renamed])


def test_the_real_dump_shows_three_streams_and_the_rest_of_containerd_is_not_counted() -> None:
    assert eventconsumers.subscribers(DUMP) == {373, 1071, 1072}
    assert DUMP.count("\ngoroutine ") + DUMP.startswith("goroutine ") == 37
    assert eventconsumers.subscribers("goroutine 1 [running]:\nmain.main()\n") == frozenset()


class Containerd(ScriptedHost):
    """A host whose containerd dumps `dumps` in turn and whose kubelet counts `events` in turn."""

    def __init__(self, dumps: list[tuple[int, ...]], events: list[int]) -> None:
        super().__init__(self.containerd, T0)
        self.dumps, self.events = list(dumps), list(events)
        self.signalled = 0

    def containerd(self, effect: Effect) -> EffectAnswer:
        match effect:
            case Run(("systemctl", "show", "--property=MainPID", "--value", "containerd")):
                return CommandResult(effect.argv, 0, f"{PID}\n")
            case Run(("kill", "-USR1", "61")):
                self.signalled += 1
                return CommandResult(effect.argv, 0)
            case ReadJournal("containerd"):
                return (WRITTEN,)
            case Run(("cat", "/proc/61/root/tmp/containerd.61.stacks.log")):
                return CommandResult(effect.argv, 0, _dump_of(self.dumps.pop(0)))
            case Scrape():
                value = self.events.pop(0) if len(self.events) > 1 else self.events[0]
                return parse_metrics(f"{CONN_LATENCY_COUNT} {value}\n")
        raise AssertionError(effect)


def _check(host: Containerd) -> object:
    return host.play(eventconsumers.check(SETTINGS, host.clock))


def test_the_kubelet_alone_needs_one_dump_and_no_wait() -> None:
    host = Containerd([(40,)], [100])
    assert _check(host) is None
    assert host.signalled == 1
    assert not any(isinstance(e, Wait) and e.seconds >= SETTINGS.poll_seconds for e in host.effects)


def test_a_live_second_consumer_keeps_its_stream_while_the_kubelet_gets_events() -> None:
    host = Containerd([(40, 77), (40, 77)], [100, 101, 103])
    found = _check(host)
    assert found == eventconsumers.Finding(streams=2, kubelet_events=3)
    assert host.signalled == 2
    assert str(found).startswith("containerd had 2 open container-event streams in two goroutine dumps")


def test_a_gone_clients_stream_ends_once_handed_an_event_so_it_is_not_a_finding() -> None:
    # goroutine 373 waits with no client (the fixture's); two events later it has failed its send and ended.
    host = Containerd([(40, 373), (40,)], [100, 103])
    assert _check(host) is None


def test_a_new_stream_in_the_second_dump_alone_is_not_judged() -> None:
    # A consumer that connected after the first dump may be gone before its first event: next look.
    host = Containerd([(40, 373), (40, 90)], [100, 103])
    assert _check(host) is None


def test_no_verdict_without_events_to_judge_by() -> None:
    host = Containerd([(40, 77)], [100])
    assert _check(host) is None
    assert host.signalled == 1  # no second dump
    waited = sum(
        e.seconds for e in host.effects if isinstance(e, Wait) and e.seconds == SETTINGS.poll_seconds
    )
    assert waited == SETTINGS.event_consumer_wait_seconds


def test_two_kubelet_events_are_not_enough_one_may_have_been_counted_late() -> None:
    host = Containerd([(40, 77)], [100, 102])
    assert _check(host) is None
    assert host.signalled == 1


def test_no_verdict_when_the_kubelet_restarted_between_the_dumps() -> None:
    host = Containerd([(40, 77)], [100, 3])
    assert _check(host) is None


@pytest.mark.parametrize(
    "answer",
    [
        CommandResult(("systemctl",), 0, "0\n"),  # containerd.service not running
        CommandResult(("systemctl",), 1, "", "Unit containerd.service not found"),
    ],
)
def test_no_verdict_without_a_containerd_service(answer: CommandResult) -> None:
    phase = eventconsumers.check(SETTINGS, lambda: T0)
    assert isinstance(next(phase), Run)
    with pytest.raises(StopIteration) as stop:
        phase.send(answer)
    assert stop.value.value is None


def test_no_verdict_when_containerd_never_says_where_it_wrote_the_dump() -> None:
    host = Containerd([(40, 77)], [100])
    host.answer = _without_journal(host.containerd)
    assert _check(host) is None
    assert not any(isinstance(e, Run) and e.argv[0] == "cat" for e in host.effects)
    assert sum(e.seconds for e in host.effects if isinstance(e, Wait)) == eventconsumers.DUMP_WAIT_SECONDS


def _without_journal(answer: Callable[[Effect], EffectAnswer]) -> Callable[[Effect], EffectAnswer]:
    return lambda effect: () if isinstance(effect, ReadJournal) else answer(effect)


@pytest.mark.parametrize(
    ("kubelet", "runtime", "checked"),
    [
        ("v1.36.4", "containerd://1.7.35", True),
        ("v1.34.2", "containerd://1.7.13", True),
        ("v1.37.2", "containerd://1.7.35", False),  # 1.37 relists every 1 s: a missed event is not late
        ("v1.36.4", "containerd://2.2.0", False),  # broadcasts (containerd#9661)
        ("v1.36.4", "containerd://1.6.30", False),  # no event stream: the kubelet falls back at its start
        ("v1.36.4", "cri-o://1.27.1", False),  # the same flaw (cri-o#6838), never dumped on a real node
        ("v1.36.4", "cri-o://1.30.4", False),
    ],
)
def test_where_the_check_runs(kubelet: str, runtime: str, checked: bool) -> None:
    assert eventconsumers.applies(parse_version(kubelet), parse_runtime(runtime)) is checked


def test_due_at_the_first_check_after_done_then_at_its_interval_and_never_at_zero() -> None:
    settings = replace(SETTINGS, event_consumer_check_seconds=3600)
    assert eventconsumers.due(None, settings, T0)
    assert not eventconsumers.due(T0, settings, T0 + timedelta(minutes=59))
    assert eventconsumers.due(T0, settings, T0 + timedelta(hours=1))
    assert not eventconsumers.due(None, replace(settings, event_consumer_check_seconds=0), T0)


def _done_node(runtime: str = "containerd://1.7.35") -> AgentNode:
    annotations = {
        protocol.ANN_DESIRED: "h1",
        protocol.ANN_CURRENT: "h1",
        protocol.ANN_STATE: NodeState.DONE.value,
    }
    return AgentNode("node-a", annotations=annotations, kubelet_version="v1.36.4", runtime_version=runtime)


class DoneHost(Containerd):
    """A healthy Done node (nothing drifted, no fallback) on containerd 1.7."""

    def __init__(self, dumps: list[tuple[int, ...]], events: list[int]) -> None:
        super().__init__(dumps, events)
        self.answer = self.done_node

    def done_node(self, effect: Effect) -> EffectAnswer:
        match effect:
            case ReadApplied():
                return ManagedState(hash="h1", enabled=True)
            case FindKubelet():
                return KubeletProcess(1, ("kubelet",), started_at=T0 - timedelta(minutes=5))
            case Scrape(None):
                return parse_metrics('kubernetes_feature_enabled{name="EventedPLEG",stage="ALPHA"} 1\n')
            case ReadJournal("kubelet"):
                return ()
        return self.containerd(effect)


def test_after_done_a_second_consumer_fails_the_node_with_what_to_do_and_a_warning_on_the_node() -> None:
    host = DoneHost([(40, 77), (40, 77)], [100, 103])
    memory = host.play(donephase.after_done(_done_node(), donephase.DoneMemory(), SETTINGS, host.clock))
    assert memory == donephase.DoneMemory(consumers_checked=T0)
    reports = [e for e in host.effects if isinstance(e, Report)]
    events = [e for e in host.effects if isinstance(e, NodeEvent)]
    assert [r.state for r in reports] == [NodeState.FAILED]
    assert reports[0].reason.startswith("the kubelet misses container events: containerd had 2 open ")
    assert "Stop that consumer or upgrade containerd to 2.0.9+, then `eventedpleg retry`" in reports[0].reason
    assert not reports[0].forget_current  # our files are still on and verified
    assert [(e.reason, e.warning) for e in events] == [("EventsMissed", True)]


def test_after_done_the_look_waits_for_its_interval_and_other_runtimes_are_not_looked_at() -> None:
    host = DoneHost([(40, 77), (40, 77)], [100, 103])
    recent = donephase.DoneMemory(consumers_checked=T0 - timedelta(minutes=10))
    assert host.play(donephase.after_done(_done_node(), recent, SETTINGS, host.clock)) == recent
    assert host.signalled == 0
    host = DoneHost([(40, 77), (40, 77)], [100, 103])
    memory = donephase.DoneMemory()
    node = _done_node("containerd://2.2.0")
    assert host.play(donephase.after_done(node, memory, SETTINGS, host.clock)) == memory
    assert host.signalled == 0
