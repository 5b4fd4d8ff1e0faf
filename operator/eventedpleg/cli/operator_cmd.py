"""`eventedpleg operator`: run the rollout operator (what the Deployment runs)."""

from __future__ import annotations

import logging
import sys

import click

from eventedpleg.cli.failures import verbose_option
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
@verbose_option
def operator(
    namespace: str,
    kubeconfig: str | None,
    metrics_port: int,
    leader_elect: bool,
    identity: str,
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
    )
    sys.exit(controller.run(options))
