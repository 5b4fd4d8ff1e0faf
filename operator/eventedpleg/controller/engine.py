"""The operator's moving parts between kopf and the pure core: watch events into the caches, wake-ups, and
the per-NodeConfig loop that runs one pass after another. Built, with its parts, by wiring.build_engine.

The parts, each with one job: `nodecache.NodeCache` (the nodes, which have a step in flight),
`nodeconfigstore.NodeConfigStore` (the NodeConfigs, and the immutable inputs of each pass),
`reconciler.Reconciler` (one pass: render, plan, submit, status), `steprunner.StepRunner` (the step pools),
`publisher.StatusPublisher` (status writes, Events, metrics), `configstate.ConfigStates` (what is
kept per NodeConfig between passes, dropped when it goes), `wakeups.WakeUps` (the loops' wake-ups).

Threads: kopf's handlers and daemons run on the event loop, which alone touches the NodeConfigStore;
a pass runs in a worker thread on inputs taken on the loop; steps run on the pools; node events come
from our informer's thread (eventedpleg.k8s.informer: a paged LIST once, then a watch; no periodic LIST)
and no pass runs before its first LIST is complete. Our own writes update the node cache at once so the
next pass never plans on data we already know is stale.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from eventedpleg.controller.configstate import ConfigStates
from eventedpleg.controller.nodecache import NodeCache
from eventedpleg.controller.nodeconfigstore import NodeConfigStore
from eventedpleg.controller.reconciler import Reconciler
from eventedpleg.controller.steprunner import STEP_THREADS, StepRunner
from eventedpleg.controller.wakeups import WakeUps
from eventedpleg.core.health import Heartbeats
from eventedpleg.logfields import fields

__all__ = ["STEP_THREADS", "RolloutEngine"]
log = logging.getLogger(__name__)
COALESCE = 0.05  # batch the watch events of one burst into one pass
UNSYNCED_RECHECK = 0.5  # until the first node LIST is in
UNSYNCED_WAIT = "waiting for the first complete list of nodes"
DELETE_RETRY = 2.0  # seconds between passes while a deleted NodeConfig lets its nodes go


@dataclass
class RolloutEngine:
    nodes: NodeCache
    nodeconfigs: NodeConfigStore  # event-loop thread only
    states: ConfigStates
    steps: StepRunner
    reconciler: Reconciler
    wakeups: WakeUps
    # Liveness: each rollout loop beats once a pass (controller/probes.py judges staleness).
    beats: Heartbeats | None = None
    nodes_synced: threading.Event = field(default_factory=threading.Event)  # the first node LIST is in

    # -- watch events ----------------------------------------------------------------------------------

    def node_event(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """From the node informer's thread."""
        if self.nodes.apply_event(event_type, body) and self.nodes_synced.is_set():
            self.wakeups.wake_from_thread()

    def agent_pod_event(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """From the agent pod informer's thread: a node whose agent pod changed is planned again."""
        if self.nodes.apply_pod_event(event_type, body) and self.nodes_synced.is_set():
            self.wakeups.wake_from_thread()

    def agent_pods_listed(self, names: set[str]) -> None:
        """From the agent pod informer's thread, after each complete LIST."""
        if self.nodes.retain_pods(names) and self.nodes_synced.is_set():
            self.wakeups.wake_from_thread()

    def node_list_done(self, names: set[str]) -> None:
        """From the node informer's thread, after each complete LIST."""
        self.nodes.retain(names)
        self.nodes_synced.set()
        self.wakeups.wake_from_thread()

    def nodeconfig_event(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """On the event loop (kopf's event handler)."""
        name = self.nodeconfigs.apply_event(event_type, body)
        if event_type == "DELETED":  # after its last pass: the finalizer went with the last one
            self.states.close(name)
        self.wakeups.wake_all()  # peers matter for overlap detection

    # -- the per-NodeConfig loop (a kopf daemon) and the delete handler --------------------------------

    async def run_rollout(self, name: str, stopped: Any) -> None:
        wake = self.wakeups.register(name)
        loop = f"rollout/{name}"
        try:
            while not stopped:
                if self.beats is not None:
                    self.beats.beat(loop)
                wake.clear()
                if not self.nodes_synced.is_set():
                    # Never plan on part of the cluster: unseen nodes could be unavailable (maxUnavailable).
                    # The NodeConfig says Reconciling meanwhile (kstatus reads no status as Current).
                    inputs = self.nodeconfigs.inputs(name)
                    await asyncio.to_thread(self.reconciler.acknowledge, inputs, UNSYNCED_WAIT)
                    delay: float | None = UNSYNCED_RECHECK
                    cost = 0.0
                else:
                    started = time.monotonic()
                    inputs = self.nodeconfigs.inputs(name)  # taken here, on the loop
                    delay = await asyncio.to_thread(self.reconciler.reconcile_once, inputs)
                    cost = time.monotonic() - started
                if delay is None:
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), timeout=delay)
                # Planning at most half the time: at 5000 nodes a pass costs ~0.1 s of a contended core,
                # which the steps' API requests need more than a pass 50 ms after the last.
                await asyncio.sleep(max(COALESCE, cost))
        finally:
            self.wakeups.forget(name)
            if name not in self.nodeconfigs.views:  # gone: a pass begun after its DELETED made a state
                self.states.close(name)
            if self.beats is not None:
                self.beats.forget(loop)

    async def finalized(self, name: str) -> str:
        """One pass in deleting mode: "" once every node is let go, else what the deletion waits for."""
        if not self.nodes_synced.is_set():
            return "waiting for the first complete node list"
        inputs = self.nodeconfigs.inputs(name, deleting=True)  # taken here, on the loop
        return await asyncio.to_thread(self.reconciler.finalize, inputs)

    async def until_finalized(self, name: str, retry: float = DELETE_RETRY) -> None:
        """For the delete handler: pass after pass until every node is let go. An expected wait, so it
        is logged at INFO once per change of what it waits for (kopf logs a TemporaryError at ERROR on
        every retry, which would trip log alerts during every ordinary delete)."""
        said, extra = "", fields(nodeconfig=name)
        while waiting := await self.finalized(name):
            if waiting != said:
                log.info("NodeConfig %s is being deleted; waiting: %s", name, waiting, extra=extra)
                said = waiting
            await asyncio.sleep(retry)
        log.info("NodeConfig %s: every node let go; removing the finalizer", name, extra=extra)
