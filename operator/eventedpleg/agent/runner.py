"""The agent's main loop: watch our own Node, act on it, check a Done node every so often, and publish the
host check at start and every so often while no apply holds the node."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import TypeVar

from eventedpleg.agent.agent import Agent, Work, drive
from eventedpleg.agent.health import LOOP
from eventedpleg.core.health import Heartbeats
from eventedpleg.k8s.errors import diagnose
from eventedpleg.logfields import fields

log = logging.getLogger(__name__)
ERROR_BACKOFF_SECONDS = 5.0  # the first pause after an error; each further one in a row doubles it
ERROR_BACKOFF_MAX_SECONDS = 300.0
T = TypeVar("T")


class Stopped(BaseException):  # not an Exception: the loop's `except Exception` must let it through
    """Raised by the signal handler while the loop only waits for the next watch event."""


def waiting(items: Iterable[T], idle: threading.Event | None) -> Iterator[T]:
    """`items`, with `idle` set only while blocked for the next one. A SIGTERM handler may then raise
    Stopped: the watch of our own Node can be quiet for minutes, and the pod's grace period (60 s)
    would otherwise run out and end in SIGKILL (seen: every agent pod took the whole grace period to
    stop, so a DaemonSet update or `helm uninstall` waited a minute per node). Never set during a step."""
    source = iter(items)
    while True:
        if idle is not None:
            idle.set()
        try:
            item = next(source)
        except StopIteration:
            return
        finally:
            if idle is not None:
                idle.clear()
        yield item


def _log_failure(exc: Exception, failed: str, then: str, *, node: str, brief: str = "") -> None:
    """An outage the API errors can name is one line per attempt (the traceback only with --verbose);
    anything else is logged with its traceback."""
    diagnosis, said = diagnose(exc), fields(node=node)
    if diagnosis is None:
        log.exception("%s; %s", failed, then, extra=said)
    else:
        log.warning("%s%s; %s", brief, diagnosis.message, then, extra=said)
        log.debug(failed, exc_info=exc, extra=said)


def backoff_seconds(failures: int) -> float:
    """The pause after `failures` errors in a row: 5 s, 10 s, 20 s, ... at most 300 s."""
    return float(min(ERROR_BACKOFF_MAX_SECONDS, ERROR_BACKOFF_SECONDS * 2 ** max(0, failures - 1)))


class Errors:
    """The loop's errors in a row: the pause before the next try, and each new error said once (a
    traceback in the log, an Event on the Node, and Failed while an apply holds it), not every pause."""

    def __init__(self, agent: Agent, sleep: Callable[[float], None]) -> None:
        self.agent, self.sleep = agent, sleep
        self.failures = 0
        self.said = ""  # the last error said on the Node

    def passed(self) -> None:
        self.failures, self.said = 0, ""

    def failed(self, exc: Exception) -> float:
        """Log (and when new, report) `exc`; the seconds to pause before the next try."""
        self.failures += 1
        pause = backoff_seconds(self.failures)
        then = f"retrying in {pause:.0f}s"
        if diagnose(exc) is not None:  # the API is what fails: nothing to say on the Node through it
            _log_failure(exc, "agent loop error", then, node=self.agent.node)
            return pause
        error = f"{type(exc).__name__}: {exc}"
        said = fields(node=self.agent.node)
        if error == self.said:
            log.warning("agent loop error again (%s); %s", error, then, extra=said)
            return pause
        log.exception("agent loop error; %s", then, extra=said)
        try:
            drive(self.agent.report_error(error, pause), self.sleep)
        except Exception as report_exc:
            _log_failure(report_exc, "reporting the error on the node failed", then, node=self.agent.node)
            return pause
        self.said = error
        return pause


class HostChecks:
    """The host check (Agent.host_check) at start and then every host_check_interval_seconds, between the
    loop's steps. Its failures are logged here and go no further: a check that keeps failing must neither
    hold up an apply nor send the loop into its error back-off."""

    def __init__(
        self, agent: Agent, sleep: Callable[[float], None], lock: threading.Lock | None = None
    ) -> None:
        self.agent, self.sleep = agent, sleep
        self.lock = lock or threading.Lock()  # the guard's (GuardLoop), when it runs
        self.last: datetime | None = None  # when it last ran (or failed)

    def when_due(self) -> None:
        clock, every = self.agent.host.clock, self.agent.settings.host_check_interval_seconds
        if self.last is not None and (clock.now() - self.last).total_seconds() < every:
            return
        try:
            with self.lock:
                checked = drive(self.agent.host_check(), self.sleep)
            if not checked:
                return  # an apply holds the node: check as soon as it lets go
        except Exception as exc:
            _log_failure(
                exc, "host check failed", f"next in {every:.0f}s", node=self.agent.node, brief="host check: "
            )
        self.last = clock.now()


class GuardLoop:
    """The guard's looks (Agent.guard) every guard_interval_seconds on a thread of their own: the loop
    blocks on its watch for a minute at a time, and a wedge must be seen within seconds. `lock` keeps the
    two from acting on the host at once (a guard look waits for an apply, and the other way round). Its
    failures are logged and go no further, like the host check's."""

    def __init__(self, agent: Agent, lock: threading.Lock) -> None:
        self.agent, self.lock = agent, lock
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="guard", daemon=True)

    def start(self) -> None:
        if self.agent.settings.guard_interval_seconds > 0:
            self.thread.start()

    def stop(self) -> None:
        self.stopped.set()

    def _run(self) -> None:
        every, clock = self.agent.settings.guard_interval_seconds, self.agent.host.clock
        while not self.stopped.wait(every):
            try:
                with self.lock:
                    drive(self.agent.guard(), clock.sleep)
            except Exception as exc:
                _log_failure(
                    exc, "guard look failed", f"next in {every:.0f}s", node=self.agent.node, brief="guard: "
                )


