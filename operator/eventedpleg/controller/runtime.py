"""The operator's moving parts between kopf and the pure core: watch caches, wake-ups, one reconcile pass.

A pass: parse the NodeConfig, render (on and off), make sure both ConfigMaps exist, plan over the cached
nodes, execute the actions in parallel, write status only if it changed. Nodes come from our node informer
(eventedpleg.k8s.informer: a paged LIST once, then a watch; no periodic LIST) and no pass runs before its
first LIST is complete; our own writes update the cache at once so the next pass never plans on data we
already know is stale.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from eventedpleg import constants as c
from eventedpleg.constants import ConditionType, NodeState
from eventedpleg.controller.metrics import Metrics
from eventedpleg.core import planner, render, status
from eventedpleg.core.actions import Cordon, Drain
from eventedpleg.core.agentoptions import AgentOptions
from eventedpleg.core.health import Heartbeats
from eventedpleg.core.snapshot import NodeView, Peer, Target, node_view, parse_time
from eventedpleg.k8s import configmaps, nodeconfigs
from eventedpleg.k8s.errors import ApiError
from eventedpleg.k8s.events import EventRecorder, ObjectRef
from eventedpleg.k8s.executor import DrainSettings, Executor, Outcome
from eventedpleg.models.nodeconfig import (
    Condition,
    ConditionStatus,
    LabelSelector,
    NodeConfigSpec,
    NodeConfigStatus,
)

log = logging.getLogger(__name__)
IDLE_RECHECK = 30.0  # seconds between passes when nothing happens (time-based gates: window, soak)
BUSY_RECHECK = 2.0  # while drains wait on PodDisruptionBudgets (kubectl retries every 5 s)
STATUS_INTERVAL = 1.0  # at most one status write a second while only the counts move
COALESCE = 0.05  # batch the watch events of one burst into one pass
WORKERS = 32  # cordon/drain steps in flight at once (each is 1-4 API requests)
GIVEBACK_WORKERS = 16  # uncordon/release/fail steps in flight at once (one request each)
STEP_THREADS = WORKERS + GIVEBACK_WORKERS


def _rv(body: Mapping[str, Any]) -> int:
    try:
        return int((body.get("metadata") or {}).get("resourceVersion", 0))
    except (TypeError, ValueError):
        return 0


@dataclass
class NodeCache:
    """Node name -> NodeView, fed by the node watch and by our own writes (newest resourceVersion wins).

    While a Cordon step is in flight the node is *assumed* cordoned (kube-scheduler's assume cache): the
    next pass already counts it against maxUnavailable, so passes can overlap steps without ever taking
    more nodes than allowed. Watch events for that node are held until the step's own write lands.
    """

    views: dict[str, NodeView] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)
    held: dict[str, Mapping[str, Any] | None] = field(default_factory=dict)  # assumed node -> newest event
    lock: threading.Lock = field(default_factory=threading.Lock)

    def observe(self, event_type: str | None, body: Mapping[str, Any]) -> bool:
        name = str((body.get("metadata") or {}).get("name", ""))
        with self.lock:
            if name in self.held and event_type != "DELETED":
                self.held[name] = body
                return False
            return self._apply(name, event_type, body)

    def _apply(self, name: str, event_type: str | None, body: Mapping[str, Any]) -> bool:
        if event_type == "DELETED":
            self.views.pop(name, None)
            self.versions.pop(name, None)
            return True
        rv = _rv(body)
        if rv and rv < self.versions.get(name, 0):
            return False  # an older event than a write we already saw
        self.views[name] = node_view(body)
        self.versions[name] = rv
        return True

    def assume(self, name: str, view: NodeView) -> None:
        with self.lock:
            self.held.setdefault(name, None)
            self.views[name] = view

    def settle(self, name: str, written: Mapping[str, Any] | None, fallback: NodeView | None) -> None:
        """The step is over: take our write's result (or put the old view back), then any newer event."""
        with self.lock:
            newest = self.held.pop(name, None)
            if written is not None:
                self._apply(name, "MODIFIED", written)
            elif fallback is not None:
                self.views[name] = fallback
            if newest is not None:
                self._apply(name, "MODIFIED", newest)

    def retain(self, names: set[str]) -> None:
        """After a complete LIST: forget nodes that are gone (their DELETED event fell in a watch gap)."""
        with self.lock:
            for name in set(self.views) - names - set(self.held):
                self.views.pop(name, None)
                self.versions.pop(name, None)

    def snapshot(self) -> list[NodeView]:
        with self.lock:
            return list(self.views.values())


@dataclass
class Runtime:
    api: Any  # kubernetes ApiClient (typed only inside eventedpleg.k8s)
    namespace: str
    recorder: EventRecorder
    metrics: Metrics
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    allow_force_delete: bool = False  # the chart grants `pods delete` (drain.allowForceDelete)
    nodes: NodeCache = field(default_factory=NodeCache)
    nodeconfigs: dict[str, dict[str, Any]] = field(default_factory=dict)
    wakes: dict[str, asyncio.Event] = field(default_factory=dict)
    seen_failures: dict[str, set[str]] = field(default_factory=dict)
    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(WORKERS, "step"))
    # Steps that give a node back (uncordon, release, fail) never queue behind the cordons and drains
    # that take new ones: a burst of Done reports is answered at once, and it frees the budget first.
    giveback_pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(GIVEBACK_WORKERS, "giveback")
    )
    busy: set[str] = field(default_factory=set)  # nodes with a step in flight: no second step for them
    loop: asyncio.AbstractEventLoop | None = None
    rendered: dict[tuple[bool, str, str], render.RenderedConfig] = field(default_factory=dict)
    written: dict[str, tuple[NodeConfigStatus, float]] = field(default_factory=dict)  # last status, when

    nodes_synced: threading.Event = field(default_factory=threading.Event)  # the first node LIST is in
    wake_pending: bool = False
    # Liveness: each rollout loop beats once a pass (controller/probes.py judges staleness).
    beats: Heartbeats | None = None
    # Leader election: no step starts unless this says so (a leader that cannot renew stops at once).
    may_start: Callable[[], bool] = lambda: True

    # -- watch events ----------------------------------------------------------------------------------

    def node_event(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """From the node informer's thread."""
        if self.nodes.observe(event_type, body) and self.nodes_synced.is_set():
            self._wake_from_thread()

    def node_list_done(self, names: set[str]) -> None:
        """From the node informer's thread, after each complete LIST."""
        self.nodes.retain(names)
        self.nodes_synced.set()
        self._wake_from_thread()

    def nodeconfig_event(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        name = str(body["metadata"]["name"])
        if event_type == "DELETED":
            self.nodeconfigs.pop(name, None)
            self.metrics.forget(name)
        else:
            self.nodeconfigs[name] = _plain(body)
        self.wake_all()  # peers matter for overlap detection

    def wake_all(self) -> None:
        for event in self.wakes.values():
            event.set()

    def _wake_from_thread(self) -> None:
        """One pending wake-up at a time: a burst of node events costs the event loop one callback."""
        if self.loop is not None and not self.loop.is_closed() and not self.wake_pending:
            self.wake_pending = True
            self.loop.call_soon_threadsafe(self._woken)

    def _woken(self) -> None:
        self.wake_pending = False
        self.wake_all()

    # -- the per-NodeConfig loop (a kopf daemon) -------------------------------------------------------

    async def run_rollout(self, name: str, stopped: Any) -> None:
        wake = self.wakes.setdefault(name, asyncio.Event())
        self.loop = asyncio.get_running_loop()
        loop = f"rollout/{name}"
        try:
            while not stopped:
                if self.beats is not None:
                    self.beats.beat(loop)
                wake.clear()
                if not self.nodes_synced.is_set():
                    # Never plan on part of the cluster: unseen nodes could be unavailable (maxUnavailable).
                    delay: float | None = 0.5
                    cost = 0.0
                else:
                    started = time.monotonic()
                    delay = await asyncio.to_thread(self.reconcile_once, name, False)
                    cost = time.monotonic() - started
                if delay is None:
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), timeout=delay)
                # Planning at most half the time: at 5000 nodes a pass costs ~0.1 s of a contended core,
                # which the steps' API requests need more than a pass 50 ms after the last.
                await asyncio.sleep(max(COALESCE, cost))
        finally:
            self.wakes.pop(name, None)
            if self.beats is not None:
                self.beats.forget(loop)

    def reconcile_once(self, name: str, deleting: bool) -> float | None:
        """One pass; returns seconds until the next one (None: the NodeConfig is gone)."""
        body = self.nodeconfigs.get(name)
        if body is None:
            try:
                body = nodeconfigs.get(self.api, name)
            except ApiError:
                return None
        started = time.monotonic()
        result = self._pass(body, deleting=deleting)
        self.metrics.reconcile.observe(time.monotonic() - started)
        return result

    def finalized(self, name: str) -> bool:
        """For the delete handler: one pass in deleting mode; True once every node is let go."""
        if not self.nodes_synced.is_set():
            return False
        body = self.nodeconfigs.get(name) or nodeconfigs.get(self.api, name)
        return self._pass(body, deleting=True) == 0.0 and not self.busy

    # -- internals -------------------------------------------------------------------------------------

    def _pass(self, body: dict[str, Any], *, deleting: bool) -> float:
        meta = body["metadata"]
        name, generation = str(meta["name"]), int(meta.get("generation", 0))
        ref = ObjectRef(c.KIND, name, f"{c.GROUP}/{c.VERSION}", str(meta.get("uid", "")))
        previous = _previous_status(body)
        try:
            spec = NodeConfigSpec.model_validate(body.get("spec") or {})
        except ValidationError as exc:
            self._invalid(ref, body, previous, exc)
            return IDLE_RECHECK
        now = self.clock()
        target = self._target(body, spec, deleting=deleting)
        result = planner.plan(self.nodes.snapshot(), target, now)
        self._submit(result.actions, ref, spec)
        new_status = status.build_status(
            result.summary,
            enabled=spec.evented_pleg and not target.reverting,
            deleting=deleting,
            generation=generation,
            previous=previous.conditions,
            now=now,
        )
        dirty = self._publish(ref, previous, new_status, result.summary)
        if deleting:
            return 0.0 if result.summary.finalized and not result.actions else BUSY_RECHECK
        if dirty:
            return STATUS_INTERVAL
        if result.summary.counts.updating:
            return BUSY_RECHECK
        wake = result.summary.next_wake
        if wake is not None:
            return max(0.5, min(IDLE_RECHECK, (wake - now).total_seconds() + 0.5))
        return IDLE_RECHECK

    def _target(self, body: dict[str, Any], spec: NodeConfigSpec, *, deleting: bool) -> Target:
        name = str(body["metadata"]["name"])
        mode = spec.kubelet_config.value
        on, off = self._render(spec.evented_pleg, name, mode), self._render(False, name, mode)
        peers = tuple(
            Peer(other_name, _created(other), selector)
            for other_name, other in self.nodeconfigs.items()
            if other_name != name and (selector := _selector(other)) is not None
        )
        return Target(
            name=name,
            spec=spec,
            created=_created(body),
            generation=int(body["metadata"].get("generation", 0)),
            hash_on=on.hash,
            hash_off=off.hash,
            agent_options=AgentOptions.from_spec(spec).to_json(),
            deleting=deleting,
            peers=peers,
        )

    def _render(self, enabled: bool, owner: str, mode: str) -> render.RenderedConfig:
        """Rendered once per (enabled, owner, mode), and its ConfigMap created once."""
        key = (enabled, owner, mode)
        if key not in self.rendered:
            rendered = render.render(enabled=enabled, owner=owner, kubelet_config_mode=mode)
            configmaps.ensure(self.api, self.namespace, rendered)
            self.rendered[key] = rendered
        return self.rendered[key]

    def _submit(self, actions: tuple[Any, ...], ref: ObjectRef, spec: NodeConfigSpec) -> None:
        """Start each step on the pool without waiting: the next pass may run while steps are in flight.
        A node with a step in flight gets no second one; a Cordon is assumed done until it lands."""
        if not actions or not self.may_start():
            return
        executor = Executor(
            self.api,
            self.recorder,
            nodeconfig=ref,
            drain=DrainSettings(
                spec.drain.grace_period_seconds,
                spec.drain.delete_empty_dir_data,
                spec.drain.force,
                self.allow_force_delete,
            ),
            clock=self.clock,
        )
        for action in actions:
            with self.nodes.lock:
                if action.node in self.busy:
                    continue
                self.busy.add(action.node)
                before = self.nodes.views.get(action.node)
            if isinstance(action, Cordon) and before is not None:
                self.nodes.assume(action.node, _assumed_cordoned(before, action))
            pool = self.pool if isinstance(action, Cordon | Drain) else self.giveback_pool
            pool.submit(self._step, executor, action, ref.name, before)

    def _step(self, executor: Executor, action: Any, nodeconfig: str, before: NodeView | None) -> None:
        started = time.monotonic()
        try:
            if self.may_start():  # checked again: the step may have queued past the leader's deadline
                log.info("step %s on %s starts", type(action).__name__, action.node)
                outcome = executor.apply(action, before)
            else:
                outcome = Outcome(action, applied=False, error="not leading")
        except Exception:  # a step must never leave the node marked busy or assumed
            log.exception("step %s on %s", type(action).__name__, action.node)
            outcome = Outcome(action, applied=False, error="internal error")
        self.metrics.steps.labels(type(action).__name__).observe(time.monotonic() - started)
        if isinstance(action, Cordon):
            self.nodes.settle(action.node, outcome.node_body, None if outcome.applied else before)
        elif outcome.node_body is not None:
            self.nodes.observe("MODIFIED", outcome.node_body)
        if outcome.error == "conflict":
            self.metrics.conflicts.inc()
        if outcome.drain_retry:
            self.metrics.drain_retries.labels(nodeconfig).inc()
        with self.nodes.lock:
            self.busy.discard(action.node)
        self._wake_from_thread()

    def _publish(
        self,
        ref: ObjectRef,
        previous: NodeConfigStatus,
        new: NodeConfigStatus,
        summary: planner.Summary,
    ) -> bool:
        """Events on transitions, metrics, and the status write (at most one a second while only counts
        move; at once when a condition flips). True when a write was held back."""
        last, last_at = self.written.get(ref.name, (previous, 0.0))
        before = {cond.type: cond.status for cond in last.conditions}
        after = {cond.type: cond for cond in new.conditions}
        available, degraded = after[ConditionType.AVAILABLE], after[ConditionType.DEGRADED]
        if (
            available.status is ConditionStatus.TRUE
            and before.get(ConditionType.AVAILABLE) != available.status
        ):
            self.recorder.emit(ref, "Normal", "RolloutComplete", available.message)
        if degraded.status != before.get(ConditionType.DEGRADED, ConditionStatus.FALSE):
            if degraded.status is ConditionStatus.TRUE:
                self.recorder.emit(ref, "Warning", degraded.reason, degraded.message)
            else:
                self.recorder.emit(ref, "Normal", "Recovered", "no longer degraded")
        seen = self.seen_failures.setdefault(ref.name, set())
        for note in summary.failures:
            if note.name not in seen:
                seen.add(note.name)
                self.metrics.failures.labels(ref.name).inc()
                self.recorder.emit(ref, "Warning", f"Node{note.state}", f"{note.name}: {note.reason}")
        self.metrics.observe(
            ref.name,
            summary,
            {cond.type.value: cond.status is ConditionStatus.TRUE for cond in new.conditions},
        )
        if new == last:
            return False  # already written; the watch will catch the cached body up
        flipped = {c.type: c.status for c in new.conditions} != before
        if not flipped and time.monotonic() - last_at < STATUS_INTERVAL:
            return True
        try:
            nodeconfigs.patch_status(self.api, ref.name, new.to_api())
            self.written[ref.name] = (new, time.monotonic())
        except ApiError as exc:
            log.warning("could not write status of %s: %s", ref.name, exc)
        return False

    def _invalid(
        self, ref: ObjectRef, body: dict[str, Any], previous: NodeConfigStatus, exc: ValidationError
    ) -> None:
        problems = "; ".join(
            f"spec.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()[:5]
        )
        now = self.clock()
        generation = int(body["metadata"].get("generation", 0))
        conditions = [
            Condition(
                type=ConditionType.DEGRADED,
                status=ConditionStatus.TRUE,
                reason="InvalidSpec",
                message=problems,
                observed_generation=generation,
                last_transition_time=now,
            )
        ]
        new = previous.model_copy(update={"conditions": conditions, "observed_generation": generation})
        if new.conditions != previous.conditions or new.observed_generation != previous.observed_generation:
            self.recorder.emit(ref, "Warning", "InvalidSpec", problems)
            nodeconfigs.patch_status(self.api, ref.name, new.to_api())


