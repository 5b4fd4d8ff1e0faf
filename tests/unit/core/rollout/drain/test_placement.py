"""Whether a pod could be placed on a node as the scheduler's label and taint filters say
(core.rollout.drain.placement), resources aside."""

from __future__ import annotations

from typing import Any

from eventedpleg.core.rollout.drain import placement
from eventedpleg.core.rollout.drain.placement import Destination
from eventedpleg.core.rollout.drain.taints import Taint
from eventedpleg.core.rollout.snapshot import node_view


def pod(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": "shop", "name": "web-0"}, "spec": spec, "status": {"phase": "Running"}}


WORKER = Destination("w2", {"kubernetes.io/hostname": "w2", "tier": "web"})


def test_a_ready_schedulable_node_without_taints_fits_a_plain_pod() -> None:
    assert placement.fits(pod(), WORKER)


def test_cordoned_or_not_ready_nodes_do_not_fit_unless_the_rollout_itself_took_them() -> None:
    assert not placement.fits(pod(), Destination("w2", {}, unschedulable=True))
    assert not placement.fits(pod(), Destination("w2", {}, ready=False))
    # ours: back in service once done, its restart's NotReady and lifecycle taints do not count
    restarting = Destination(
        "w2",
        {},
        (Taint("node.kubernetes.io/unschedulable", effect="NoSchedule"),),
        ready=False,
        unschedulable=True,
        returning=True,
    )
    assert placement.fits(pod(), restarting)


def test_a_no_schedule_or_no_execute_taint_needs_a_toleration_prefer_no_schedule_does_not() -> None:
    gpu = Destination("w2", {}, (Taint("gpu", "true", "NoSchedule"),))
    assert not placement.fits(pod(), gpu)
    assert placement.fits(pod(tolerations=[{"key": "gpu", "operator": "Equal", "value": "true"}]), gpu)
    assert not placement.fits(pod(tolerations=[{"key": "gpu", "value": "false"}]), gpu)
    assert placement.fits(
        pod(tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]), gpu
    )
    assert not placement.fits(
        pod(tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoExecute"}]), gpu
    )
    assert placement.fits(pod(tolerations=[{"operator": "Exists"}]), gpu)  # tolerates everything
    assert placement.fits(pod(), Destination("w2", {}, (Taint("soft", effect="PreferNoSchedule"),)))
    assert not placement.fits(pod(), Destination("w2", {}, (Taint("evict", effect="NoExecute"),)))


def test_node_selector_and_required_affinity_are_matched_on_labels_and_the_name() -> None:
    assert placement.fits(pod(nodeSelector={"tier": "web"}), WORKER)
    assert not placement.fits(pod(nodeSelector={"tier": "db"}), WORKER)

    def required(*terms: dict[str, Any]) -> dict[str, Any]:
        rule = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}
        return pod(affinity={"nodeAffinity": rule})

    def expr(key: str, op: str, *values: str) -> dict[str, Any]:
        return {"matchExpressions": [{"key": key, "operator": op, "values": list(values)}]}

    assert placement.fits(required(expr("tier", "In", "web", "api")), WORKER)
    assert not placement.fits(required(expr("tier", "NotIn", "web")), WORKER)
    assert placement.fits(required(expr("tier", "NotIn", "db"), expr("zone", "Exists")), WORKER)  # ORed
    assert not placement.fits(required(expr("zone", "Exists")), WORKER)
    assert placement.fits(required(expr("zone", "DoesNotExist")), WORKER)
    numbered = Destination("w3", {"cores": "16"})
    assert placement.fits(required(expr("cores", "Gt", "8")), numbered)
    assert not placement.fits(required(expr("cores", "Lt", "8")), numbered)
    pinned = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["w1"]}]}
    assert not placement.fits(required(pinned), WORKER)  # pinned to another node by name
    assert placement.fits(required(pinned), Destination("w1", {}))
    assert not placement.fits(required({}), WORKER)  # an empty term matches no node


def test_a_pending_pod_is_unschedulable_only_once_the_scheduler_said_so() -> None:
    said = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    pending = {"metadata": {}, "spec": {}, "status": {"phase": "Pending", "conditions": [said]}}
    assert placement.unschedulable(pending)
    assert not placement.unschedulable({**pending, "status": {"phase": "Pending"}})  # not tried yet
    assert not placement.unschedulable({**pending, "spec": {"nodeName": "w1"}})  # bound: pulling images
    assert not placement.unschedulable({**pending, "status": {"phase": "Running", "conditions": [said]}})


def test_a_node_view_is_returning_while_the_rollout_holds_it() -> None:
    def view(annotations: dict[str, str]) -> Destination:
        return placement.destination_of(node_view({"metadata": {"name": "w1", "annotations": annotations}}))

    assert not view({}).returning
    assert view({"eventedpleg.io/cordoned": "true"}).returning
    assert view({"eventedpleg.io/state": "Applying"}).returning
    assert not view({"eventedpleg.io/state": "Failed"}).returning
