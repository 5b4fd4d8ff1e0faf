"""`eventedpleg agent`: the node agent (what the DaemonSet runs, one per node). Its options are parsed here;
agent.main builds the agent and runs it.

`agent_command_options` is shared with the lab's `eventedpleg sim-agent`, which runs the same agent
(agent.main.run) against a simulated host; the production command only ever drives the real one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from eventedpleg.agent import health
from eventedpleg.agent.agent import AgentSettings
from eventedpleg.agent.main import AgentProcess, Listeners, run_linux
from eventedpleg.cli import logformat
from eventedpleg.cli.examples import examples
from eventedpleg.cli.failures import verbose_option
from eventedpleg.cli.logformat import log_format_option

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


def agent_command_options(command: Callable[..., None]) -> Callable[..., None]:
    """Add the options every agent command takes; the log is set up as they say, and the command receives the
    others as one AgentProcess, first."""

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
        logformat.configure(log_format, verbose)
        command(AgentProcess(node, kubeconfig, settings, once, context), **own)

    wrapped: Callable[..., None] = from_options
    for option in reversed(_OPTIONS):
        wrapped = option(wrapped)
    return wrapped


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
    run_linux(process, host_root, Listeners(health_port, health_stale_seconds, metrics_port, metrics_address))
