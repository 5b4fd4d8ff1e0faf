"""The state label (protocol.LABEL_STATE) rides in the same Node write as the state annotation, whoever
builds the write: the operator's steps, the agent's reports, a release."""

from __future__ import annotations

from datetime import UTC, datetime

from eventedpleg.core.node.blocks.effects import Report
from eventedpleg.k8s.nodes import node_patch
from eventedpleg.protocol import (
    ANN_DESIRED,
    ANN_HOST_CHECK,
    ANN_REASON,
    ANN_STATE,
    LABEL_STATE,
    NODE_ANNOTATIONS,
    NodeState,
    state_label,
)


def test_the_label_mirrors_a_state_written_or_removed() -> None:
    assert state_label({ANN_STATE: "Draining", ANN_REASON: "x"}) == {LABEL_STATE: "Draining"}
    assert state_label({ANN_STATE: None}) == {LABEL_STATE: None}
    assert state_label({ANN_HOST_CHECK: "{}"}) == {}


def test_a_node_patch_carries_the_label_with_the_state() -> None:
    body = node_patch(annotations={ANN_STATE: "Applying", ANN_DESIRED: "h"}, resource_version="7")
    assert body["metadata"]["labels"] == {LABEL_STATE: "Applying"}
    assert body["metadata"]["annotations"][ANN_STATE] == "Applying"
    removed = node_patch(annotations=dict.fromkeys(NODE_ANNOTATIONS))  # a release removes every key
    assert removed["metadata"]["labels"] == {LABEL_STATE: None}


def test_a_write_that_leaves_the_state_alone_leaves_the_label_alone() -> None:
    assert "labels" not in node_patch(annotations={ANN_HOST_CHECK: "{}"})["metadata"]
    assert "labels" not in node_patch(unschedulable=True).get("metadata", {})


def test_the_agents_report_carries_the_label() -> None:
    changes = Report(NodeState.ROLLED_BACK, "verification failed").annotations(
        datetime(2026, 1, 1, tzinfo=UTC)
    )
    assert node_patch(annotations=changes)["metadata"]["labels"] == {LABEL_STATE: "RolledBack"}


def test_every_state_written_on_a_node_is_a_valid_label_value() -> None:
    # k8s.io/apimachinery/pkg/util/validation IsValidLabelValue: <= 63 characters, alphanumeric at both ends,
    # '-', '_', '.' inside
    for state in NodeState:
        assert len(state.value) <= 63 and state.value.isalnum(), state
