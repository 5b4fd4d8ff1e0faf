"""The step runner: carries out a pass's actions on two thread pools without waiting for them, one step per
node at a time, and feeds each step's write back into the node cache."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial

from eventedpleg.controller.configstate import ConfigState
from eventedpleg.controller.executor import Executor, StepResult
from eventedpleg.controller.metrics import OperatorMetrics
from eventedpleg.controller.nodecache import NodeCache, assumed_cordoned
from eventedpleg.controller.wakeups import Later
from eventedpleg.core.rollout.actions import Action, Cordon, Drain
from eventedpleg.core.rollout.snapshot import NodeView
from eventedpleg.logfields import fields

log = logging.getLogger(__name__)
WORKERS = 32  # cordon/drain steps in flight at once (each is 1-4 API requests)
GIVEBACK_WORKERS = 16  # uncordon/release/fail steps in flight at once (one request each)
STEP_THREADS = WORKERS + GIVEBACK_WORKERS
# A drain that must wait (a pod still terminating, an eviction a PodDisruptionBudget refused) is tried
# again after this pause, as kubectl drain polls once a second. Without it the pass that the step's end
# wakes would start the same drain at once: on real nodes a pod's 2-second termination cost ~30 drain
# attempts (pod LISTs) per second.
DRAIN_POLL_SECONDS = 1.0


@dataclass
class StepRunner:
    executor: Executor  # carries out one step against the API
    metrics: OperatorMetrics
    nodes: NodeCache
    settled: Callable[[], None]  # called from a pool thread after each step: wake the passes
    may_start: Callable[[], bool]  # leader election: False stops every new step
    drain_poll_seconds: float = DRAIN_POLL_SECONDS
    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(WORKERS, "step"))
    # Steps that give a node back (uncordon, release, fail) never queue behind the cordons and drains
    # that take new ones: a burst of Done reports is answered at once, and it frees the budget first.
    giveback_pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(GIVEBACK_WORKERS, "giveback")
    )
    # Drains waiting out their pause before the next poll: one thread for all of them.
    later: Later = field(default_factory=lambda: Later("drain-poll"))

    def submit(self, actions: tuple[Action, ...], state: ConfigState) -> None:
        """Start each step on a pool without waiting: the next pass may run while steps are in flight.
        A node with a step in flight gets no second one; a Cordon is assumed done until it lands. A step
        planned on an older view of its node than the cached one is dropped: it would repeat the write that
        moved the node on (a second uncordon, an apply request over an Applying node), because the executor
        judges a 409 against `before`."""
        if not actions or not self.may_start():
            return
        for action in actions:
            claimed, before = self.nodes.claim(action.node, action.resource_version)
            if not claimed:
                continue
            if isinstance(action, Cordon) and before is not None:
                self.nodes.assume(action.node, assumed_cordoned(before, action))
            pool = self.pool if isinstance(action, Cordon | Drain) else self.giveback_pool
            pool.submit(self._step, action, state, before)

    def _step(self, action: Action, state: ConfigState, before: NodeView | None) -> None:
        started = time.monotonic()
        step = type(action).__name__
        said = fields(node=action.node, nodeconfig=state.name, phase=step)
        try:
            if self.may_start():  # checked again: the step may have queued past the leader's deadline
                log.info("step %s on %s starts", step, action.node, extra=said)
                outcome = self.executor.apply(action, before, nodeconfig=state.name)
            else:
                outcome = StepResult(action, applied=False, error="not leading")
        except Exception:  # a step must never leave the node marked busy or assumed
            log.exception("step %s on %s", step, action.node, extra=said)
            outcome = StepResult(action, applied=False, error="internal error")
        self.metrics.steps.labels(type(action).__name__).observe(time.monotonic() - started)
        if isinstance(action, Cordon):
            # Nothing written (a failure, or a node left in service: onBlocked Wait): the old view back.
            self.nodes.settle(action.node, outcome.node, before if outcome.node is None else None)
        elif outcome.node is not None:
            self.nodes.written(outcome.node)
        if outcome.error == "conflict":
            self.metrics.conflicts.inc()
        if outcome.drain_retry:
            state.drain_retried()  # not once the NodeConfig is gone: no series comes back
            # The node stays busy (no other step) until the pause ends; then a pass is woken for it.
            self.later.call(self.drain_poll_seconds, partial(self._release, action.node))
            return
        self._release(action.node)

    def _release(self, node: str) -> None:
        self.nodes.release(node)
        self.settled()
