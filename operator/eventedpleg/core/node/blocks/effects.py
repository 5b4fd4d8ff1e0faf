"""What the agent asks of its host and of the API, as data. Pure.

The agent's phases (applyphase, donephase, ...) and the blocks they share (restart, verifyloop) are
generators: they yield these, receive each answer, and return how they ended. eventedpleg.agent.interpreter
performs them against a host (the real one, or a simulated one in tests); a test may answer them itself. Each
class says what it is answered with.

Acts change something or take time; looks only read. A phase's acts are what it did to the node.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from eventedpleg.core.evidence import Evidence
from eventedpleg.core.hostcheck import HostCheck
from eventedpleg.core.node.blocks.host import CommandResult, HttpResult, JournalChunk, KubeletProcess
from eventedpleg.core.node.blocks.hostfault import Faulted, HostFault
from eventedpleg.core.node.blocks.transaction import FileCopy, Transaction
from eventedpleg.core.node.facts.hostplan import FileChange, HostFacts, ManagedState
from eventedpleg.core.node.facts.promtext import Metrics
from eventedpleg.core.node.facts.verify import Observation
from eventedpleg.core.runtimes import RuntimeProfile
from eventedpleg.protocol import (
    ANN_CURRENT,
    ANN_EVIDENCE,
    ANN_REASON,
    ANN_STATE,
    ANN_STATE_SINCE,
    NodeState,
    format_time,
)
from eventedpleg.reasons import EventReason

REASON_LIMIT = 1024

# --- acts ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Wait:
    """Answer: None, once `seconds` have passed on the host's clock."""

    seconds: float


@dataclass(frozen=True)
class Run:
    """Answer: the CommandResult of running argv in the host's namespaces."""

    argv: tuple[str, ...]
    timeout: float = 120.0


@dataclass(frozen=True)
class Restart:
    """`systemctl restart UNIT`. Answer: its CommandResult."""

    unit: str


@dataclass(frozen=True)
class WriteFiles:
    """Sweep our stale temp names from the files' directories, then write (atomically, in each file's own
    directory) or remove each file. Answer: None, or why a write failed."""

    changes: tuple[FileChange, ...]
    remove_dirs: tuple[str, ...] = ()  # then remove these directories, each only if it is empty


@dataclass(frozen=True)
class RestoreFiles:
    """Put back the transaction's backups exactly, and remove the directories it created if they are empty
    again. Answer: None, or why a restore failed."""

    txn: Transaction


@dataclass(frozen=True)
class SaveTransaction:
    """Record the transaction (its backups first of all) before the first write. Answer: None."""

    txn: Transaction


@dataclass(frozen=True)
class MarkHalted:
    """onFailure=Halt: the recorded transaction is to be rolled back before anything else. Answer: None."""


@dataclass(frozen=True)
class EndTransaction:
    """Forget the recorded transaction. Answer: None."""


@dataclass(frozen=True)
class SaveApplied:
    """Record what is now applied and verified. Answer: None."""

    state: ManagedState


@dataclass(frozen=True)
class SaveConfigBaseline:
    """Keep the kubelet --config bytes from before our first edit (an exact disable restores them)."""

    content: bytes


@dataclass(frozen=True)
class DropConfigBaseline:
    """Forget the kept --config bytes (nothing of ours is in --config any more). Answer: None."""


@dataclass(frozen=True)
class Report:
    """Patch our Node's annotations (state, reason, state-since, and what is set here), only while
    desired-config is still what the phase acts on. Answer: whether the patch was written."""

    state: NodeState
    reason: str
    evidence: Evidence | None = None
    current: str | None = None  # set current-config to this hash
    forget_current: bool = False  # remove current-config

    def annotations(self, now: datetime) -> dict[str, str | None]:
        """The annotation changes (None removes one), written at `now`."""
        reason = self.reason if len(self.reason) <= REASON_LIMIT else self.reason[: REASON_LIMIT - 1] + "…"
        changes: dict[str, str | None] = {
            ANN_STATE: self.state.value,
            ANN_REASON: reason,
            ANN_STATE_SINCE: format_time(now),
        }
        if self.evidence is not None:
            changes[ANN_EVIDENCE] = self.evidence.to_json()
        if self.current is not None:
            changes[ANN_CURRENT] = self.current
        elif self.forget_current:
            changes[ANN_CURRENT] = None
        return changes


@dataclass(frozen=True)
class PublishBenefit:
    """Set our Node's eventedpleg.io/benefit annotation (core.node.facts.benefit), only while desired-config
    is
    still what the phase acted on. Answer: whether the patch was written."""

    benefit: str


@dataclass(frozen=True)
class PublishHostCheck:
    """Set our Node's eventedpleg.io/host-check annotation to `check` (core.hostcheck), and nothing else.
    Answer: whether the patch was written."""

    check: HostCheck


@dataclass(frozen=True)
class PublishIncidents:
    """Set our Node's eventedpleg.io/guard-incidents annotation (core.guardincidents), unconditionally like
    the host check: the key is the agent's alone. Answer: whether the patch was written."""

    text: str


@dataclass(frozen=True)
class SetHealthCondition:
    """Set our Node's EventedPLEGHealthy condition in status.conditions (core.guardincidents). Answer:
    None."""

    healthy: bool
    reason: str
    message: str


