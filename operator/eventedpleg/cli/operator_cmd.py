"""`eventedpleg operator`: run the rollout operator (what the Deployment runs)."""

from __future__ import annotations

import logging
import sys

import click

from eventedpleg.controller import main as controller


@click.command("operator")
@click.option(
    "--namespace",
    envvar="EVENTEDPLEG_NAMESPACE",
    required=True,
    help="Where rendered ConfigMaps and the Lease live.",
)
@click.option("--kubeconfig", envvar="KUBECONFIG", default=None, help="Default: in-cluster credentials.")
@click.option("--metrics-port", envvar="EVENTEDPLEG_METRICS_PORT", default=8080, show_default=True, type=int)
@click.option("--leader-elect/--no-leader-elect", default=True, show_default=True)
@click.option("--identity", envvar="POD_NAME", default="", help="Lease holder identity (default: hostname).")
@click.option(
    "--allow-force-delete/--no-allow-force-delete",
    envvar="EVENTEDPLEG_ALLOW_FORCE_DELETE",
    default=False,
    show_default=True,
    help="Honour onTimeout: ForceDelete (needs RBAC pods delete; the chart's drain.allowForceDelete).",
)
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def operator(
    namespace: str,
    kubeconfig: str | None,
    metrics_port: int,
    leader_elect: bool,
    identity: str,
    allow_force_delete: bool,
    verbose: bool,
) -> None:
    """Watch NodeConfigs and Nodes and roll Evented PLEG out node by node."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    options = controller.OperatorOptions(
        namespace=namespace,
        kubeconfig=kubeconfig,
        metrics_port=metrics_port,
        leader_elect=leader_elect,
        identity=identity,
        allow_force_delete=allow_force_delete,
    )
    sys.exit(controller.run(options))
