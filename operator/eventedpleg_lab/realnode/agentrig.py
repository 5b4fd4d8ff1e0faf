"""The real agent on the real-node rig's kubelet, with an in-memory API side (sim.fakeapi): what the
realnode tests and bench/podstart.py's guarded arms drive, the operator's part of an apply played by
`AgentRig.apply` as in production."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field

from eventedpleg import protocol
from eventedpleg.agent.agent import Agent, AgentSettings, drive
from eventedpleg.core import render
from eventedpleg.core.agentoptions import AgentOptions
from eventedpleg.models.nodeconfig import KubeletConfigMode
from eventedpleg_lab.realnode import rig as rn
from eventedpleg_lab.realnode.host import RigHost
from eventedpleg_lab.sim.fakeapi import FakeApi

NAMESPACE = "evented-pleg-system"
NODE = "realnode"


def crictl_runtime_version(rig: rn.RealNode) -> str:
    """`containerd://<version>` as the kubelet puts it in the Node's containerRuntimeVersion (from the CRI
    Version call; crictl v1.36's `version` prints `RuntimeName:  containerd` lines and has no `-o json`)."""
    done = rig.crictl("version")
    fields = dict(line.split(":", 1) for line in done.stdout.splitlines() if ":" in line)
    return f"{fields['RuntimeName'].strip()}://{fields['RuntimeVersion'].strip()}"


def kubelet_version(rig: rn.RealNode, key: str) -> str:
    """`Kubernetes v1.36.4` -> `v1.36.4`, from the binary itself."""
    done = subprocess.run(
        [str(rig.bins.kubelet[key]), "--version"], capture_output=True, text=True, check=True
    )
    return done.stdout.split()[-1]


@dataclass
class AgentRig:
    """The real agent on the real node, with an in-memory API side."""

    node: rn.RealNode
    host: RigHost
    api: FakeApi
    agent: Agent
    published: list[str] = field(default_factory=list)

    def publish(self, *, enabled: bool, mode: KubeletConfigMode = KubeletConfigMode.DROP_IN_ONLY) -> str:
        rendered = render.render(enabled=enabled, owner="realnode", kubelet_config_mode=mode.value)
        self.api.configmaps[(NAMESPACE, rendered.configmap_name)] = rendered.configmap_data()
        return rendered.hash

    def apply(self, *, enabled: bool = True, options: AgentOptions | None = None) -> str:
        """The operator's part (ConfigMap, agent-options, desired-config, Applying), then the agent's step.
        First, as in production, the agent reads the kubelet while the node serves, the operator cordons it
        a benefit window later, and the agent reads it again then (the "before" window, servicephase)."""
        config_hash = self.publish(enabled=enabled)
        self.api.cordon(NODE, on=False)
        drive(self.agent.on_node(self.api.view(NODE)), self.host.clock.sleep)
        self.host.clock.sleep(self.agent.settings.benefit_window_seconds)
        self.api.cordon(NODE)
        drive(self.agent.on_node(self.api.view(NODE)), self.host.clock.sleep)
        self.api.annotate(
            NODE,
            {
                protocol.ANN_AGENT_OPTIONS: (options or AgentOptions()).to_json(),
                protocol.ANN_DESIRED: config_hash,
                protocol.ANN_STATE: protocol.NodeState.APPLYING.value,
            },
        )
        drive(self.agent.on_node(self.api.view(NODE)), self.host.clock.sleep)
        return config_hash

    def check(self) -> None:
        drive(self.agent.check(), self.host.clock.sleep)

    @property
    def annotations(self) -> dict[str, str]:
        return dict(self.api.nodes[NODE].annotations)

    @property
    def state(self) -> str:
        return self.annotations.get(protocol.ANN_STATE, "")

    def evidence(self) -> dict[str, object]:
        doc = json.loads(self.annotations[protocol.ANN_EVIDENCE])
        assert isinstance(doc, dict)
        return doc


def make_agent_rig(
    rig: rn.RealNode, kubelet: str, *, runtime_version: str | None = None, **settings: float
) -> AgentRig:
    host = RigHost(rig)
    api = FakeApi()
    api.add_node(
        NODE,
        kubelet_version(rig, kubelet),
        runtime_version or crictl_runtime_version(rig),
        ready=rig.healthz,
    )
    # The production verification window (10 s, AgentSettings); 15 s benefit windows: ~15 relists when
    # polling vs none when evented.
    defaults: dict[str, float] = {"benefit_window_seconds": 15.0}
    defaults.update(settings)
    agent = Agent(NODE, host, api, AgentSettings(namespace=NAMESPACE, **defaults))  # type: ignore[arg-type]
    return AgentRig(rig, host, api, agent)
