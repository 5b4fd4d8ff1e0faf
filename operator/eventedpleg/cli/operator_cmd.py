"""`eventedpleg operator`: run the rollout operator (what the Deployment runs)."""

from __future__ import annotations

import sys

import click

from eventedpleg.cli import logformat
from eventedpleg.cli.examples import examples
from eventedpleg.cli.failures import verbose_option
from eventedpleg.cli.logformat import log_format_option
from eventedpleg.controller import main as controller
from eventedpleg.controller.probes import Thresholds
from eventedpleg.core.leaderelection import ElectionConfigError, ElectionTimings


@click.command(
    "operator",
    epilog=examples(
        (
            "as the chart's Deployment runs it (in-cluster credentials, one leader among the replicas)",
            'eventedpleg operator --namespace evented-pleg-system --identity "$POD_NAME" --leader-elect',
        ),
        (
            "on a workstation against a test cluster, alone, logging JSON",
            "eventedpleg operator --context kind-test --no-leader-elect --log-format json",
        ),
    ),
)
@click.option(
    "--namespace",
    envvar="EVENTEDPLEG_NAMESPACE",
    required=True,
    help="Where rendered ConfigMaps and the Lease live.",
)
@click.option("--kubeconfig", envvar="KUBECONFIG", default=None, help="Default: in-cluster credentials.")
@click.option("--context", default=None, help="The kubeconfig context to use. Default: its current one.")
@click.option("--metrics-port", envvar="EVENTEDPLEG_METRICS_PORT", default=8080, show_default=True, type=int)
@click.option("--leader-elect/--no-leader-elect", default=True, show_default=True)
@click.option("--identity", envvar="POD_NAME", default="", help="Lease holder identity (default: hostname).")
@click.option(
    "--lease-duration",
    default=15.0,
    show_default=True,
    type=float,
    help="A standby takes over after seeing the Lease unchanged this long (seconds).",
)
@click.option(
    "--renew-deadline",
    default=10.0,
    show_default=True,
    type=float,
    help="The leader stops acting when it could not renew for this long; less than --lease-duration.",
)
@click.option(
    "--retry-period", default=2.0, show_default=True, type=float, help="Seconds between Lease attempts."
)
@click.option(
    "--lease-request-timeout",
    default=5.0,
    show_default=True,
    type=float,
    help="Client-side timeout of each Lease request (seconds).",
)
@click.option(
    "--rollout-stale-seconds",
    default=120.0,
    show_default=True,
    type=float,
    help="/healthz fails when a rollout loop made no progress for this long.",
)
@click.option(
    "--informer-stale-seconds",
    default=420.0,
    show_default=True,
    type=float,
    help="/healthz fails when the node informer made no progress for this long.",
)
@click.option(
    "--allow-force-delete/--no-allow-force-delete",
    envvar="EVENTEDPLEG_ALLOW_FORCE_DELETE",
    default=False,
    show_default=True,
    help="Honour onTimeout: ForceDelete (needs RBAC pods delete; the chart's drain.allowForceDelete).",
)
@click.option(
    "--list-namespaces/--no-list-namespaces",
    envvar="EVENTEDPLEG_LIST_NAMESPACES",
    default=True,
    show_default=True,
    help="Honour drain.rules[].namespaceSelector (needs RBAC namespaces list; the chart's "
    "drain.listNamespaces). Off: a NodeConfig with one is refused in its status.",
)
@click.option(
    "--agent-namespace",
    envvar="EVENTEDPLEG_AGENT_NAMESPACE",
    default="",
    help="The agent DaemonSet's namespace, whose pods' readiness is watched (default: every namespace).",
)
@log_format_option
@verbose_option
def operator(
    namespace: str,
    kubeconfig: str | None,
    context: str | None,
    metrics_port: int,
    leader_elect: bool,
    identity: str,
    lease_duration: float,
    renew_deadline: float,
    retry_period: float,
    lease_request_timeout: float,
    rollout_stale_seconds: float,
    informer_stale_seconds: float,
    allow_force_delete: bool,
    list_namespaces: bool,
    agent_namespace: str,
    log_format: str,
    verbose: bool,
) -> None:
    """Watch NodeConfigs and Nodes and roll Evented PLEG out node by node."""
    logformat.configure(log_format, verbose)
    try:
        election = ElectionTimings(lease_duration, renew_deadline, retry_period, lease_request_timeout)
    except ElectionConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    options = controller.OperatorOptions(
        namespace=namespace,
        kubeconfig=kubeconfig,
        context=context,
        metrics_port=metrics_port,
        leader_elect=leader_elect,
        identity=identity,
        election=election,
        health=Thresholds(rollout_stale_seconds, informer_stale_seconds),
        allow_force_delete=allow_force_delete,
        list_namespaces=list_namespaces,
        agent_namespace=agent_namespace,
    )
    sys.exit(controller.run(options))
