"""One reconcile pass over one NodeConfig, from immutable inputs: parse the spec, render (on and off) and
make sure both ConfigMaps exist, plan over the cached nodes, hand the actions to the step runner, publish
status. Runs in a worker thread; everything it reads that the event loop changes comes in `PassInputs`."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from pydantic import ValidationError

from eventedpleg import constants as c
from eventedpleg.controller.metrics import OperatorMetrics
from eventedpleg.controller.nodecache import NodeCache
from eventedpleg.controller.nodeconfigstore import PassInputs, created
from eventedpleg.controller.publisher import STATUS_INTERVAL, StatusPublisher
from eventedpleg.controller.steps import StepRunner
from eventedpleg.core import render
from eventedpleg.core.agentoptions import AgentOptions
from eventedpleg.core.rollout import planner, retry, status
from eventedpleg.core.rollout.snapshot import Peer, Target
from eventedpleg.k8s import configmaps, nodeconfigs
from eventedpleg.k8s.errors import ApiError
from eventedpleg.k8s.events import ObjectRef
from eventedpleg.models.nodeconfig import NodeConfigSpec, NodeConfigStatus

Parsed = TypeVar("Parsed")
IDLE_RECHECK = 30.0  # seconds between passes when nothing happens (time-based gates: window, soak)
BUSY_RECHECK = 2.0  # while drains wait on PodDisruptionBudgets (kubectl retries every 5 s)


@dataclass
class Reconciler:
    api: Any  # kubernetes ApiClient (typed only inside eventedpleg.k8s)
    namespace: str
    metrics: OperatorMetrics
    nodes: NodeCache
    steps: StepRunner
    publisher: StatusPublisher
    clock: Callable[[], datetime]
    rendered: dict[tuple[bool, str, str], render.RenderedConfig] = field(default_factory=dict)
    # Per NodeConfig, for its rollout loop's passes only (one at a time): each node planned again only
    # when its view changed or its deadline passed (incremental planning).
    memos: dict[str, planner.PassMemo] = field(default_factory=dict)
    # Per NodeConfig: its spec and status as last parsed, with the very dicts they were parsed from. The
    # body is one object until the next watch event, so most passes parse nothing (pydantic validation
    # was a fifth of a pass's CPU).
    specs: dict[str, tuple[object, NodeConfigSpec]] = field(default_factory=dict)
    statuses: dict[str, tuple[object, NodeConfigStatus]] = field(default_factory=dict)

    def reconcile_once(self, inputs: PassInputs) -> float | None:
        """One pass; returns seconds until the next one (None: the NodeConfig is gone)."""
        body = inputs.body
        if body is None:
            try:
                body = nodeconfigs.get(self.api, inputs.name)
            except ApiError:
                self.memos.pop(inputs.name, None)
                self.specs.pop(inputs.name, None)
                self.statuses.pop(inputs.name, None)
                self.nodes.forget_reader(inputs.name)
                return None
        started = time.monotonic()
        memo = self.memos.setdefault(inputs.name, planner.PassMemo())
        result, _ = self._pass(body, inputs.peers, deleting=inputs.deleting, memo=memo)
        self.metrics.reconcile.observe(time.monotonic() - started)
        return result

    def acknowledge(self, inputs: PassInputs, waiting: str) -> None:
        """Before a pass can plan (`waiting`: why not): Reconciling for this generation, or InvalidSpec."""
        body = inputs.body
        if body is None:
            return
        name, ref = inputs.name, _ref(body)
        previous = self._previous_status(name, body)
        try:
            self._spec(name, body)
        except ValidationError as exc:
            self.publisher.invalid(ref, body, previous, exc, self.clock())
            return
        generation = int(body["metadata"].get("generation", 0))
        self.publisher.first(ref, generation, previous, self.clock(), waiting)

    def finalize(self, inputs: PassInputs) -> str:
        """One pass in deleting mode; "" once every node is let go, else what the deletion waits for."""
        body = inputs.body if inputs.body is not None else nodeconfigs.get(self.api, inputs.name)
        delay, summary = self._pass(body, inputs.peers, deleting=True)
        if delay == 0.0 and self.nodes.idle():
            return ""
        if summary is None:
            return "the spec is invalid; fix it or remove the finalizer"
        return status.deleting_text(summary) or "steps in flight"

    def _pass(
        self,
        body: Mapping[str, Any],
        peers: tuple[Peer, ...],
        *,
        deleting: bool,
        memo: planner.PassMemo | None = None,
    ) -> tuple[float, planner.Summary | None]:
        """One pass; with `memo`, planned incrementally on the nodes that changed since its last pass."""
        meta = body["metadata"]
        name, generation = str(meta["name"]), int(meta.get("generation", 0))
        ref = _ref(body)
        previous = self._previous_status(name, body)
        try:
            spec = self._spec(name, body)
        except ValidationError as exc:
            self.publisher.invalid(ref, body, previous, exc, self.clock())
            return IDLE_RECHECK, None
        now = self.clock()
        target = self._target(body, spec, peers, deleting=deleting)
        if memo is None:
            result = planner.plan(self.nodes.snapshot(), target, now)
        else:
            views, changed = self.nodes.changes(name)
            result = planner.plan(views, target, now, memo, changed)
        self.steps.submit(result.actions, ref, spec)
        new_status = status.build_status(
            result.summary,
            enabled=spec.evented_pleg and not target.reverting,
            deleting=deleting,
            generation=generation,
            previous=previous.conditions,
            now=now,
            held_since=previous.budget_held_since,
            stall_after=timedelta(seconds=spec.rollout.stall_after_seconds),
        )
        dirty = self.publisher.publish(ref, previous, new_status, result.summary)
        return _next_pass(result, now, deleting=deleting, dirty=dirty), result.summary

    def _spec(self, name: str, body: Mapping[str, Any]) -> NodeConfigSpec:
        return _parsed_once(self.specs, name, body.get("spec"), NodeConfigSpec.model_validate)

    def _previous_status(self, name: str, body: Mapping[str, Any]) -> NodeConfigStatus:
        return _parsed_once(self.statuses, name, body.get("status"), _previous_status)

    def _target(
        self, body: Mapping[str, Any], spec: NodeConfigSpec, peers: tuple[Peer, ...], *, deleting: bool
    ) -> Target:
        name = str(body["metadata"]["name"])
        mode = spec.kubelet_config.value
        on, off = self._render(spec.evented_pleg, name, mode), self._render(False, name, mode)
        return Target(
            name=name,
            spec=spec,
            created=created(body),
            generation=int(body["metadata"].get("generation", 0)),
            hash_on=on.hash,
            hash_off=off.hash,
            agent_options=AgentOptions.from_spec(spec).to_json(),
            deleting=deleting,
            peers=peers,
            retry=retry.parse((body["metadata"].get("annotations") or {}).get(c.ANN_RETRY)),
        )

    def _render(self, enabled: bool, owner: str, mode: str) -> render.RenderedConfig:
        """Rendered once per (enabled, owner, mode), and its ConfigMap created once."""
        key = (enabled, owner, mode)
        if key not in self.rendered:
            rendered = render.render(enabled=enabled, owner=owner, kubelet_config_mode=mode)
            configmaps.ensure(self.api, self.namespace, rendered)
            self.rendered[key] = rendered
        return self.rendered[key]


def _ref(body: Mapping[str, Any]) -> ObjectRef:
    meta = body["metadata"]
    return ObjectRef(c.KIND, str(meta["name"]), f"{c.GROUP}/{c.VERSION}", str(meta.get("uid", "")))


def _next_pass(result: planner.Plan, now: datetime, *, deleting: bool, dirty: bool) -> float:
    """Seconds until the next pass (0.0 while deleting: every node is let go)."""
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


def _parsed_once(
    cache: dict[str, tuple[object, Parsed]], name: str, raw: object, parse: Callable[[Any], Parsed]
) -> Parsed:
    """`parse(raw or {})`, kept with the very object it came from: parsed again only when `raw` is another
    object (a new watch event)."""
    kept = cache.get(name)
    if kept is None or kept[0] is not raw:
        kept = cache[name] = (raw, parse(raw or {}))
    return kept[1]


def _previous_status(raw: Mapping[str, Any]) -> NodeConfigStatus:
    try:
        return NodeConfigStatus.model_validate(raw)
    except ValidationError:
        return NodeConfigStatus()
