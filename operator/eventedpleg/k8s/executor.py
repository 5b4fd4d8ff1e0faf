"""Carry out planner actions against the API: one action, one or two node writes, an Event.

Every node write is a merge patch that carries the resourceVersion the planner saw (or the one returned
by the previous write of the same step); a 409 means the node moved on, and the action is dropped: the
next pass plans again from fresh data. That, plus idempotent steps, is what lets a killed operator resume.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from kubernetes import client

from eventedpleg import constants as c
from eventedpleg.constants import NodeState
from eventedpleg.core.actions import Action, Cordon, Drain, MarkFailed, Release, SetAgentOptions, Uncordon
from eventedpleg.core.snapshot import NodeView, node_view
from eventedpleg.k8s import drain as drainer
from eventedpleg.k8s.errors import ApiError, Conflict, NotFound
from eventedpleg.k8s.events import EventRecorder, ObjectRef, node_ref
from eventedpleg.k8s.nodes import get_node, node_patch, patch_node
from eventedpleg.models.nodeconfig import OnDrainTimeout

log = logging.getLogger(__name__)
CONFLICT_RETRIES = 4


def relied_on(view: NodeView) -> tuple[object, ...]:
    """What a rollout step depends on: our annotations, the cordon, the labels (not status)."""
    return (view.marks, view.unschedulable, tuple(sorted(view.labels.items())))


OUR_ANNOTATIONS = (
    c.ANN_OWNER,
    c.ANN_DESIRED,
    c.ANN_CURRENT,
    c.ANN_STATE,
    c.ANN_STATE_SINCE,
    c.ANN_REASON,
    c.ANN_EVIDENCE,
    c.ANN_CORDONED_BY_US,
    c.ANN_WAS_UNSCHEDULABLE,
    c.ANN_AGENT_OPTIONS,
    c.ANN_BENEFIT,
)


@dataclass(frozen=True)
class Outcome:
    action: Action
    applied: bool  # False: conflict or error, nothing (more) was written
    transition: str = ""  # the node state written, if any
    error: str = ""
    drain_retry: bool = False
    node_body: dict[str, Any] | None = None  # the node after our last write: the cache takes it at once


@dataclass(frozen=True)
class DrainSettings:
    grace_period_seconds: int
    delete_empty_dir_data: bool
    force: bool
    # Whether this installation grants `pods delete` (chart value drain.allowForceDelete). Without it,
    # onTimeout: ForceDelete fails the node with a message that says so, instead of a 403 on every retry.
    allow_force_delete: bool = False


FORCE_DELETE_DISABLED = (
    "onTimeout: ForceDelete is not enabled in this installation "
    "(Helm value drain.allowForceDelete=true grants the operator pods delete)"
)


class Executor:
    def __init__(
        self,
        api: client.ApiClient,
        recorder: EventRecorder,
        *,
        nodeconfig: ObjectRef,
        drain: DrainSettings,
        clock: Callable[[], datetime],
    ) -> None:
        self.api, self.recorder, self.nodeconfig = api, recorder, nodeconfig
        self.drain_options = drainer.DrainOptions(
            drain.grace_period_seconds, drain.delete_empty_dir_data, drain.force
        )
        self.allow_force_delete = drain.allow_force_delete
        self.clock = clock
        # (node, resourceVersion) -> what a step relies on at that version (see _patch).
        self._relied: dict[tuple[str, str], tuple[object, ...]] = {}

    def apply(self, action: Action, basis: NodeView | None = None) -> Outcome:
        """Carry out one step. `basis` is the node as the planner saw it: when a write hits 409 only
        because something we do not rely on moved (a status heartbeat), the write is retried."""
        if basis is not None:
            self._relied[(action.node, action.resource_version)] = relied_on(basis)
        try:
            return self._apply(action)
        except Conflict:
            return Outcome(action, applied=False, error="conflict")
        except NotFound:
            return Outcome(action, applied=False, error="node not found")
        except ApiError as exc:
            log.warning("step %s on %s failed: %s", type(action).__name__, action.node, exc)
            return Outcome(action, applied=False, error=str(exc))

    # -- helpers ---------------------------------------------------------------------------------------

    def _state(self, state: NodeState, reason: str = "") -> dict[str, str | None]:
        return {
            c.ANN_STATE: state.value,
            c.ANN_STATE_SINCE: self.clock().isoformat(timespec="seconds"),
            c.ANN_REASON: reason,
        }

    def _patch(
        self,
        node: str,
        rv: str,
        annotations: Mapping[str, str | None],
        unschedulable: bool | None = None,
    ) -> dict[str, Any]:
        """A merge patch conditional on `rv`. On 409, if what the step relies on (our annotations, the
        cordon, the labels) is unchanged at the new version, the same write is retried at that version:
        kubelets and kwok bump a Node's resourceVersion with every status heartbeat."""
        for _ in range(CONFLICT_RETRIES):
            try:
                body = patch_node(
                    self.api,
                    node,
                    node_patch(annotations=annotations, unschedulable=unschedulable, resource_version=rv),
                )
            except Conflict:
                relied = self._relied.get((node, rv))
                fresh = node_view(get_node(self.api, node))
                if relied is None or relied_on(fresh) != relied:
                    raise  # something we rely on changed: the next pass plans again
                rv = fresh.resource_version
                self._relied[(node, rv)] = relied
                continue
            self._relied[(node, str(body["metadata"]["resourceVersion"]))] = relied_on(node_view(body))
            return body
        raise Conflict(409, "Conflict", f"node {node} kept changing")

    def _event(self, node: str, kind: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        self.recorder.emit(node_ref(node), kind, reason, message)

    # -- actions ---------------------------------------------------------------------------------------

    def _apply(self, action: Action) -> Outcome:
        match action:
            case Cordon():
                return self._cordon(action)
            case Drain():
                return self._drain(action)
            case Uncordon():
                body = self._patch(
                    action.node,
                    action.resource_version,
                    {c.ANN_CORDONED_BY_US: None},
                    action.was_unschedulable,
                )
                keep = (
                    " (kept cordoned: it was cordoned before the rollout)" if action.was_unschedulable else ""
                )
                self._event(action.node, "Normal", "Uncordoned", f"node given back{keep}")
                return Outcome(action, applied=True, node_body=body)
            case MarkFailed():
                marks = self._state(NodeState.FAILED, action.reason)
                body = self._patch(action.node, action.resource_version, marks)
                self._event(action.node, "Warning", "NodeFailed", action.reason)
                return Outcome(action, applied=True, transition=NodeState.FAILED, node_body=body)
            case Release():
                drop: dict[str, str | None] = {
                    key: None for key in OUR_ANNOTATIONS if not (action.keep_current and key == c.ANN_CURRENT)
                }
                unschedulable = action.was_unschedulable if action.uncordon else None
                body = self._patch(action.node, action.resource_version, drop, unschedulable)
                self._event(
                    action.node,
                    "Normal",
                    "Released",
                    f"no longer managed by NodeConfig {self.nodeconfig.name}",
                )
                return Outcome(action, applied=True, node_body=body)
            case SetAgentOptions():
                marks = {c.ANN_AGENT_OPTIONS: action.agent_options}
                body = self._patch(action.node, action.resource_version, marks)
                return Outcome(action, applied=True, node_body=body)
        raise AssertionError(f"unknown action {action!r}")

    def _cordon(self, action: Cordon) -> Outcome:
        """Cordon, then the first drain attempt in the same step (kubectl drain's order: cordon, list, evict).

        An empty node goes straight to Applying: one pass and one write fewer per node than separate steps.
        """
        marks = {
            c.ANN_OWNER: action.owner,
            c.ANN_WAS_UNSCHEDULABLE: str(action.was_unschedulable).lower(),
            c.ANN_CORDONED_BY_US: "true",
            **self._state(NodeState.DRAINING, "evicting pods"),
        }
        body = self._patch(action.node, action.resource_version, marks, unschedulable=True)
        rv = str(body["metadata"]["resourceVersion"])
        pods = drainer.node_pods(self.api, action.node)
        mirror = drainer.mirror_pods_in(pods)
        if mirror and not action.include_control_plane:
            reason = (
                f"runs static pods ({', '.join(mirror[:3])}): EventedPLEG starts duplicate containers "
                "for them (k8s#121349, #123087); set includeControlPlane: true to opt in"
            )
            skip = {
                c.ANN_DESIRED: action.hash,
                c.ANN_CORDONED_BY_US: None,
                **self._state(NodeState.SKIPPED, reason),
            }
            body = self._patch(action.node, rv, skip, unschedulable=action.was_unschedulable)
            self._event(action.node, "Warning", "Skipped", reason)
            return Outcome(action, applied=True, transition=NodeState.SKIPPED, node_body=body)
        result = drainer.attempt(self.api, action.node, self.drain_options, pods=pods)
        if result.done:
            body = self._request_apply(action.node, rv, action.hash, action.agent_options, cordoned=True)
            return Outcome(action, applied=True, transition=NodeState.APPLYING, node_body=body)
        body = self._patch(action.node, rv, {c.ANN_REASON: result.waiting})
        self._event(
            action.node, "Normal", "Draining", f"cordoned; {result.waiting} (PodDisruptionBudgets respected)"
        )
        return Outcome(action, applied=True, transition=NodeState.DRAINING, drain_retry=True, node_body=body)

    def _request_apply(
        self, node: str, rv: str, hash_: str, options: str, *, cordoned: bool
    ) -> dict[str, Any]:
        marks = {
            c.ANN_DESIRED: hash_,
            c.ANN_AGENT_OPTIONS: options,
            **self._state(NodeState.APPLYING, "drained; waiting for the agent"),
        }
        body = self._patch(node, rv, marks)
        what = "cordoned and drained" if cordoned else "drained"
        self._event(node, "Normal", "Drained", f"{what}; agent asked to apply config {hash_}")
        return body

    def _drain(self, action: Drain) -> Outcome:
        rv = action.resource_version
        force = (
            action.deadline_reached
            and action.on_timeout is OnDrainTimeout.FORCE_DELETE
            and self.allow_force_delete
        )
        result = drainer.attempt(self.api, action.node, self.drain_options, force_delete=force)
        if result.done:
            applied = self._request_apply(
                action.node, rv, action.hash, action.agent_options, cordoned=action.starting
            )
            return Outcome(action, applied=True, transition=NodeState.APPLYING, node_body=applied)
        if action.deadline_reached and not force:
            return self._drain_timed_out(action, rv, result.waiting)
        body: dict[str, Any] | None = None
        if result.waiting != action.reason or action.starting:
            # Name what blocks the drain on the node (and so in status); written only when it changes.
            marks: dict[str, str | None] = {c.ANN_REASON: result.waiting}
            if action.starting:  # a node a previous operator cordoned (state Cordoned) but did not drain
                marks = {**self._state(NodeState.DRAINING, result.waiting)}
            body = self._patch(action.node, rv, marks)
            if any(word in result.waiting for word in ("refused", "no controller", "emptyDir")):
                self._event(action.node, "Warning", "DrainBlocked", result.waiting)
        return Outcome(action, applied=True, drain_retry=True, node_body=body)

    def _drain_timed_out(self, action: Drain, rv: str, waiting: str) -> Outcome:
        failed = action.on_timeout is not OnDrainTimeout.SKIP
        state = NodeState.FAILED if failed else NodeState.SKIPPED
        reason = f"drain did not finish within {action.timeout_seconds}s: {waiting}"
        if action.on_timeout is OnDrainTimeout.FORCE_DELETE:  # reached only when not allowed
            reason += f"; {FORCE_DELETE_DISABLED}"
        # Give the node back: a timed-out drain must never leave our cordon behind.
        marks = {c.ANN_DESIRED: action.hash, c.ANN_CORDONED_BY_US: None, **self._state(state, reason)}
        body = self._patch(action.node, rv, marks, unschedulable=action.was_unschedulable)
        self._event(action.node, "Warning", "DrainTimeout", reason)
        return Outcome(action, applied=True, transition=state, node_body=body)
