"""`eventedpleg agent`: the node agent (what the DaemonSet runs, one per node).

`agent_command_options` and `run_agent` are shared with the lab's `eventedpleg sim-agent`, which runs the same
agent against a simulated host; the production command only ever drives the real one.
"""

from __future__ import annotations

import functools
import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

import click

from eventedpleg import protocol
from eventedpleg.agent import health, hostlock, runner
from eventedpleg.agent.agent import Agent, AgentSettings
from eventedpleg.agent.linuxhost import LinuxHost
from eventedpleg.agent.metrics import AgentMetrics
from eventedpleg.cli import logformat
from eventedpleg.cli.examples import examples
from eventedpleg.cli.failures import verbose_option
from eventedpleg.cli.logformat import log_format_option
from eventedpleg.core import hostcheck
from eventedpleg.core.health import Heartbeats
from eventedpleg.core.node.phases.host import Host
from eventedpleg.core.node.phases.nodeapi import AgentApi
from eventedpleg.k8s.agentapi import KubeAgentApi
from eventedpleg.k8s.client import api_client

# How the agent paces itself (AgentSettings), hidden: the defaults are the product's, tests shorten them.
_PACING = {
    "poll-seconds": AgentSettings.poll_seconds,
    "min-window-seconds": AgentSettings.min_window_seconds,
    "check-interval-seconds": AgentSettings.check_interval_seconds,
    "host-check-interval-seconds": AgentSettings.host_check_interval_seconds,
    "event-consumer-wait-seconds": AgentSettings.event_consumer_wait_seconds,
}

_OPTIONS = (
    click.option(
        "--node", envvar="NODE_NAME", required=True, help="This node's name (downward API spec.nodeName)."
    ),
    click.option("--kubeconfig", envvar="KUBECONFIG", default=None, help="Default: in-cluster credentials."),
    click.option("--context", default=None, help="The kubeconfig context to use. Default: its current one."),
    click.option(
        "--namespace",
        envvar="EVENTEDPLEG_NAMESPACE",
        default="evented-pleg-system",
        show_default=True,
        help="The operator's namespace (rendered-config ConfigMaps).",
    ),
    *(
        click.option(f"--{name}", default=default, show_default=True, type=float, hidden=True)
        for name, default in _PACING.items()
    ),
    click.option(
        "--event-consumer-check-seconds",
        default=AgentSettings.event_consumer_check_seconds,
        show_default=True,
        type=float,
        help="On containerd 1.7 with kubelet <= 1.36, look this often after Done for a second consumer of "
        "the runtime's event stream (it makes containerd log a goroutine dump); 0 = never.",
    ),
    click.option("--once", is_flag=True, help="Handle the node's current request and check once, then exit."),
    log_format_option,
    verbose_option,
)


@dataclass(frozen=True)
class AgentProcess:
    """What every agent command is told, from its options (all but the host)."""

    node: str
    kubeconfig: str | None
    settings: AgentSettings
    once: bool
    verbose: bool
    context: str | None = None
    log_format: str = "text"


def agent_command_options(command: Callable[..., None]) -> Callable[..., None]:
    """Add the options every agent command takes; the command receives them as one AgentProcess, first."""

    @functools.wraps(command)
    def from_options(
        *,
        node: str,
        kubeconfig: str | None,
        context: str | None,
        namespace: str,
        poll_seconds: float,
        min_window_seconds: float,
        check_interval_seconds: float,
        host_check_interval_seconds: float,
        event_consumer_wait_seconds: float,
        event_consumer_check_seconds: float,
        once: bool,
        log_format: str,
        verbose: bool,
        **own: Any,
    ) -> None:
        settings = AgentSettings(
            namespace=namespace,
            poll_seconds=poll_seconds,
            min_window_seconds=min_window_seconds,
            check_interval_seconds=check_interval_seconds,
            host_check_interval_seconds=host_check_interval_seconds,
            event_consumer_check_seconds=event_consumer_check_seconds,
            event_consumer_wait_seconds=event_consumer_wait_seconds,
        )
        command(AgentProcess(node, kubeconfig, settings, once, verbose, context, log_format), **own)

    wrapped: Callable[..., None] = from_options
    for option in reversed(_OPTIONS):
        wrapped = option(wrapped)
    return wrapped


