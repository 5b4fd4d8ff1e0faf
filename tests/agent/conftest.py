"""Agent tests: the real agent against a simulated host (eventedpleg_lab.sim) and an in-memory API."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from eventedpleg import protocol
from eventedpleg.agent.agent import Agent, AgentSettings, drive
from eventedpleg.core import render
from eventedpleg.core.agentoptions import AgentOptions
from eventedpleg.core.node.blocks.effects import Effect
from eventedpleg.models.nodeconfig import KubeletConfigMode
from eventedpleg.protocol import NodeState
from eventedpleg_lab.sim.clock import FakeClock
from eventedpleg_lab.sim.fakeapi import FakeApi
from eventedpleg_lab.sim.host import SimHost
from eventedpleg_lab.sim.profiles import HostProfile

NAMESPACE = "evented-pleg-system"
NODE = "node-a"


@dataclass
class Rig:
    """One node: simulated host + fake API + the agent, sharing a fake clock."""

    host: SimHost
    api: FakeApi
    agent: Agent
    clock: FakeClock

    @property
    def trace(self) -> list[Effect]:
        """Every effect the agent performed so far (core.node.blocks.effects)."""
        assert self.agent.trace is not None
        return self.agent.trace

    def path(self, host_path: str) -> Path:
        return self.host.path(host_path)

    def publish(self, *, enabled: bool, mode: KubeletConfigMode = KubeletConfigMode.DROP_IN_ONLY) -> str:
        """The operator's side: the rendered ConfigMap, named by its hash."""
        rendered = render.render(enabled=enabled, owner="cluster", kubelet_config_mode=mode.value)
        self.api.configmaps[(NAMESPACE, rendered.configmap_name)] = rendered.configmap_data()
        return rendered.hash

    def request(self, config_hash: str, options: AgentOptions | None = None) -> None:
        """The operator's step 3: agent-options, desired-config, state=Applying (node drained)."""
        self.api.annotate(
            NODE,
            {
                protocol.ANN_AGENT_OPTIONS: (options or AgentOptions()).to_json(),
                protocol.ANN_DESIRED: config_hash,
                protocol.ANN_STATE: NodeState.APPLYING.value,
            },
        )

    def step(self) -> None:
        drive(self.agent.on_node(self.api.view(NODE)), self.clock.sleep)

    def check(self) -> None:
        drive(self.agent.check(), self.clock.sleep)

    def apply(
        self,
        *,
        enabled: bool = True,
        mode: KubeletConfigMode = KubeletConfigMode.DROP_IN_ONLY,
        options: AgentOptions | None = None,
    ) -> str:
        config_hash = self.publish(enabled=enabled, mode=mode)
        self.serve_then_cordon()
        self.request(config_hash, options)
        self.step()
        return config_hash

    def serve_then_cordon(self) -> None:
        """What precedes a request in production: the agent keeps a reading of the kubelet while the node
        serves, the operator cordons it a benefit window later, and the agent reads it again then."""
        self.api.cordon(NODE, on=False)
        self.step()
        self.clock.sleep(self.agent.settings.benefit_window_seconds)
        self.api.cordon(NODE)
        self.step()

    @property
    def annotations(self) -> dict[str, str]:
        return dict(self.api.nodes[NODE].annotations)

    @property
    def state(self) -> str:
        return self.annotations.get(protocol.ANN_STATE, "")

    @property
    def evidence(self) -> dict[str, object]:
        doc = json.loads(self.annotations[protocol.ANN_EVIDENCE])
        assert isinstance(doc, dict)
        return doc

    def snapshot(self) -> dict[str, bytes]:
        """Every file under the simulated root (to prove "nothing touched")."""
        root = self.host.root
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


RigFactory = Callable[..., Rig]


@pytest.fixture
def make_rig(tmp_path: Path) -> RigFactory:
    counter = iter(range(1000))

    def make(profile: HostProfile, **settings: Any) -> Rig:
        clock = FakeClock()
        host = SimHost(tmp_path / f"root{next(counter)}", profile, clock)
        api = FakeApi()
        api.add_node(NODE, profile.kubelet_version, profile.runtime, ready=host.node_ready)
        settings_ = AgentSettings(namespace=NAMESPACE, **settings)
        agent = Agent(NODE, host, api, settings_, trace=[], files=host.files)
        return Rig(host, api, agent, clock)

    return make
