"""The agent's composition root (what `eventedpleg agent` runs, one per node): the host lock, the API client,
the agent over its host, the loop, the /healthz and /metrics listeners, and the host check marked stopped on
the way out.

`run` takes the host, so the lab's `eventedpleg sim-agent` runs the same agent against a simulated one;
`run_linux` is the production agent on the real host.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

from eventedpleg import protocol
from eventedpleg.agent import health, hostlock, runner
from eventedpleg.agent.agent import Agent, AgentSettings
from eventedpleg.agent.linuxhost import LinuxHost
from eventedpleg.agent.metrics import AgentMetrics
from eventedpleg.core import hostcheck
from eventedpleg.core.health import Heartbeats
from eventedpleg.core.node.blocks.host import Host
from eventedpleg.core.node.blocks.nodeapi import AgentApi
from eventedpleg.k8s.agentapi import KubeAgentApi
from eventedpleg.k8s.client import api_client

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AgentProcess:
    """What every agent process is told by its command's options (all but the host and how it logs)."""

    node: str
    kubeconfig: str | None
    settings: AgentSettings
    once: bool
    context: str | None = None


@dataclass(frozen=True)
class Listeners:
    """The agent's two listeners (agent.health): /healthz from the loop's heartbeat on the loopback at
    `health_port`, /metrics on `metrics_host`:`metrics_port`; a port of 0 serves nothing."""

    health_port: int = 0
    health_stale_seconds: float = 180.0
    metrics_port: int = 0
    metrics_host: str = health.METRICS_HOST


def run_linux(process: AgentProcess, host_root: Path, listeners: Listeners = Listeners()) -> None:
    """`run` on the real host whose / is mounted at `host_root` (commands through `nsenter -t 1` unless it is
    /); the host reads its Node's addresses through the agent's API."""
    host = LinuxHost(host_root, nsenter=host_root.resolve() != Path("/"))
    run(process, host, listeners, on_api=lambda api: host.identify_node(lambda: api.get_node(process.node)))


def run(
    process: AgentProcess,
    host: Host,
    listeners: Listeners = Listeners(),
    *,
    on_api: Callable[[AgentApi], None] | None = None,
) -> None:
    """Run the agent on `host` until SIGTERM/SIGINT (or one pass with `once`), once no other agent holds the
    host (agent.hostlock), serving its `listeners`. `on_api` is given the agent's API once it exists (the
    real host reads its Node's addresses through it)."""
    stopping = threading.Event()
    idle = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()
        if idle.is_set():  # only waiting on the watch: stop now, not when the watch next ends
            raise runner.Stopped

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    beats = Heartbeats(time.monotonic)
    metrics = AgentMetrics()
    servers = []
    if listeners.health_port:
        servers.append(health.serve(beats, listeners.health_stale_seconds, listeners.health_port))
    if listeners.metrics_port:
        servers.append(health.serve_metrics(metrics, listeners.metrics_port, listeners.metrics_host))
    try:
        with (
            hostlock.held(host.root, stop=stopping.is_set, waiting=lambda: beats.beat(health.LOOP)) as ours,
            api_client(process.kubeconfig, context=process.context) as client,
        ):
            if not ours:
                log.info("stopped by signal while another agent held the host")
                return
            api = KubeAgentApi(client, host=process.node)
            if on_api is not None:
                on_api(api)
            the_agent = Agent(process.node, host, api, process.settings, metrics=metrics)
            try:
                runner.run(the_agent, stop=stopping.is_set, once=process.once, beats=beats, idle=idle)
            except runner.Stopped:
                log.info("stopped by signal while idle")
            if not process.once:
                withdraw_host_check(the_agent)
    finally:
        for server in servers:
            server.shutdown()


def withdraw_host_check(agent: Agent) -> None:
    """On the way out (helm uninstall deletes the DaemonSet; an upgrade replaces the pod; an eviction): mark
    our host check stopped (core.hostcheck.stopped), so the operator knows at once that no agent runs here
    and since when; a new agent publishes its own check at its start. Best effort: a failure here is
    logged, never raised (the operator then goes by the check's age)."""
    try:
        node = agent.api.get_node(agent.node)
        last = node.annotations.get(protocol.ANN_HOST_CHECK) if node is not None else None
        check = hostcheck.stopped(last, datetime.now(UTC))
        agent.api.patch_node_annotations(agent.node, {protocol.ANN_HOST_CHECK: check.to_json()})
    except Exception as exc:  # the API may be gone too: the node keeps its last check, dated
        log.warning("could not mark %s stopped: %s", protocol.ANN_HOST_CHECK, exc)
