"""The state label (protocol.LABEL_STATE) rides in the same Node write as the state annotation, whoever
builds the write: the operator's steps, the agent's reports, a release."""

from __future__ import annotations

from datetime import UTC, datetime

from eventedpleg import constants as c
from eventedpleg.constants import NodeState
from eventedpleg.core.node.phases.effects import Report
from eventedpleg.k8s.nodes import node_patch
from eventedpleg.protocol import state_label


def test_the_label_mirrors_a_state_written_or_removed() -> None:
    assert state_label({c.ANN_STATE: "Draining", c.ANN_REASON: "x"}) == {c.LABEL_STATE: "Draining"}
    assert state_label({c.ANN_STATE: None}) == {c.LABEL_STATE: None}
    assert state_label({c.ANN_HOST_CHECK: "{}"}) == {}


def test_a_node_patch_carries_the_label_with_the_state() -> None:
    body = node_patch(annotations={c.ANN_STATE: "Applying", c.ANN_DESIRED: "h"}, resource_version="7")
    assert body["metadata"]["labels"] == {c.LABEL_STATE: "Applying"}
    assert body["metadata"]["annotations"][c.ANN_STATE] == "Applying"
    removed = node_patch(annotations=dict.fromkeys(c.NODE_ANNOTATIONS))  # a release removes every key
    assert removed["metadata"]["labels"] == {c.LABEL_STATE: None}


def test_a_write_that_leaves_the_state_alone_leaves_the_label_alone() -> None:
    assert "labels" not in node_patch(annotations={c.ANN_HOST_CHECK: "{}"})["metadata"]
    assert "labels" not in node_patch(unschedulable=True).get("metadata", {})


def test_the_agents_report_carries_the_label() -> None:
    changes = Report(NodeState.ROLLED_BACK, "verification failed").annotations(
        datetime(2026, 1, 1, tzinfo=UTC)
    )
    assert node_patch(annotations=changes)["metadata"]["labels"] == {c.LABEL_STATE: "RolledBack"}


def test_every_state_written_on_a_node_is_a_valid_label_value() -> None:
    # k8s.io/apimachinery/pkg/util/validation IsValidLabelValue: <= 63 characters, alphanumeric at both ends,
    # '-', '_', '.' inside
    for state in NodeState:
        assert len(state.value) <= 63 and state.value.isalnum(), state
