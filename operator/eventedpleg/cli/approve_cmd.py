"""`eventedpleg approve NODE [--nodeconfig NAME]`: let a node be taken under spec.rollout.approval: Manual.
It records, in the NodeConfig's annotation eventedpleg.io/approved (core.rollout.approval), the node with
the config hash the NodeConfig rolls out now, so an approval holds for that config alone. Approving needs
`patch` on the NodeConfig, a right no node's own credential has (docs/security.md). Exit codes
(eventedpleg.cli.failures): 0 approved, 2 the NodeConfig has not rendered its present spec yet, 5 API
failures, 6 the node, the NodeConfig or the CRD not found."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import click

from eventedpleg import protocol
from eventedpleg.cli.examples import examples
from eventedpleg.cli.failures import EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE, fail, verbose_option
from eventedpleg.cli.inspect import _nodeconfig
from eventedpleg.cli.kubeflags import Kube, kube_options
from eventedpleg.core.rollout import approval
from eventedpleg.k8s import nodeconfigs, nodes
from eventedpleg.k8s.errors import Conflict, NotFound

ATTEMPTS = 5  # read-modify-write against a NodeConfig whose status the operator keeps writing


def approved_config(nodeconfig: Mapping[str, Any]) -> str:
    """The config hash an approval is for now, or "" when the operator has not acted on the NodeConfig's
    present spec yet (an approval would be for the config before it)."""
    meta = nodeconfig.get("metadata") or {}
    status = nodeconfig.get("status") or {}
    if not status.get("renderedHash") or status.get("observedGeneration") != meta.get("generation"):
        return ""
    return str(status["renderedHash"])


@click.command(
    "approve",
    epilog=examples(
        ("which nodes wait for an approval (AwaitingApproval)", "eventedpleg status cluster"),
        ("let node-1 be taken for NodeConfig cluster's present config", "eventedpleg approve node-1"),
        (
            "for another NodeConfig, through kubectl, in another context",
            "kubectl eventedpleg approve node-2 --nodeconfig gpu --context prod",
        ),
    ),
)
@click.argument("node")
@click.option(
    "--nodeconfig", "name", default="cluster", show_default=True, help="The NodeConfig approved for."
)
@kube_options
@verbose_option
def approve_cmd(node: str, name: str, kube: Kube, verbose: bool) -> None:
    """Let a node be taken for a NodeConfig's present config (spec.rollout.approval: Manual)."""
    with kube.client() as api:
        try:
            nodes.get_node(api, node)
        except NotFound:
            fail(f"node {node!r} not found (kubectl get nodes)", EXIT_NOT_FOUND)
        for _ in range(ATTEMPTS):
            body = _nodeconfig(api, name)
            config = approved_config(body)
            if not config:
                fail(
                    f"NodeConfig {name!r} has not rendered its present spec yet (status.observedGeneration "
                    "behind metadata.generation): try again in a few seconds",
                    EXIT_USAGE,
                )
            existing = approval.parse((body["metadata"].get("annotations") or {}).get(protocol.ANN_APPROVED))
            if existing.get(node) != config:
                try:
                    nodeconfigs.patch_annotations(
                        api,
                        name,
                        {protocol.ANN_APPROVED: approval.encode(approval.approve(existing, node, config))},
                        str(body["metadata"]["resourceVersion"]),
                    )
                except Conflict:
                    continue  # the NodeConfig moved on (a status write, another approval): read it again
            click.echo(f"node {node} approved for config {config} of NodeConfig {name}")
            click.echo(f"watch: eventedpleg status {name} --watch")
            sys.exit(EXIT_OK)
        fail(f"NodeConfig {name!r} kept changing; try again")
