"""Simulated hosts behind kwok nodes, each with a real agent (eventedpleg.agent) in its own thread.

The host matches what the Node reports (kubelet and runtime versions, control-plane role), so what the
operator decides from status.nodeInfo and what the agent finds on the "host" agree, as on a real node.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eventedpleg.agent import runner
from eventedpleg.agent.agent import Agent, AgentSettings
from eventedpleg.agent.linuxhost import RealClock
from eventedpleg.k8s.agentapi import KubeAgentApi
from eventedpleg_lab.kube.fakenodes import FakeNode
from eventedpleg_lab.sim import profiles
from eventedpleg_lab.sim.host import SimHost

log = logging.getLogger(__name__)


def profile_for(node: FakeNode) -> profiles.HostProfile:
    """A host laid out like the node says it is: CRI-O or containerd, kubelet version, static pods."""
    base = (
        profiles.crio()
        if node.container_runtime_version.startswith("cri-o")
        else profiles.kubeadm_containerd()
    )
    return base.with_(
        name=node.name,
        kubelet_version=node.kubelet_version,
        runtime=node.container_runtime_version,
        static_pods=node.control_plane,
        verbosity=4,  # the Evented PLEG lines are V(4) (docs/compatibility.md §4)
    )


@dataclass
class SimulatedAgents:
    """One SimHost + agent thread per node; `stop()` ends them all."""

    api: Any  # kubernetes ApiClient for the agents
    root: Path
    namespace: str
    # Short windows so a demo finishes in a minute; the DaemonSet uses the agent's defaults (10 s, 60 s).
    poll_seconds: float = 1.0
    min_window_seconds: float = 3.0
    check_interval_seconds: float = 10.0
    hosts: dict[str, SimHost] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self, nodes: Iterable[FakeNode]) -> None:
        clock = RealClock()
        for node in nodes:
            host = SimHost(self.root / node.name, profile_for(node), clock)
            self.hosts[node.name] = host
            agent = Agent(
                node.name,
                host,
                KubeAgentApi(self.api, host=node.name),
                AgentSettings(
                    namespace=self.namespace,
                    poll_seconds=self.poll_seconds,
                    min_window_seconds=self.min_window_seconds,
                    check_interval_seconds=self.check_interval_seconds,
                ),
            )
            thread = threading.Thread(
                target=runner.run,
                args=(agent,),
                kwargs={"stop": self._stop.is_set},
                name=f"agent-{node.name}",
                daemon=True,
            )
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=15)