def run_agent(
    process: AgentProcess,
    host: Host,
    *,
    health_port: int = 0,
    health_stale_seconds: float = 180.0,
    metrics_port: int = 0,
    metrics_host: str = health.METRICS_HOST,
    on_api: Callable[[AgentApi], None] | None = None,
) -> None:
    """Run the agent on `host` until SIGTERM/SIGINT (or one pass with `once`), once no other agent holds the
    host (agent.hostlock); with `health_port`, serve /healthz from the loop's heartbeat on the loopback, with
    `metrics_port` /metrics on `metrics_host` (agent.health: two listeners). `on_api` is given the agent's
    API once it exists (the real host reads its Node's addresses through it)."""
    logformat.configure(process.log_format, process.verbose)
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
    servers = [health.serve(beats, health_stale_seconds, health_port)] if health_port else []
    if metrics_port:
        servers.append(health.serve_metrics(metrics, metrics_port, metrics_host))
    try:
        with (
            hostlock.held(host.root, stop=stopping.is_set, waiting=lambda: beats.beat(health.LOOP)) as ours,
            api_client(process.kubeconfig, context=process.context) as client,
        ):
            if not ours:
                logging.getLogger(__name__).info("stopped by signal while another agent held the host")
                return
            api = KubeAgentApi(client, host=process.node)
            if on_api is not None:
                on_api(api)
            the_agent = Agent(process.node, host, api, process.settings, metrics=metrics)
            try:
                runner.run(the_agent, stop=stopping.is_set, once=process.once, beats=beats, idle=idle)
            except runner.Stopped:
                logging.getLogger(__name__).info("stopped by signal while idle")
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
        logging.getLogger(__name__).warning("could not mark %s stopped: %s", protocol.ANN_HOST_CHECK, exc)


@click.command(
    "agent",
    epilog=examples(
        (
            "as the chart's DaemonSet runs it (the host's / at /host, NODE_NAME from the downward API)",
            'eventedpleg agent --node "$NODE_NAME" --host-root /host --namespace evented-pleg-system',
        ),
        (
            "handle node-1's current request once and exit, logging JSON",
            "eventedpleg agent --node node-1 --host-root /host --once --log-format json",
        ),
    ),
)
@click.option(
    "--host-root",
    envvar="EVENTEDPLEG_HOST_ROOT",
    default="/",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the host's / is mounted. Commands run through `nsenter -t 1` unless it is /.",
)
@click.option(
    "--health-port",
    envvar="EVENTEDPLEG_HEALTH_PORT",
    default=0,
    show_default=True,
    type=int,
    help="Serve /healthz and /readyz on this port of the loopback (0: off).",
)
@click.option(
    "--metrics-port",
    envvar="EVENTEDPLEG_METRICS_PORT",
    default=0,
    show_default=True,
    type=int,
    help="Serve /metrics on this port, a listener of its own (0: off).",
)
@click.option(
    "--metrics-address",
    default=health.METRICS_HOST,
    show_default=True,
    help="The address /metrics listens on (the node's network: the pod uses hostNetwork).",
)
@click.option(
    "--health-stale-seconds",
    default=180.0,
    show_default=True,
    type=float,
    help="/healthz fails when the loop made no progress for this long (above the check interval + 30 s).",
)
@agent_command_options
def agent(
    process: AgentProcess,
    host_root: Path,
    health_port: int,
    health_stale_seconds: float,
    metrics_port: int,
    metrics_address: str,
) -> None:
    """Apply, verify and watch Evented PLEG on this node when the operator asks (node annotations)."""
    host = LinuxHost(host_root, nsenter=host_root.resolve() != Path("/"))
    run_agent(
        process,
        host,
        health_port=health_port,
        health_stale_seconds=health_stale_seconds,
        metrics_port=metrics_port,
        metrics_host=metrics_address,
        on_api=lambda api: host.identify_node(lambda: api.get_node(process.node)),
    )