@dataclass(frozen=True)
class GuardCount:
    """Count what the guard did in the agent's metrics (agent.metrics). Answer: None."""

    incident: str = ""  # an incident of this kind (core.node.facts.guardsigns.Kind)
    heal_seconds: float | None = None  # a heal proven this long after the first sign
    rolled_back: bool = False


@dataclass(frozen=True)
class NodeEvent:
    """An Event about our Node. Answer: None."""

    reason: EventReason
    message: str
    warning: bool = False


# --- looks -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadConfigMap:
    """Answer: the ConfigMap's data, or None when it does not exist."""

    namespace: str
    name: str


@dataclass(frozen=True)
class ReadTransaction:
    """Answer: the recorded transaction, or None."""


@dataclass(frozen=True)
class ReadApplied:
    """Answer: the recorded ManagedState (empty when nothing was applied)."""


@dataclass(frozen=True)
class ReadHost:
    """Answer: the HostFacts for the pure decision (core.node.facts.hostplan), our kept --config bytes
    included."""

    enabling: bool


@dataclass(frozen=True)
class Backup:
    """Answer: an exact copy (FileCopy) of each path, in order."""

    paths: tuple[str, ...]


@dataclass(frozen=True)
class ReadFile:
    """Answer: the file's bytes, or None when it is not a regular file."""

    path: str


@dataclass(frozen=True)
class Healthz:
    """Answer: the kubelet's /healthz as an HttpResult."""


@dataclass(frozen=True)
class Scrape:
    """Answer: the kubelet's /metrics, parsed (with `only`, just those metric names), or None when it did not
    answer."""

    only: frozenset[str] | None = None


@dataclass(frozen=True)
class ReadJournal:
    """Answer: the unit's log messages since `since`, oldest first."""

    unit: str
    since: datetime


@dataclass(frozen=True)
class FollowJournal:
    """Answer: a JournalChunk, the unit's messages containing `match` logged after `cursor` (with no cursor,
    since `since`), and the cursor to follow on from. Never a scan of the whole log."""

    unit: str
    cursor: str
    since: datetime
    match: str


@dataclass(frozen=True)
class Observe:
    """Answer: an Observation (healthz, Node Ready, /metrics, the kubelet journal since `since`, and with
    `runtime` its running config's drop-in setting, CRI-O's enable_pod_events) over `window` seconds after
    `baseline`."""

    baseline: Metrics | None
    window: float
    since: datetime
    runtime: RuntimeProfile | None


@dataclass(frozen=True)
class FindKubelet:
    """Answer: the running kubelet process, or None."""


Act = (
    Wait
    | Run
    | Restart
    | WriteFiles
    | RestoreFiles
    | SaveTransaction
    | MarkHalted
    | EndTransaction
    | SaveApplied
    | SaveConfigBaseline
    | DropConfigBaseline
    | Report
    | PublishBenefit
    | PublishHostCheck
    | PublishIncidents
    | SetHealthCondition
    | GuardCount
    | NodeEvent
)
Look = (
    ReadConfigMap
    | ReadTransaction
    | ReadApplied
    | ReadHost
    | Backup
    | ReadFile
    | Healthz
    | Scrape
    | ReadJournal
    | FollowJournal
)
Effect = Act | Look | Observe | FindKubelet
ACTS = Act.__args__
EffectAnswer = (
    HostFault  # any host effect may be answered with what failed (core.node.blocks.hostfault)
    | CommandResult
    | HttpResult
    | Metrics
    | Observation
    | KubeletProcess
    | JournalChunk
    | HostFacts
    | ManagedState
    | Transaction
    | Mapping[str, str]
    | tuple[FileCopy, ...]
    | tuple[str, ...]
    | bytes
    | str
    | bool
    | None
)
T = TypeVar("T")
Phase = Generator[Effect, EffectAnswer, T]  # a phase: yields effects, is sent their answers, returns its end
Now = Callable[[], datetime]


def is_act(effect: Effect) -> bool:
    return isinstance(effect, ACTS)


def ask(effect: Effect, kind: type[T]) -> Phase[T]:
    """Yield `effect`; its answer, which must be a `kind`. A HostFault answer raises Faulted (the phase's
    entry point reports it)."""
    answer = yield effect
    if isinstance(answer, HostFault) and kind is not HostFault:
        raise Faulted(answer)
    if not isinstance(answer, kind):
        raise TypeError(f"{effect!r} was answered with {answer!r}, not a {kind.__name__}")
    return answer


def ask_maybe(effect: Effect, kind: type[T]) -> Phase[T | None]:
    """Yield `effect`; its answer, a `kind` or None. A HostFault answer raises Faulted."""
    answer = yield effect
    if isinstance(answer, HostFault) and kind is not HostFault:
        raise Faulted(answer)
    if answer is not None and not isinstance(answer, kind):
        raise TypeError(f"{effect!r} was answered with {answer!r}, not a {kind.__name__} or None")
    return answer


def act(effect: Act) -> Phase[None]:
    """Yield an act whose answer does not matter, unless it is a HostFault (raises Faulted)."""
    answer = yield effect
    if isinstance(answer, HostFault):
        raise Faulted(answer)