def run(
    agent: Agent,
    *,
    stop: Callable[[], bool],
    once: bool = False,
    beats: Heartbeats | None = None,
    idle: threading.Event | None = None,
) -> None:
    """Until `stop()`: read the Node, act, watch it (fieldSelector metadata.name) for check_interval seconds,
    then run the after-Done check. Errors are never fatal: each is retried after a pause that doubles with
    each error in a row (backoff_seconds), and one that is not the API's is said once on the Node (Errors).
    The host check runs at start (after the first look at the Node) and then every host_check_interval
    seconds, between the steps (never during an apply); its failures are logged and never stop the rest.

    `beats` records progress for the health endpoint: every pass, watch event and retry, and every wait
    a step asks for (a verification window is progress; a call that never returns is not).
    `idle` is set while the loop only waits on the watch (see `waiting`). The guard looks at a Done node
    every guard_interval seconds on a thread of its own (GuardLoop)."""
    clock = agent.host.clock

    def beat() -> None:
        if beats is not None:
            beats.beat(LOOP)

    def sleep(seconds: float) -> None:
        beat()
        clock.sleep(seconds)
        beat()

    lock = threading.Lock()  # the guard's thread acts on the host only between the loop's steps

    def step(work: Work[None]) -> None:
        with lock:
            drive(work, sleep)

    guard = GuardLoop(agent, lock)
    if not once:
        guard.start()
    try:
        _loop(agent, stop=stop, once=once, idle=idle, beat=beat, sleep=sleep, step=step, lock=lock)
    finally:
        guard.stop()


def _loop(
    agent: Agent,
    *,
    stop: Callable[[], bool],
    once: bool,
    idle: threading.Event | None,
    beat: Callable[[], None],
    sleep: Callable[[float], None],
    step: Callable[[Work[None]], None],
    lock: threading.Lock,
) -> None:
    """run's loop, each step of the agent's under `lock`."""
    clock = agent.host.clock
    host_check = HostChecks(agent, sleep, lock)
    errors = Errors(agent, sleep)
    interval = agent.settings.check_interval_seconds
    while not stop():
        beat()
        try:
            node = agent.api.get_node(agent.node)
            if node is None:
                log.warning("node %s not found; waiting", agent.node, extra=fields(node=agent.node))
                sleep(ERROR_BACKOFF_SECONDS)
                continue
            step(agent.on_node(node))  # first: its reading of the kubelet starts the "before" window
            host_check.when_due()
            if once:
                step(agent.check())
                return
            last_check = clock.now()
            log.debug("watching node %s for %ss", agent.node, max(1, int(interval)))
            watch = agent.api.watch_node(
                agent.node, resource_version=node.resource_version, timeout_seconds=max(1, int(interval))
            )
            for seen in waiting(watch, idle):
                if stop():
                    return
                beat()
                step(agent.on_node(seen))
                if (clock.now() - last_check).total_seconds() >= interval:
                    step(agent.check())
                    last_check = clock.now()
                host_check.when_due()
            step(agent.check())
            errors.passed()
        except Exception as exc:  # neither a bad moment of the API server nor a bug may kill the agent
            if agent.metrics is not None:
                agent.metrics.loop_error()
            sleep(errors.failed(exc))
