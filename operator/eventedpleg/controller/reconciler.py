"""One reconcile pass over one NodeConfig, from immutable inputs: the NodeConfig's view (validated once per
event, nodeconfigview), then each read the target needs as its own step (render on and off and make sure
both ConfigMaps exist, the alert gate's answer, the health gate's pods), the target built from them (pure),
plan over the cached nodes, hand the actions to the step runner, publish status. Runs in a worker thread;
everything it reads that the event loop changes comes in `PassInputs`."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from eventedpleg import alertsource
from eventedpleg.controller.configstate import ConfigState, ConfigStates
from eventedpleg.controller.metrics import OperatorMetrics
from eventedpleg.controller.nodecache import NodeCache
from eventedpleg.controller.nodeconfigstore import PassInputs
from eventedpleg.controller.nodeconfigview import InvalidSpec, NodeConfigView, view_of
from eventedpleg.controller.publisher import STATUS_INTERVAL, StatusPublisher
from eventedpleg.controller.steprunner import StepRunner
from eventedpleg.core import render
from eventedpleg.core.agentoptions import AgentOptions
from eventedpleg.core.rollout import planner, status
from eventedpleg.core.rollout.drain.rules import reads_namespaces
from eventedpleg.core.rollout.snapshot import Peer, Target
from eventedpleg.k8s import configmaps, nodeconfigs, workloads
from eventedpleg.k8s.errors import ApiError
from eventedpleg.logfields import fields
from eventedpleg.models.nodeconfig import HealthGate, NodeConfigSpec

log = logging.getLogger(__name__)
IDLE_RECHECK = 30.0  # seconds between passes when nothing happens (time-based gates: window, soak)
BUSY_RECHECK = 2.0  # while drains wait on PodDisruptionBudgets (kubectl retries every 5 s)
# A NodeConfig refused where the operator may not list Namespaces (the chart's drain.listNamespaces off).
NAMESPACES_NOT_GRANTED = (
    "drain.rules[].namespaceSelector needs the operator to list Namespaces, which this installation does "
    "not grant (chart value drain.listNamespaces)"
)
ALERTS_TTL = 10.0  # seconds an alert gate's answer is used before Prometheus is asked again
Rendered = tuple[render.RenderedConfig, render.RenderedConfig]  # (on, off)


@dataclass
class Reconciler:
    api: Any  # kubernetes ApiClient (typed only inside eventedpleg.k8s)
    namespace: str
    metrics: OperatorMetrics
    nodes: NodeCache
    steps: StepRunner
    publisher: StatusPublisher
    clock: Callable[[], datetime]
    states: ConfigStates  # what is kept per NodeConfig between passes
    alerts: Callable[[str, str], str] = alertsource.holding  # (url, pattern) -> why the alert gate holds
    # (api, gate, nodes) -> the gate's pods not Ready on those nodes (spec.rollout.healthGate)
    pods: Callable[[Any, HealthGate, Sequence[str]], Mapping[str, tuple[str, ...]]] = workloads.not_ready
    list_namespaces: bool = True  # RBAC grants `namespaces list` (chart value drain.listNamespaces)
    _asked: dict[tuple[str, str], tuple[float, str]] = field(default_factory=dict)

    def _read_alert_gate(self, spec: NodeConfigSpec) -> str:
        """spec.rollout.alertGate's answer, asked at most every ALERTS_TTL seconds per (url, pattern)."""
        gate = spec.rollout.alert_gate
        if not gate.prometheus_url:
            return ""
        key, now = (gate.prometheus_url, gate.alert_name_regexp), time.monotonic()
        asked = self._asked.get(key)
        if asked is None or now - asked[0] >= ALERTS_TTL:
            asked = self._asked[key] = (now, self.alerts(*key))
        return asked[1]

    def _read_health_gate(
        self, state: ConfigState, spec: NodeConfigSpec, deleting: bool
    ) -> Mapping[str, tuple[str, ...]]:
        """spec.rollout.healthGate's pods on the nodes the last pass asked about, read now. An answer that
        cannot be read leaves them unread: not taken (fail closed), asked for again."""
        gate = spec.rollout.health_gate
        if not gate.enabled or deleting or not state.health_watch:
            return {}
        try:
            return self.pods(self.api, gate, state.health_watch)
        except ApiError as exc:
            said = fields(nodeconfig=state.name)
            what = "the pods of rollout.healthGate"
            log.warning("could not read %s of %s: %s", what, state.name, exc, extra=said)
            return {}

    def reconcile_once(self, inputs: PassInputs) -> float | None:
        """One pass; returns seconds until the next one (None: the NodeConfig is gone)."""
        try:
            nodeconfig = self._nodeconfig(inputs)
        except ApiError:
            self.states.close(inputs.name)
            return None
        started = time.monotonic()
        state = self.states.get(inputs.name)
        result, _ = self._pass(state, nodeconfig, inputs.peers, deleting=inputs.deleting)
        self.metrics.reconcile.observe(time.monotonic() - started)
        return result

    def acknowledge(self, inputs: PassInputs, waiting: str) -> None:
        """Before a pass can plan (`waiting`: why not): Reconciling for this generation, or InvalidSpec.
        A NodeConfig the watch has not delivered yet is not read: the pass will."""
        if inputs.nodeconfig is None:
            return
        state, spec = self.states.get(inputs.name), inputs.nodeconfig.spec
        if isinstance(spec, InvalidSpec):
            self.publisher.invalid(state, inputs.nodeconfig, spec)
            return
        self.publisher.first(state, inputs.nodeconfig, waiting)

    def finalize(self, inputs: PassInputs) -> str:
        """One pass in deleting mode; "" once every node is let go, else what the deletion waits for."""
        nodeconfig = self._nodeconfig(inputs)
        state = self.states.get(inputs.name)
        delay, summary = self._pass(state, nodeconfig, inputs.peers, deleting=True, incremental=False)
        # No node is ours any more in the cache (which holds a step's write as soon as it lands, and a
        # cordon in flight as assumed): done. Steps on other nodes (another NodeConfig's, or one that hangs)
        # are no reason to wait, and none is kept across a change of leader.
        if delay == 0.0:
            return ""
        if summary is None:
            return "the spec is invalid; fix it or remove the finalizer"
        return status.deleting_text(summary) or "the nodes' last writes to land"

    def _nodeconfig(self, inputs: PassInputs) -> NodeConfigView:
        """The view the watch delivered; one it has not delivered yet is read now (an ApiError when gone)."""
        if inputs.nodeconfig is not None:
            return inputs.nodeconfig
        return view_of(nodeconfigs.get(self.api, inputs.name))

    def _pass(
        self,
        state: ConfigState,
        nodeconfig: NodeConfigView,
        peers: tuple[Peer, ...],
        *,
        deleting: bool,
        incremental: bool = True,
    ) -> tuple[float | None, planner.Summary | None]:
        """One pass; `incremental`: planned on the nodes that changed since the rollout loop's last pass
        (state.memo). (None, None) when the state was closed: the NodeConfig is gone."""
        spec, previous = granted(nodeconfig.spec, list_namespaces=self.list_namespaces), nodeconfig.status
        if isinstance(spec, InvalidSpec):
            self.publisher.invalid(state, nodeconfig, spec)
            return IDLE_RECHECK, None
        now = self.clock()
        # What the target needs from outside, each read by its own step; then the target, built from them.
        rendered = self._ensure_configmaps(state, spec)
        alerts = self._read_alert_gate(spec)
        health = self._read_health_gate(state, spec, deleting)
        target = build_target(
            nodeconfig, spec, peers, rendered=rendered, alerts=alerts, health=health, deleting=deleting
        )
        if not incremental:
            views, changed = self.nodes.snapshot(), None
            result = planner.plan(views, target, now)
        else:
            seen = state.changes()
            if seen is None:
                return None, None
            views, changed = seen
            result = planner.plan(views, target, now, state.memo, changed)
        state.record_held(views, changed, now)
        state.health_watch = result.summary.health_watch
        self.steps.submit(result.actions, state)
        new_status = status.build_status(
            result.summary,
            enabled=spec.evented_pleg and not target.reverting,
            deleting=deleting,
            generation=nodeconfig.generation,
            previous=previous.conditions,
            now=now,
            held_since=previous.budget_held_since,
            stall_after=timedelta(seconds=spec.rollout.stall_after_seconds),
        )
        dirty = self.publisher.publish(state, nodeconfig.ref, previous, new_status, result.summary)
        return _next_pass(result, now, deleting=deleting, dirty=dirty), result.summary

    def _ensure_configmaps(self, state: ConfigState, spec: NodeConfigSpec) -> Rendered:
        """The configs the spec renders to, on and off, each rendered and its ConfigMap created once per
        NodeConfig and (enabled, mode)."""
        mode = spec.kubelet_config.value
        return self._render(state, spec.evented_pleg, mode), self._render(state, False, mode)

    def _render(self, state: ConfigState, enabled: bool, mode: str) -> render.RenderedConfig:
        key = (enabled, mode)
        if key not in state.rendered:
            rendered = render.render(enabled=enabled, owner=state.name, kubelet_config_mode=mode)
            configmaps.ensure(self.api, self.namespace, rendered)
            state.rendered[key] = rendered
        return state.rendered[key]


