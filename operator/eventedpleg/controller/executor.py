"""Carry out planner actions against the API: the step policy (core.rollout.steps) decides the
writes and the Event; this module answers its requests -- node patches, pod lists, drain attempts, Events.

Every node write is a merge patch that carries the resourceVersion the planner saw (or the one returned
by the previous write of the same step); a 409 means the node moved on, and the action is dropped: the
next pass plans again from fresh data. That, plus idempotent steps, is what lets a killed operator resume.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from eventedpleg.core.rollout import steps
from eventedpleg.core.rollout.actions import Action, Cordon, Drain
from eventedpleg.core.rollout.drain.budgets import Elsewhere
from eventedpleg.core.rollout.drain.placement import Destination, destination_of
from eventedpleg.core.rollout.drain.pods import DrainResult
from eventedpleg.core.rollout.drain.policy import DrainPolicy
from eventedpleg.core.rollout.drain.survey import PodSurvey, survey
from eventedpleg.core.rollout.snapshot import NodeView, node_view
from eventedpleg.core.rollout.steps import AttemptDrain, Emit, Write
from eventedpleg.k8s import drain as drainer
from eventedpleg.k8s.errors import ApiError, Conflict, NotFound
from eventedpleg.k8s.events import EventRecorder, node_ref
from eventedpleg.k8s.nodes import get_node, patch_node, write_patch
from eventedpleg.logfields import fields

log = logging.getLogger(__name__)
CONFLICT_RETRIES = 4


def relied_on(view: NodeView) -> tuple[object, ...]:
    """What a rollout step depends on: our annotations, the cordon, the labels, which autoscaler keys are
    set (a Cordon keeps the user's), not status; last, the taints, which only a write of them relies on
    (see `patch`)."""
    return (
        view.marks,
        view.unschedulable,
        tuple(sorted(view.labels.items())),
        tuple(sorted(view.autoscaler_present)),
        view.taints,
    )


@dataclass(frozen=True)
class StepResult:
    action: Action
    applied: bool  # False: conflict or error, nothing (more) was written
    transition: str = ""  # the node state written, if any
    error: str = ""
    drain_retry: bool = False
    node: NodeView | None = None  # the node after our last write: the cache takes it at once


class Executor:
    """One per operator: what differs between NodeConfigs (their name, their drain policy) comes with
    each step, and what a step relies on lives only as long as the step, so pool threads share it."""

    def __init__(
        self,
        api: Any,  # kubernetes ApiClient (typed only inside eventedpleg.k8s)
        recorder: EventRecorder,
        *,
        clock: Callable[[], datetime],
        # Whether this installation grants `pods delete` (chart value drain.allowForceDelete). Without it,
        # onTimeout: ForceDelete fails the node with a message that says so, instead of a 403 on every retry.
        allow_force_delete: bool = False,
        # The nodes as the node cache has them: where the pods a drain evicts could go (None: not known,
        # then only Pending pods say that their replacements cannot become healthy).
        nodes: Callable[[], Iterable[NodeView]] | None = None,
    ) -> None:
        self.api, self.recorder = api, recorder
        self.allow_force_delete = allow_force_delete
        self.clock = clock
        self.nodes = nodes

    def apply(
        self,
        action: Action,
        basis: NodeView | None = None,
        *,
        nodeconfig: str,
    ) -> StepResult:
        """Carry out one step for `nodeconfig`. `basis` is the node as the planner saw it: when a write hits
        409 only because something we do not rely on moved (a status heartbeat), the write is retried."""
        # resourceVersion -> what the step relies on at that version (see patch)
        relied = {} if basis is None else {action.resource_version: relied_on(basis)}
        try:
            return self._apply(action, nodeconfig, relied, "" if basis is None else basis.uid)
        except Conflict:
            return StepResult(action, applied=False, error="conflict")
        except NotFound:
            return StepResult(action, applied=False, error="node not found")
        except ApiError as exc:
            step = type(action).__name__
            said = fields(node=action.node, nodeconfig=nodeconfig, phase=step)
            log.warning("step %s on %s failed: %s", step, action.node, exc, extra=said)
            return StepResult(action, applied=False, error=str(exc))

    def patch(
        self,
        node: str,
        rv: str,
        request: Write,
        relied: dict[str, tuple[object, ...]],
    ) -> NodeView:
        """A merge patch conditional on `rv`; returns the node as the write left it. On 409, if what the
        step relies on (our annotations, the cordon, the labels) is unchanged at the new version, the same
        write is retried at that version: kubelets and kwok bump a Node's resourceVersion with every status
        heartbeat. Only a write of spec.taints (it gives the whole list back) relies on the taints: the node
        lifecycle controller adds and removes node.kubernetes.io/unschedulable right after our cordon and
        uncordon."""
        upto = None if request.taints is not None else -1  # relied_on's taints are its last part
        for _ in range(CONFLICT_RETRIES):
            try:
                body = patch_node(
                    self.api,
                    node,
                    write_patch(request, rv),
                )
            except Conflict:
                before = relied.get(rv)
                fresh = node_view(get_node(self.api, node))
                if before is None or relied_on(fresh)[:upto] != before[:upto]:
                    raise  # something we rely on changed: the next pass plans again
                rv = fresh.resource_version
                relied[rv] = before
                continue
            written = node_view(body)  # read once: for what the step relies on, and for the cache
            relied[written.resource_version] = relied_on(written)
            return written
        raise Conflict(409, "Conflict", f"node {node} kept changing")

    def _apply(
        self,
        action: Action,
        nodeconfig: str,
        relied: dict[str, tuple[object, ...]],
        uid: str,
    ) -> StepResult:
        """Run the step policy against the API; an ApiError (409 included) ends the step there."""
        step = steps.step(
            action,
            clock=self.clock,
            nodeconfig=nodeconfig,
            allow_force_delete=self.allow_force_delete,
        )
        drain = action.drain if isinstance(action, Cordon | Drain) else None
        answers = _ApiAnswers(self, action.node, action.resource_version, drain, relied, uid)
        end = steps.run(step, answers)
        return StepResult(
            action,
            applied=True,
            transition=end.transition or "",
            drain_retry=end.drain_retry,
            node=answers.written,
        )


class _ApiAnswers:
    """A step's requests answered from the API, for one step on one node."""

    def __init__(
        self,
        executor: Executor,
        node: str,
        rv: str,
        drain: DrainPolicy | None,  # the Cordon's or Drain's: only they survey and drain
        relied: dict[str, tuple[object, ...]],
        uid: str,  # the node's uid: its Events must carry it to show in `kubectl describe node`
    ) -> None:
        self.executor, self.api, self.node, self.rv = executor, executor.api, node, rv
        self.drain, self.relied, self.uid = drain, relied, uid
        self.written: NodeView | None = None  # the node after the step's last write
        self.pods: list[dict[str, Any]] | None = None  # listed for the static-pod check, reused by the drain
        self._namespaces: dict[str, dict[str, str]] | None = None  # read once per step, if a rule needs them

    def write(self, request: Write) -> None:
        self.written = self.executor.patch(self.node, self.rv, request, self.relied)
        self.rv = self.written.resource_version
        self.uid = self.written.uid or self.uid

    def _policy(self) -> DrainPolicy:
        if self.drain is None:
            raise TypeError("only a Cordon or a Drain step surveys or drains pods")
        return self.drain

    def _namespace_labels(self) -> dict[str, dict[str, str]]:
        """The Namespaces' labels for drain.rules' namespaceSelector: listed at most once per step, and
        only when a rule has one (drainer.namespace_labels asks nothing otherwise)."""
        if self._namespaces is None:
            self._namespaces = drainer.namespace_labels(self.api, self._policy())
        return self._namespaces

    def survey_pods(self) -> PodSurvey:  # before the cordon: never reused by a drain attempt
        pods, policy = drainer.node_pods(self.api, self.node), self._policy()
        return survey(
            pods,
            policy,
            now=self.executor.clock(),
            pdbs=lambda namespaces: drainer.pdbs_in(self.api, namespaces),
            maintenance=drainer.maintenance_of(self.api, self.node),
            namespaces=self._namespace_labels(),
            elsewhere=Elsewhere(self._elsewhere(), lambda names: drainer.pending_in(self.api, names)),
        )

    def _elsewhere(self) -> Callable[[], Iterable[Destination]] | None:
        """The nodes but this one, from the node cache (read only when a budget is short, see budgets)."""
        nodes = self.executor.nodes
        if nodes is None:
            return None
        return lambda: [destination_of(view) for view in nodes() if view.name != self.node]

    def find_mirror_pods(self) -> tuple[str, ...]:
        self.pods = drainer.node_pods(self.api, self.node)
        return drainer.mirror_pods_in(self.pods)

    def attempt_drain(self, request: AttemptDrain) -> DrainResult:
        pods, self.pods = self.pods, None
        return drainer.attempt(
            self.api,
            self.node,
            self._policy(),
            now=self.executor.clock(),
            force_delete=request.force_delete,
            pods=pods,
            namespaces=self._namespace_labels(),
        )

    def emit(self, request: Emit) -> None:
        self.executor.recorder.emit(
            node_ref(self.node, self.uid), request.kind, request.reason, request.message
        )
