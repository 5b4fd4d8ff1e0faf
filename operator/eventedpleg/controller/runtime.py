"""The operator's moving parts between kopf and the pure core: watch caches, wake-ups, one reconcile pass.

A pass: parse the NodeConfig, render (on and off), make sure both ConfigMaps exist, plan over the cached
nodes, execute the actions in parallel, write status only if it changed. Nodes come from the watch kopf
keeps (no periodic LIST); our own writes update the cache at once so the next pass never plans on data
we already know is stale.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from eventedpleg import constants as c
from eventedpleg.constants import ConditionType
from eventedpleg.controller.metrics import Metrics
from eventedpleg.core import planner, render, status
from eventedpleg.core.agentoptions import AgentOptions
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
COALESCE = 0.05  # batch the watch events of one burst into one pass
WORKERS = 16


def _rv(body: Mapping[str, Any]) -> int:
    try:
        return int((body.get("metadata") or {}).get("resourceVersion", 0))
    except (TypeError, ValueError):
        return 0


@dataclass
class NodeCache:
    """Node name -> NodeView, fed by the node watch and by our own writes (newest resourceVersion wins)."""

    views: dict[str, NodeView] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)

    def observe(self, event_type: str | None, body: Mapping[str, Any]) -> bool:
        name = str((body.get("metadata") or {}).get("name", ""))
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


@dataclass
class Runtime:
    api: Any  # kubernetes ApiClient (typed only inside eventedpleg.k8s)
    namespace: str
    recorder: EventRecorder
    metrics: Metrics
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    nodes: NodeCache = field(default_factory=NodeCache)
    nodeconfigs: dict[str, dict[str, Any]] = field(default_factory=dict)
    wakes: dict[str, asyncio.Event] = field(default_factory=dict)
    ensured: set[str] = field(default_factory=set)
    seen_failures: dict[str, set[str]] = field(default_factory=dict)
    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(WORKERS, "step"))

    # -- watch events (called on the event loop) -------------------------------------------------------

    def node_event(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        if self.nodes.observe(event_type, body):
            self.wake_all()

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

    # -- the per-NodeConfig loop (a kopf daemon) -------------------------------------------------------

    async def run_rollout(self, name: str, stopped: Any) -> None:
        wake = self.wakes.setdefault(name, asyncio.Event())
        try:
            while not stopped:
                wake.clear()
                delay = await asyncio.to_thread(self.reconcile_once, name, False)
                if delay is None:
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), timeout=delay)
                await asyncio.sleep(COALESCE)
        finally:
            self.wakes.pop(name, None)

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
        body = self.nodeconfigs.get(name) or nodeconfigs.get(self.api, name)
        return self._pass(body, deleting=True) == 0.0

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
        result = planner.plan(list(self.nodes.views.values()), target, now)
        outcomes = self._execute(result.actions, ref, spec)
        new_status = status.build_status(
            result.summary,
            enabled=spec.evented_pleg and not target.reverting,
            deleting=deleting,
            generation=generation,
            previous=previous.conditions,
            now=now,
        )
        self._publish(ref, body, previous, new_status, result.summary)
        if deleting:
            return 0.0 if result.summary.finalized and not result.actions else BUSY_RECHECK
        if any(o.drain_retry for o in outcomes) or result.summary.counts.updating:
            return BUSY_RECHECK
        wake = result.summary.next_wake
        if wake is not None:
            return max(0.5, min(IDLE_RECHECK, (wake - now).total_seconds() + 0.5))
        return IDLE_RECHECK

    def _target(self, body: dict[str, Any], spec: NodeConfigSpec, *, deleting: bool) -> Target:
        name = str(body["metadata"]["name"])
        mode = spec.kubelet_config.value
        on = render.render(enabled=spec.evented_pleg, owner=name, kubelet_config_mode=mode)
        off = render.render(enabled=False, owner=name, kubelet_config_mode=mode)
        for rendered in (on, off):
            if rendered.hash not in self.ensured:
                configmaps.ensure(self.api, self.namespace, rendered)
                self.ensured.add(rendered.hash)
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

    def _execute(self, actions: tuple[Any, ...], ref: ObjectRef, spec: NodeConfigSpec) -> list[Outcome]:
        if not actions:
            return []
        executor = Executor(
            self.api,
            self.recorder,
            nodeconfig=ref,
            drain=DrainSettings(
                spec.drain.grace_period_seconds, spec.drain.delete_empty_dir_data, spec.drain.force
            ),
            clock=self.clock,
        )

        def run(action: Any) -> Outcome:
            started = time.monotonic()
            outcome = executor.apply(action)
            self.metrics.steps.labels(type(action).__name__).observe(time.monotonic() - started)
            return outcome

        outcomes = list(self.pool.map(run, actions))
        for outcome in outcomes:
            if outcome.node_body is not None:
                self.nodes.observe("MODIFIED", outcome.node_body)
            if outcome.error == "conflict":
                self.metrics.conflicts.inc()
            if outcome.drain_retry:
                self.metrics.drain_retries.labels(ref.name).inc()
        return outcomes

    def _publish(
        self,
        ref: ObjectRef,
        body: dict[str, Any],
        previous: NodeConfigStatus,
        new: NodeConfigStatus,
        summary: planner.Summary,
    ) -> None:
        before = {cond.type: cond.status for cond in previous.conditions}
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
        if new != previous:
            try:
                nodeconfigs.patch_status(self.api, ref.name, new.to_api())
            except ApiError as exc:
                log.warning("could not write status of %s: %s", ref.name, exc)

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
