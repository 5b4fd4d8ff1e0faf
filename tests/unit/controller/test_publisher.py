"""The NodeConfig's Events a pass sends (controller.publisher): their kinds and reasons."""

from __future__ import annotations

import pytest

from eventedpleg.controller import publisher
from eventedpleg.controller.configstate import ConfigState
from eventedpleg.controller.metrics import OperatorMetrics
from eventedpleg.controller.nodecache import NodeCache
from eventedpleg.core.rollout import status
from eventedpleg.k8s import nodeconfigs
from eventedpleg.k8s.events import ObjectRef
from eventedpleg.models.nodeconfig import NodeConfigStatus
from eventedpleg_lab.sim.rolloutworld import T0, World, fleet, spec
from tests.unit.controller.recorder import Recorder


def test_a_halted_rollout_sends_its_degraded_reason_and_one_warning_per_failed_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(nodeconfigs, "patch_status", lambda api, name, body: None)
    nodes = fleet(3)
    nodes["node-000"].agent_fails = True  # verification fails: the agent rolls the node back
    world = World(nodes, spec())
    world.run()
    summary = world.plan().summary
    previous = NodeConfigStatus()
    new = status.build_status(summary, enabled=True, deleting=False, generation=1, previous=[], now=T0)
    recorder = Recorder()
    sender = publisher.StatusPublisher(api=None, recorder=recorder, clock=lambda: T0)
    state = ConfigState("cluster", OperatorMetrics(), NodeCache())
    ref = ObjectRef("NodeConfig", "cluster", "eventedpleg.io/v1alpha1")

    sender.publish(state, ref, previous, new, summary)
    kinds_and_reasons = [(kind, reason) for kind, reason, _ in recorder.sent]
    assert kinds_and_reasons == [("Warning", "RolloutHalted"), ("Warning", "NodeRolledBack")]
    assert recorder.sent[1][2].startswith("node-000: verification failed")

    sender.publish(state, ref, new, new, summary)  # nothing turned, no new failure: nothing said again
    assert len(recorder.sent) == 2
