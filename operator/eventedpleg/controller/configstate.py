"""Everything the operator keeps for one NodeConfig between passes, in one object: its planning memo, its
rendered configs, what the publisher last wrote and which failures had their Event, its node-change reader
and its metric series (its spec and status are parsed once per watch event: nodeconfigview). `ConfigStates`
hands out one per name and closes it when the NodeConfig goes (after its last pass): closing drops the
series, and a pass still running on the closed state can neither bring a series back nor register its node
reader again."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime

from eventedpleg.controller.metrics import OperatorMetrics
from eventedpleg.controller.nodecache import NodeCache
from eventedpleg.core import render
from eventedpleg.core.rollout.planner import PassMemo, Summary
from eventedpleg.core.rollout.snapshot import NodeView
from eventedpleg.models.nodeconfig import NodeConfigStatus


@dataclass(eq=False)
class ConfigState:
    name: str
    metrics: OperatorMetrics
    nodes: NodeCache
    # The rollout loop's passes only (one at a time): each node planned again only when its view changed
    # or its deadline passed (incremental planning).
    memo: PassMemo = field(default_factory=PassMemo)
    rendered: dict[tuple[bool, str], render.RenderedConfig] = field(default_factory=dict)  # (on, mode)
    written: tuple[NodeConfigStatus, float] | None = None  # the last status written, and when (monotonic)
    # (node, state-since) of the failures that had their Event: a node retried that fails again gets another
    seen_failures: set[tuple[str, datetime | None]] = field(default_factory=set)
    # spec.rollout.healthGate: the nodes whose pods the last pass asked to be read for the next one.
    health_watch: tuple[str, ...] = ()
    closed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)  # the pass and steps against close()

    def changes(self) -> tuple[list[NodeView], dict[str, NodeView | None] | None] | None:
        """The node cache's views and what changed since this NodeConfig's last pass; None once closed."""
        with self.lock:
            return None if self.closed else self.nodes.changes(self.name)

    def record_pass(self, summary: Summary, conditions: dict[str, bool], failures: int) -> None:
        """The pass's gauges, and `failures` new node failures counted."""
        with self.lock:
            if self.closed:
                return
            self.metrics.record_pass(self.name, summary, conditions)
            if failures:
                self.metrics.failures.labels(self.name).inc(failures)

    def record_held(
        self, views: list[NodeView], changed: dict[str, NodeView | None] | None, now: datetime
    ) -> None:
        """The nodes this NodeConfig holds cordoned, for eventedpleg_held_node_seconds."""
        with self.lock:
            if not self.closed:
                self.metrics.record_held(self.name, views, changed, now)

    def drain_retried(self) -> None:
        with self.lock:
            if not self.closed:
                self.metrics.drain_retries.labels(self.name).inc()

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.metrics.forget(self.name)
            self.nodes.forget_reader(self.name)


@dataclass
class ConfigStates:
    """NodeConfig name -> its ConfigState, for the passes (worker threads) and the watch (event loop)."""

    metrics: OperatorMetrics
    nodes: NodeCache
    states: dict[str, ConfigState] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, name: str) -> ConfigState:
        with self.lock:
            state = self.states.get(name)
            if state is None:
                state = self.states[name] = ConfigState(name, self.metrics, self.nodes)
            return state

    def close(self, name: str) -> None:
        """The NodeConfig is gone: its state goes, and its series with it (see ConfigState.close)."""
        with self.lock:
            state = self.states.pop(name, None)
        if state is not None:
            state.close()
        else:
            self.metrics.forget(
                name
            )  # series of a NodeConfig this replica never planned: none, or a leftover
