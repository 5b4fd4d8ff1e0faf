"""A new node counts as there once it is Ready and the node lifecycle controller has lifted the taint it
puts on every node it has not yet seen Ready: the cluster tests read taints and schedule pods right after."""

from __future__ import annotations

from kubernetes.client import V1Node, V1NodeCondition, V1NodeSpec, V1NodeStatus, V1Taint

from eventedpleg_lab.kube.fakenodes import KWOK_ANNOTATION, settled


def _node(ready: str, *taints: str) -> V1Node:
    return V1Node(
        spec=V1NodeSpec(taints=[V1Taint(key=key, effect="NoSchedule") for key in taints] or None),
        status=V1NodeStatus(conditions=[V1NodeCondition(type="Ready", status=ready)]),
    )


def test_a_node_settles_once_ready_and_untainted_by_the_lifecycle_controller() -> None:
    assert settled(_node("True", KWOK_ANNOTATION, "dedicated"))
    assert settled(_node("True"))
    assert not settled(_node("True", KWOK_ANNOTATION, "node.kubernetes.io/not-ready"))  # Ready, not yet seen
    assert not settled(_node("True", "node.kubernetes.io/unreachable"))
    assert not settled(_node("False", KWOK_ANNOTATION))
    assert not settled(V1Node(spec=V1NodeSpec(), status=V1NodeStatus()))  # kwok has not initialised it
