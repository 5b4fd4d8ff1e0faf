"""Whether a pod could be placed on a node, as far as the scheduler's label and taint filters say, and
whether a Pending pod has been found unschedulable. Pure, over pods as API dicts and nodes as `Destination`.

Resources are not looked at: a node these filters let through may still be full, so this only ever finds
that a pod can NOT be placed. The filters, as kube-scheduler applies them (k8s.io/kubernetes
pkg/scheduler/framework/plugins): NodeUnschedulable (spec.unschedulable), TaintToleration (a NoSchedule or
NoExecute taint the pod does not tolerate; k8s.io/api core/v1 toleration.go `ToleratesTaint`: an empty
effect tolerates every effect, `Exists` with an empty key every taint, `Equal` needs the same value),
NodeAffinity (spec.nodeSelector, every label equal, and the required node affinity's terms, ORed, each
term's expressions ANDed: k8s.io/component-helpers scheduling/corev1/nodeaffinity). A Pending pod is
unschedulable when its PodScheduled condition is False with reason Unschedulable (the scheduler's
`v1.PodReasonUnschedulable`).

A node the rollout itself has taken (`returning`) is back in service once it is done: its cordon and the
NotReady of its kubelet restart do not count against it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from eventedpleg.core.rollout.drain.taints import Taint
from eventedpleg.core.rollout.snapshot import NodeView
from eventedpleg.protocol import IN_PROGRESS

REPELS = frozenset({"NoSchedule", "NoExecute"})
# Taints the node lifecycle controller mirrors from spec.unschedulable and the Ready condition: judged by
# those fields here, so that a node we took is not judged by its passing restart.
LIFECYCLE = frozenset(
    {"node.kubernetes.io/unschedulable", "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
)


@dataclass(frozen=True)
class Destination:
    """A node as the filters read it."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...] = ()
    ready: bool = True
    unschedulable: bool = False
    returning: bool = False  # taken by the rollout: back in service once it is done


def destination_of(view: NodeView) -> Destination:
    marks = view.marks
    returning = marks.cordoned_by_us or marks.state in IN_PROGRESS
    return Destination(view.name, view.labels, view.taints, view.ready, view.unschedulable, returning)


def _tolerates(toleration: Mapping[str, Any], taint: Taint) -> bool:
    effect, key = toleration.get("effect") or "", toleration.get("key") or ""
    if effect and effect != taint.effect:
        return False
    if toleration.get("operator") == "Exists":
        return not key or key == taint.key
    return key == taint.key and (toleration.get("value") or "") == taint.value


def _expression(req: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op, values = req.get("key", ""), req.get("operator", ""), req.get("values") or []
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(values) == 1:
        try:
            have, bound = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def _term(term: Mapping[str, Any], place: Destination) -> bool:
    """One nodeSelectorTerm: its label expressions and its fields (only metadata.name exists)."""
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches no node
    name = {"metadata.name": place.name}
    return all(_expression(e, place.labels) for e in exprs) and all(_expression(f, name) for f in fields)


def _affinity(spec: Mapping[str, Any], place: Destination) -> bool:
    if any(place.labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return True
    return any(_term(term, place) for term in required.get("nodeSelectorTerms") or [])


def fits(pod: Mapping[str, Any], place: Destination) -> bool:
    """`pod` (a replacement has its spec) passes the scheduler's filters on `place`, resources aside."""
    if not place.returning and (place.unschedulable or not place.ready):
        return False
    spec = pod.get("spec") or {}
    tolerations = spec.get("tolerations") or []
    for taint in place.taints:
        if taint.effect not in REPELS or taint.key in LIFECYCLE:
            continue
        if not any(_tolerates(t, taint) for t in tolerations):
            return False
    return _affinity(spec, place)


def unschedulable(pod: Mapping[str, Any]) -> bool:
    """A Pending pod the scheduler has found no node for."""
    status = pod.get("status") or {}
    if status.get("phase") != "Pending" or (pod.get("spec") or {}).get("nodeName"):
        return False
    return any(
        cond.get("type") == "PodScheduled"
        and cond.get("status") == "False"
        and cond.get("reason") == "Unschedulable"
        for cond in status.get("conditions") or []
    )
