"""release_node: the write `eventedpleg release-nodes` sends for a Node, from the Node as the API gives it."""

from __future__ import annotations

from typing import Any

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg.core.rollout.drain.taints import Taint
from eventedpleg.core.rollout.releasenodes import release_node
from eventedpleg.k8s.nodes import node_patch

OUR_TAINT = "eventedpleg.io/evented-pleg"
KARPENTER, CA = protocol.AUTOSCALER_ANNOTATIONS


def node(
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    *,
    unschedulable: bool = False,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"unschedulable": unschedulable}
    if taints is not None:
        spec["taints"] = taints
    return {
        "metadata": {
            "name": "node-1",
            "resourceVersion": "42",
            "annotations": annotations or {},
            "labels": labels or {},
        },
        "spec": spec,
    }


def halted() -> dict[str, Any]:
    """A node a halted rollout left: cordoned and tainted by us, the Karpenter hold ours, the
    cluster-autoscaler one the user's, Failed with the state label, the agent's host check on it."""
    return node(
        {
            protocol.ANN_OWNER: "cluster",
            protocol.ANN_STATE: "Failed",
            protocol.ANN_STATE_SINCE: "2026-11-28T10:00:00+00:00",
            protocol.ANN_REASON: "verification failed",
            protocol.ANN_CORDONED_BY_US: "true",
            protocol.ANN_WAS_UNSCHEDULABLE: "false",
            protocol.ANN_AUTOSCALER_HOLD: KARPENTER,
            KARPENTER: "true",
            CA: "true",
            protocol.ANN_TAINT: OUR_TAINT,
            protocol.ANN_TAINTED_SINCE: "2026-11-28T09:59:00+00:00",
            protocol.ANN_HOST_CHECK: '{"stopped": true}',
            protocol.ANN_CURRENT: "abc",
            "example.com/keep": "yes",
        },
        {protocol.LABEL_STATE: "Failed", "kubernetes.io/hostname": "node-1", c.LABEL_SKIP: "true"},
        unschedulable=True,
        taints=[
            {"key": OUR_TAINT, "effect": "PreferNoSchedule"},
            {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
        ],
    )


def test_a_halted_node_is_given_back_whole_in_one_write() -> None:
    release = release_node(halted())
    assert release is not None and release.node == "node-1" and release.resource_version == "42"
    write = release.write
    assert write.unschedulable is False  # our cordon undone
    assert write.taints == (Taint("dedicated", "gpu", "NoSchedule"),)  # ours off, the user's kept
    assert KARPENTER in write.annotations and CA not in write.annotations  # the user's autoscaler key stays
    assert "example.com/keep" not in write.annotations
    assert all(value is None for value in write.annotations.values())
    ours = {key for key in halted()["metadata"]["annotations"] if key.startswith("eventedpleg.io/")}
    assert ours <= set(write.annotations)  # host check and current-config too: no operator needs them
    assert release.changes[0] == "uncordon"


def test_the_patch_removes_the_state_label_and_no_other() -> None:
    release = release_node(halted())
    assert release is not None
    body = node_patch(annotations=release.write.annotations, resource_version=release.resource_version)
    assert body["metadata"]["labels"] == {protocol.LABEL_STATE: None}  # the user's skip label stays
    assert body["metadata"]["resourceVersion"] == "42"


def test_a_cordon_from_before_us_stays() -> None:
    body = node(
        {
            protocol.ANN_STATE: "Failed",
            protocol.ANN_CORDONED_BY_US: "true",
            protocol.ANN_WAS_UNSCHEDULABLE: "true",
        },
        unschedulable=True,
    )
    release = release_node(body)
    assert release is not None
    assert release.write.unschedulable is None
    assert "uncordon" not in release.changes


def test_a_cordon_we_did_not_make_stays() -> None:
    release = release_node(node({protocol.ANN_HOST_CHECK: "{}"}, unschedulable=True))
    assert release is not None and release.write.unschedulable is None
    assert dict(release.write.annotations) == {protocol.ANN_HOST_CHECK: None}


def test_a_taint_with_our_key_that_we_did_not_add_stays() -> None:
    taints = [{"key": OUR_TAINT, "effect": "PreferNoSchedule"}]
    release = release_node(node({protocol.ANN_STATE: "Done"}, taints=taints))
    assert release is not None and release.write.taints is None


def test_a_stray_state_label_goes_through_its_annotation() -> None:
    release = release_node(node(labels={protocol.LABEL_STATE: "Done"}))
    assert release is not None
    assert dict(release.write.annotations) == {protocol.ANN_STATE: None}
    assert release.changes == (f"remove label {protocol.LABEL_STATE}",)


def test_an_unknown_key_of_ours_goes_too() -> None:
    release = release_node(node({"eventedpleg.io/from-another-version": "x"}))
    assert release is not None
    assert dict(release.write.annotations) == {"eventedpleg.io/from-another-version": None}


def test_a_node_without_marks_needs_no_write() -> None:
    assert release_node(node({"example.com/keep": "yes", KARPENTER: "true"}, unschedulable=True)) is None