def _assumed_cordoned(view: NodeView, action: Cordon) -> NodeView:
    """The node as it will be once the Cordon step has written: ours, cordoned, draining."""
    marks = replace(
        view.marks,
        owner=action.owner,
        state=NodeState.DRAINING,
        cordoned_by_us=True,
        was_unschedulable=action.was_unschedulable,
    )
    return replace(view, unschedulable=True, marks=marks)


def _plain(body: Mapping[str, Any]) -> dict[str, Any]:
    """kopf hands out read-only views; keep plain dicts."""
    return {key: (_plain(value) if isinstance(value, Mapping) else value) for key, value in body.items()}


def _created(body: Mapping[str, Any]) -> datetime:
    return parse_time(str(body["metadata"].get("creationTimestamp", ""))) or datetime.min.replace(tzinfo=UTC)


def _selector(body: Mapping[str, Any]) -> LabelSelector | None:
    """The selector of another NodeConfig; None for an invalid one, which manages nothing."""
    try:
        return NodeConfigSpec.model_validate(body.get("spec") or {}).node_selector
    except ValidationError:
        return None


def _previous_status(body: Mapping[str, Any]) -> NodeConfigStatus:
    try:
        return NodeConfigStatus.model_validate(body.get("status") or {})
    except ValidationError:
        return NodeConfigStatus()
