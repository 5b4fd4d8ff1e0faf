"""Another consumer of containerd 1.7's container-event stream, which starves the kubelet. Pure: it yields
effects (core.node.blocks.effects).

containerd 1.7 hands each container event to ONE open `GetContainerEvents` stream: every stream's server
goroutine ranges over the same channel (pkg/cri/server/container_events.go, "TODO containerd#7318: replace
with a real implementation that broadcasts"). With a second consumer (`crictl events`, a monitoring agent) the
kubelet gets only its share and, on kubelet <= 1.36, sees the rest at the next relist, up to 300 s later.
Nothing in the kubelet's metrics or log says so. The kubelet's count of running containers drifts
from `crictl ps` in normal operation too, so comparing them raised false alarms. So the agent looks
at containerd itself.

How: SIGUSR1 makes containerd write every goroutine's stack to `<TMPDIR>/containerd.<pid>.stacks.log`, and
log the path (cmd/containerd/command/main_unix.go and main.go, `dumpStacks`). Each open stream is one
goroutine in `(*criService).GetContainerEvents`. One such goroutine is the kubelet's; a second may be a live
consumer, or a stream whose client has gone. A gone client's goroutine only ends once it is handed an event
it cannot send, so one dump cannot tell the two apart. Go hands a channel value to the receiver that has
waited longest (runtime/chan.go: `recvq` is FIFO). So once the kubelet has received two more events, every
goroutine that was already waiting at the first dump has been handed one. A gone client's goroutine then
ends. So goroutines found in both dumps, when there are two or more of them, mean a live second consumer.

The dump goes to containerd's own log too, so the check runs only on the runtimes that need it, at most
every `event_consumer_check_seconds`, and takes the second dump only when the first shows two streams.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from eventedpleg.core import compat, runtimes
from eventedpleg.core.node.blocks.agentsettings import AgentSettings
from eventedpleg.core.node.blocks.effects import (
    Now,
    Phase,
    ReadJournal,
    Run,
    Scrape,
    Wait,
    act,
    ask,
    ask_maybe,
)
from eventedpleg.core.node.blocks.host import CommandResult
from eventedpleg.core.node.facts.promtext import Metrics
from eventedpleg.core.node.facts.verify import CONN_LATENCY_COUNT
from eventedpleg.core.versions import RuntimeVersion, Version

UNIT = runtimes.CONTAINERD.unit  # the dump below is containerd's (the only profile that counts_subscribers)
SUBSCRIBER_FRAME = ".(*criService).GetContainerEvents("  # pkg/cri/server and pkg/cri/sbserver alike
_GOROUTINE = re.compile(r"^goroutine (\d+) \[", re.MULTILINE)
_WRITTEN = re.compile(r"goroutine stack dump written to (\S+?)\"?$")
DUMP_WAIT_SECONDS = 10.0  # for containerd to log where it wrote the dump
# Kubelet events between the dumps: two hand every goroutine waiting at the first dump one (the module's
# docstring); one more for an event the kubelet got just before the first dump and counted after it.
EVENTS_NEEDED = 3
SETTLE_SECONDS = 2.0  # after them, for a gone client's goroutine to fail its send and end


def applies(kubelet: Version, runtime: RuntimeVersion | None) -> bool:
    """A kubelet that misses events sees them only at the 300 s relist up to 1.36 (1.37 relists every 1 s:
    docs/compatibility.md §1), and containerd's row says one consumer gets each event. CRI-O 1.26-1.27
    has the same flaw (cri-o#6838), but its dump (SIGUSR1 too) was never taken on a real node here: not
    checked."""
    profile = runtimes.profile_of(runtime)
    return (
        kubelet.minor_pair < (1, 37)
        and profile is not None
        and profile.counts_subscribers
        and compat.one_event_consumer(runtime)
    )


def due(last: datetime | None, settings: AgentSettings, now: datetime) -> bool:
    if settings.event_consumer_check_seconds <= 0:
        return False
    return last is None or (now - last).total_seconds() >= settings.event_consumer_check_seconds


def subscribers(dump: str) -> frozenset[int]:
    """The goroutine ids, in a containerd stack dump, of the open GetContainerEvents streams."""
    starts = list(_GOROUTINE.finditer(dump))
    found = set()
    for i, start in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(dump)
        if SUBSCRIBER_FRAME in dump[start.start() : end]:
            found.add(int(start.group(1)))
    return frozenset(found)


@dataclass(frozen=True)
class Finding:
    """A live consumer besides the kubelet: the streams found in both dumps, and the kubelet's events in
    between."""

    streams: int
    kubelet_events: int

    def __str__(self) -> str:
        return (
            f"containerd had {self.streams} open container-event streams in two goroutine dumps, and kept "
            f"them while the kubelet received {self.kubelet_events} events; the kubelet holds one"
        )


def _dump(pid: str, clock: Now) -> Phase[frozenset[int] | None]:
    """SIGUSR1 to containerd; the subscriber goroutines of the dump it writes, or None."""
    at = clock() - timedelta(seconds=1)  # journalctl --since has one-second resolution
    signal = yield from ask(Run(("kill", "-USR1", pid)), CommandResult)
    if not signal.ok:
        return None
    waited = 0.0
    while waited < DUMP_WAIT_SECONDS:
        yield from act(Wait(0.5))
        waited += 0.5
        lines = yield from ask(ReadJournal(UNIT, at), tuple)
        paths = [m.group(1) for line in lines if (m := _WRITTEN.search(str(line)))]
        if paths:
            # Read through containerd's own root: its /tmp may be private (PrivateTmp=).
            dump = yield from ask(Run(("cat", f"/proc/{pid}/root{paths[-1]}")), CommandResult)
            return subscribers(dump.stdout) if dump.ok else None
    return None


def _kubelet_events() -> Phase[int | None]:
    metrics = yield from ask_maybe(Scrape(frozenset({CONN_LATENCY_COUNT})), Metrics)
    value = None if metrics is None else metrics.value(CONN_LATENCY_COUNT)
    return None if value is None else int(value)


def check(settings: AgentSettings, clock: Now) -> Phase[Finding | None]:
    """A live second consumer of containerd's event stream, or None (none, or no verdict: containerd not
    found, no dump, or too few events in `settings.event_consumer_wait_seconds` to judge by)."""
    shown = yield from ask(Run(("systemctl", "show", "--property=MainPID", "--value", UNIT)), CommandResult)
    pid = shown.stdout.strip()
    if not shown.ok or not pid.isdigit() or pid == "0":
        return None
    first = yield from _dump(pid, clock)
    start = yield from _kubelet_events()
    if first is None or len(first) < 2 or start is None:
        return None
    waited, events = 0.0, 0
    while events < EVENTS_NEEDED:
        if waited >= settings.event_consumer_wait_seconds:
            return None
        yield from act(Wait(settings.poll_seconds))
        waited += settings.poll_seconds
        now = yield from _kubelet_events()
        if now is None or now < start:  # the kubelet restarted: its counter began again
            return None
        events = now - start
    yield from act(Wait(SETTLE_SECONDS))
    second = yield from _dump(pid, clock)
    if second is None:
        return None
    kept = first & second
    return Finding(len(kept), events) if len(kept) >= 2 else None