def build_target(
    nodeconfig: NodeConfigView,
    spec: NodeConfigSpec,  # nodeconfig.spec, known valid
    peers: tuple[Peer, ...],
    *,
    rendered: Rendered,
    alerts: str,
    health: Mapping[str, tuple[str, ...]],
    deleting: bool,
) -> Target:
    """What a pass plans towards, from the NodeConfig and what the pass's reads returned (pure)."""
    on, off = rendered
    return Target(
        name=nodeconfig.name,
        spec=spec,
        created=nodeconfig.created,
        generation=nodeconfig.generation,
        hash_on=on.hash,
        hash_off=off.hash,
        agent_options=AgentOptions.from_spec(spec).to_json(),
        deleting=deleting,
        peers=peers,
        retry=nodeconfig.retry,
        approved=nodeconfig.approved,
        alerts=alerts,
        health=health,
    )


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


def granted(spec: NodeConfigSpec | InvalidSpec, *, list_namespaces: bool) -> NodeConfigSpec | InvalidSpec:
    """`spec`, or InvalidSpec when it needs an access this installation does not grant: refused in its
    status before any node is taken, rather than a drain that fails on every pass."""
    if isinstance(spec, NodeConfigSpec) and not list_namespaces and reads_namespaces(spec.drain.rules):
        return InvalidSpec(NAMESPACES_NOT_GRANTED)
    return spec
