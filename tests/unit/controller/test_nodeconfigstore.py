"""The NodeConfigs the operator has seen, and the inputs of a pass: taken on the event loop, frozen, and
untouched by what the loop does next (a pass runs in a worker thread while NodeConfigs come and go)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from eventedpleg.controller.nodeconfigstore import NodeConfigStore


def body(name: str, selector: Any = None, created: str = "2026-11-23T10:00:00Z") -> dict[str, Any]:
    spec: dict[str, Any] = {"eventedPleg": True}
    if selector is not None:
        spec["nodeSelector"] = selector
    return {"metadata": {"name": name, "creationTimestamp": created}, "spec": spec}


def test_a_pass_keeps_the_peers_it_was_given_while_nodeconfigs_come_and_go() -> None:
    store = NodeConfigStore()
    for i in range(50):
        store.apply_event("ADDED", body(f"peer-{i:02d}", {"matchLabels": {"pool": str(i)}}))
    store.apply_event("ADDED", body("cluster"))

    inputs = store.inputs("cluster")
    for i in range(50):
        store.apply_event("DELETED", body(f"peer-{i:02d}"))
    store.apply_event("ADDED", body("late"))

    assert isinstance(inputs.peers, tuple)
    assert [peer.name for peer in inputs.peers] == [f"peer-{i:02d}" for i in range(50)]
    assert inputs.nodeconfig is not None and inputs.nodeconfig.name == "cluster"
    with pytest.raises(dataclasses.FrozenInstanceError):
        inputs.peers = ()  # type: ignore[misc]
    assert [peer.name for peer in store.inputs("cluster").peers] == ["late"]


def test_an_invalid_nodeconfig_is_no_peer_and_a_fixed_one_is() -> None:
    store = NodeConfigStore()
    store.apply_event("ADDED", body("cluster"))
    store.apply_event("ADDED", body("broken", {"matchLabels": "not a map"}))
    assert store.inputs("cluster").peers == ()
    store.apply_event("MODIFIED", body("broken", {"matchLabels": {"pool": "a"}}))
    (peer,) = store.inputs("cluster").peers
    assert peer.name == "broken" and peer.selector.match_labels == {"pool": "a"}


def test_a_nodeconfig_not_seen_yet_is_read_by_the_pass() -> None:
    assert NodeConfigStore().inputs("cluster", deleting=True).nodeconfig is None
