"""The operator's node informer against the real API server: paged LIST, WATCH from the list's version,
and a fresh LIST that names exactly the nodes that exist, nothing lost across pages."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest

from eventedpleg.k8s.informer import NodeInformer
from eventedpleg.k8s.nodes import node_patch, patch_node
from eventedpleg_lab.kube.fakenodes import FakeNode
from eventedpleg_lab.localcluster.cluster import LocalCluster
from tests.cluster.rollout_harness import wait_for

pytestmark = pytest.mark.cluster


class Seen:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict[str, Any]]] = []
        self.syncs: list[set[str]] = []
        self.lock = threading.Lock()

    def event(self, kind: str, node: dict[str, Any]) -> None:
        with self.lock:
            self.events.append((kind, node["metadata"]["name"], node))

    def synced(self, names: set[str]) -> None:
        with self.lock:
            self.syncs.append(set(names))


def test_paged_list_then_watch_then_a_fresh_list_after_a_gap(cluster: LocalCluster) -> None:
    label = f"inf{uuid.uuid4().hex[:5]}"
    names = cluster.add_nodes(
        [FakeNode(f"{label}-{i}", labels={"informer-test": label}) for i in range(5)], wait=False
    )
    api = cluster.api()
    seen = Seen()
    informer = NodeInformer(api, seen.event, seen.synced, label_selector=f"informer-test={label}", page=2)
    thread = informer.start()
    try:
        wait_for(what="the first list", check=lambda: seen.syncs)
        assert seen.syncs[0] == set(names)  # three pages of at most 2, nothing lost between them
        assert sorted(name for kind, name, _ in seen.events if kind == "ADDED") == sorted(names)
        patch_node(api, names[0], node_patch(annotations={"eventedpleg.io/test": "watched"}))
        wait_for(
            what="the MODIFIED event",
            check=lambda: any(
                kind == "MODIFIED" and (node["metadata"].get("annotations") or {}).get("eventedpleg.io/test")
                for kind, _, node in seen.events
            ),
        )
        cluster.delete_nodes([names[1]])
        wait_for(
            what="the DELETED event",
            check=lambda: ("DELETED", names[1]) in [(k, n) for k, n, _ in seen.events],
        )
        assert informer.lists == 1  # the watch carried every change: no LIST after the first
    finally:
        informer.close()
    thread.join(5)  # close() ends a watch that waits for its next event at once (shutdown, SIGTERM)
    assert not thread.is_alive()

    # While nobody watched, a node went away; the next informer's LIST names the nodes that exist now.
    cluster.delete_nodes([names[2]])
    later = Seen()
    again = NodeInformer(api, later.event, later.synced, label_selector=f"informer-test={label}")
    again.start()
    try:
        wait_for(what="the second list", check=lambda: later.syncs)
        assert later.syncs[0] == {names[0], names[3], names[4]}
    finally:
        again.close()
        cluster.delete_nodes([names[0], names[3], names[4]])
