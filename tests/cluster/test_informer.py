"""The operator's node informer against the real API server: paged LIST, WATCH from the list's version,
a fresh LIST that names exactly the nodes that exist, nothing lost across pages, and the LIST again when
the server answers a watch with 410 Gone."""

from __future__ import annotations

import json
import logging
import threading
import uuid
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

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


class AfterAGap(NodeInformer):
    """An informer that, after its first LIST, is held before it watches (as if disconnected) until the
    test lets it go. Nothing else differs: the LIST, the version it watches from and the watch are real."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.listed_version = ""
        self.listed = threading.Event()
        self.release = threading.Event()

    def _list(self) -> str:
        version = super()._list()
        if self.lists == 1:
            self.listed_version = version
            self.listed.set()
            self.release.wait(300)
        return version


def _forgotten(api: Any, version: str, label: str) -> bool:
    """Does the server answer a watch from `version` with 410 Gone (HTTP status or ERROR event)?"""
    try:
        response: Any = client.CoreV1Api(api).list_node(
            label_selector=f"informer-test={label}",
            watch=True,
            resource_version=version,
            timeout_seconds=1,
            _preload_content=False,
            _request_timeout=(10, 30),
        )
    except ApiException as exc:
        return bool(exc.status == 410)
    lines = [json.loads(line) for line in response.read().decode().splitlines() if line.strip()]
    return any(e.get("type") == "ERROR" and (e.get("object") or {}).get("code") == 410 for e in lines)


@pytest.mark.slow
def test_a_watch_the_server_answers_with_410_gone_lists_again(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="eventedpleg.k8s.informer")
    label = f"gone{uuid.uuid4().hex[:5]}"
    names = cluster.add_nodes(
        [FakeNode(f"{label}-{i}", labels={"informer-test": label}) for i in range(3)], wait=False
    )
    api = cluster.api()
    seen = Seen()
    informer = AfterAGap(api, seen.event, seen.synced, label_selector=f"informer-test={label}", page=2)
    informer.start()
    try:
        assert informer.listed.wait(90)
        version = informer.listed_version
        # Changes until the API server's watch cache no longer holds the listed version (it keeps about
        # 75 s of node events, then drops the oldest): exactly what a long-disconnected informer meets.
        churn = iter(range(1_000_000))

        def server_forgot() -> bool:
            for _ in range(20):
                patch_node(api, names[1], node_patch(annotations={"eventedpleg.io/churn": str(next(churn))}))
            return _forgotten(api, version, label)

        wait_for(server_forgot, timeout=300, interval=1.0, what=f"the server to forget version {version}")
        informer.release.set()
        # The informer's watch from that version gets the real 410 and LISTs again: as the 410 path,
        # not as the failure path, which would log a warning and back off.
        wait_for(what="the LIST after 410 Gone", check=lambda: len(seen.syncs) >= 2)
        assert informer.lists == 2
        assert seen.syncs[0] == seen.syncs[1] == set(names)
        assert [r.getMessage() for r in caplog.records if r.name == "eventedpleg.k8s.informer"] == []
        # The watch after the second LIST is a working one: changes arrive, no third LIST.
        patch_node(api, names[0], node_patch(annotations={"eventedpleg.io/test": "after-gone"}))
        wait_for(
            what="the MODIFIED event after the re-LIST",
            check=lambda: any(
                kind == "MODIFIED"
                and (node["metadata"].get("annotations") or {}).get("eventedpleg.io/test") == "after-gone"
                for kind, _, node in seen.events
            ),
        )
        assert informer.lists == 2
    finally:
        informer.release.set()
        informer.close()
        cluster.delete_nodes(names)
