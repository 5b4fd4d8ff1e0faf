"""The composition root: the rollout engine and its parts, each given what it works with when it is made.
The one place where the clock, the leader's step gate and the API client reach the parts that use them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from eventedpleg.controller.configstate import ConfigStates
from eventedpleg.controller.engine import RolloutEngine
from eventedpleg.controller.executor import Executor
from eventedpleg.controller.metrics import OperatorMetrics
from eventedpleg.controller.nodecache import NodeCache
from eventedpleg.controller.nodeconfigstore import NodeConfigStore
from eventedpleg.controller.publisher import StatusPublisher
from eventedpleg.controller.reconciler import Reconciler
from eventedpleg.controller.steprunner import StepRunner
from eventedpleg.controller.wakeups import WakeUps
from eventedpleg.core.health import Heartbeats
from eventedpleg.k8s import workloads
from eventedpleg.k8s.events import EventRecorder
from eventedpleg.models.nodeconfig import HealthGate


def wall_clock() -> datetime:
    return datetime.now(UTC)


def always() -> bool:
    return True


def build_engine(
    api: Any,  # kubernetes ApiClient (typed only inside eventedpleg.k8s)
    namespace: str,
    recorder: EventRecorder,
    metrics: OperatorMetrics,
    *,
    clock: Callable[[], datetime] = wall_clock,  # every timestamp the operator writes (status, steps)
    beats: Heartbeats | None = None,
    may_start: Callable[[], bool] = always,  # leader election: False stops every new step
    allow_force_delete: bool = False,  # the chart grants `pods delete` (drain.allowForceDelete)
    list_namespaces: bool = True,  # the chart grants `namespaces list` (drain.listNamespaces)
    # (api, gate, nodes) -> the gate's pods not Ready on those nodes (spec.rollout.healthGate)
    pods: Callable[[Any, HealthGate, Sequence[str]], Mapping[str, tuple[str, ...]]] = workloads.not_ready,
) -> RolloutEngine:
    nodes = NodeCache()
    states = ConfigStates(metrics, nodes)
    wakeups = WakeUps()
    steps = StepRunner(
        Executor(api, recorder, clock=clock, allow_force_delete=allow_force_delete, nodes=nodes.snapshot),
        metrics,
        nodes,
        settled=wakeups.wake_from_thread,
        may_start=may_start,
    )
    reconciler = Reconciler(
        api,
        namespace,
        metrics,
        nodes,
        steps,
        StatusPublisher(api, recorder, clock),
        clock,
        states,
        pods=pods,
        list_namespaces=list_namespaces,
    )
    return RolloutEngine(nodes, NodeConfigStore(), states, steps, reconciler, wakeups, beats=beats)
