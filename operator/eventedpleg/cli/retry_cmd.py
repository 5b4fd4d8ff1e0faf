"""`eventedpleg retry NODECONFIG [--node N]...`: ask the operator to take failed nodes again
(core.rollout.retry), without editing node annotations. It writes one annotation on the NodeConfig; the
operator acts on it once per failure. Exit codes (eventedpleg.cli.failures): 0 asked (or nothing to
retry), 2 a named node is not in a failure of this NodeConfig, 5 API failures, 6 the NodeConfig, a named
node or the CRD not found."""

from __future__ import annotations

import sys

import click

from eventedpleg import protocol
from eventedpleg.cli.examples import examples
from eventedpleg.cli.failures import EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE, fail, verbose_option
from eventedpleg.cli.inspect import _nodeconfig, _views
from eventedpleg.cli.kubeflags import Kube, kube_options
from eventedpleg.core.rollout import retry
from eventedpleg.k8s import nodeconfigs
from eventedpleg.k8s.errors import Conflict

ATTEMPTS = 5  # read-modify-write against a NodeConfig whose status the operator keeps writing


@click.command(
    "retry",
    epilog=examples(
        (
            "every Failed, RolledBack or Skipped node of NodeConfig cluster, once the cause is fixed",
            "eventedpleg retry",
        ),
        ("only two nodes of NodeConfig gpu", "eventedpleg retry gpu --node node-1 --node node-2"),
    ),
)
@click.argument("name", default="cluster")
@click.option(
    "--node", "only", multiple=True, help="Retry only this node (repeatable). Default: every failed one."
)
@kube_options
@verbose_option
def retry_cmd(name: str, only: tuple[str, ...], kube: Kube, verbose: bool) -> None:
    """Take the Failed, RolledBack or Skipped nodes of a NodeConfig again, once the cause is fixed."""
    with kube.client() as api:
        for _ in range(ATTEMPTS):
            body = _nodeconfig(api, name)
            views = _views(api)
            known = {v.name: v for v in views}
            for node in only:
                if node not in known:
                    fail(f"node {node!r} not found (kubectl get nodes)", EXIT_NOT_FOUND)
                if not retry.retryable(known[node], name):
                    marks = known[node].marks
                    state, owner = marks.state.value if marks.state else "none", marks.owner or "none"
                    fail(
                        f"node {node!r} is not in a failure of NodeConfig {name!r} "
                        f"(state {state}, owner {owner}): {retry.way_out(known[node], name)}",
                        EXIT_USAGE,
                    )
            annotations = body["metadata"].get("annotations") or {}
            existing = retry.parse(annotations.get(protocol.ANN_RETRY))
            asked = retry.request(views, name, existing, frozenset(only))
            fresh = sorted(n for n in asked if n not in existing or existing[n] != asked[n])
            if not fresh:
                click.echo(
                    f"nothing to retry: no node of NodeConfig {name!r} is Failed, RolledBack or Skipped"
                )
                sys.exit(EXIT_OK)
            try:
                nodeconfigs.patch_annotations(
                    api,
                    name,
                    {protocol.ANN_RETRY: retry.encode(asked)},
                    str(body["metadata"]["resourceVersion"]),
                )
            except Conflict:
                continue  # the NodeConfig moved on (a status write): read it again
            click.echo(f"retry requested for {len(fresh)} node(s): {', '.join(fresh)}")
            click.echo(f"watch: eventedpleg status {name} --watch")
            sys.exit(EXIT_OK)
        fail(f"NodeConfig {name!r} kept changing; try again")
