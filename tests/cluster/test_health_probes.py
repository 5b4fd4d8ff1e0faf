"""The operator's liveness follows its node informer on the real API server: a node event whose handling
never returns (a frozen informer loop) fails /healthz's check once the threshold passes, and the check
passes again as soon as the loop moves. (The rollout loop and the agent's loop:
tests/unit/controller/test_liveness.py and tests/agent/test_agent_healthz.py.)"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest

from eventedpleg.controller.probes import Thresholds, liveness
from eventedpleg.core.health import Heartbeats
from eventedpleg.k8s.informer import NodeInformer
from eventedpleg.k8s.nodes import node_patch, patch_node
from eventedpleg_lab.kube.fakenodes import FakeNode
from eventedpleg_lab.localcluster.cluster import LocalCluster
from tests.cluster.rollout_harness import wait_for

pytestmark = pytest.mark.cluster


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


def test_a_frozen_node_informer_fails_liveness_and_recovers(cluster: LocalCluster) -> None:
    label = f"hp{uuid.uuid4().hex[:5]}"
    names = cluster.add_nodes([FakeNode(f"{label}-0", labels={"health-test": label})], wait=False)
    api = cluster.api()
    clock = FakeMonotonic()
    beats = Heartbeats(clock)
    live = liveness(beats, Thresholds(rollout_seconds=120, informer_seconds=420))
    frozen, stuck, synced = threading.Event(), threading.Event(), threading.Event()

    def on_event(kind: str, node: dict[str, Any]) -> None:
        while frozen.is_set():  # handling that never returns (a deadlock)
            stuck.set()
            time.sleep(0.01)

    informer = NodeInformer(
        api,
        on_event,
        lambda _: synced.set(),
        label_selector=f"health-test={label}",
        on_progress=lambda: beats.beat("node-informer"),
    )
    informer.start()
    try:
        wait_for(synced.is_set, what="the first list")
        assert live() == (True, "ok: node-informer")
        clock.now += 400  # a quiet cluster: no event for 400 s is still within the threshold
        assert live()[0]

        frozen.set()
        patch_node(api, names[0], node_patch(annotations={"eventedpleg.io/test": "freeze"}))
        wait_for(stuck.is_set, what="the informer stuck in a handler")
        clock.now += 421
        ok, message = live()
        assert not ok
        assert "node-informer silent for" in message

        frozen.clear()
        wait_for(lambda: live()[0], what="recovery once the handler returns")
    finally:
        frozen.clear()
        informer.close()
        cluster.delete_nodes(names)
        api.close()
