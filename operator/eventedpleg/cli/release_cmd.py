"""`eventedpleg release-nodes`: give every Node back after the operator is gone: our cordon undone (a cordon
from before us kept), our taint, the autoscaler keys our cordon added, every `eventedpleg.io/*` annotation
and the state label removed, one conditional write per node (core.rollout.releasenodes builds it with the
operator's own release). The chart's cleanup.onUninstall hook runs it; docs/runbooks.md's break-glass page
starts with it. Exit codes (eventedpleg.cli.failures): 0 released (or nothing to do), 2 a NodeConfig still
exists (without --force), 5 API failures, or agents that did not go in time.

Two waits make it safe right after `helm uninstall`: an agent that exits marks its host check stopped on
its Node, so --wait-for-agents waits until none is left; and the API server's admission policy cache keeps
refusing our keys to anyone but the operator for a while after the node-keys policy is deleted, so a
refused write is tried again, with backoff, for --retry-seconds."""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from eventedpleg.cli.examples import examples
from eventedpleg.cli.failures import EXIT_API, EXIT_OK, EXIT_USAGE, fail, verbose_option
from eventedpleg.cli.kubeflags import Kube, kube_options
from eventedpleg.core.rollout.releasenodes import NodeRelease, release_node
from eventedpleg.k8s import nodeconfigs, nodes
from eventedpleg.k8s.errors import Conflict, Forbidden, NotFound, NotServed

BACKOFF = (1.0, 2.0, 4.0, 8.0)  # seconds between attempts of a refused write; the last repeats
AGENT_POLL = 2.0  # seconds between looks for agent pods


@click.command(
    "release-nodes",
    epilog=examples(
        ("what would be undone on each node, changing nothing", "eventedpleg release-nodes --dry-run"),
        (
            "after `helm uninstall`: wait for the agents to go, then give every node back",
            "eventedpleg release-nodes --wait-for-agents evented-pleg-agent",
        ),
        ("while NodeConfigs are left (no operator will act on them)", "eventedpleg release-nodes --force"),
    ),
)
@click.option("--dry-run", is_flag=True, help="List what would change on each node; change nothing.")
@click.option("--force", is_flag=True, help="Run even while NodeConfigs exist (their operator must be gone).")
@click.option(
    "--wait-for-agents",
    "agent_namespace",
    default=None,
    metavar="NAMESPACE",
    help="First wait until no agent pod is left in this namespace (they mark their Node as they exit).",
)
@click.option(
    "--timeout",
    default=300,
    show_default=True,
    type=click.IntRange(min=0),
    help="Seconds --wait-for-agents waits.",
)
@click.option(
    "--retry-seconds",
    default=60,
    show_default=True,
    type=click.IntRange(min=0),
    help="How long a refused write (403: the admission policy cache after uninstall) is tried again.",
)
@kube_options
@verbose_option
def release_cmd(
    dry_run: bool,
    force: bool,
    agent_namespace: str | None,
    timeout: int,
    retry_seconds: int,
    kube: Kube,
    verbose: bool,
) -> None:
    """Give every node back after the operator is gone: undo our cordon, taint and marks."""
    with kube.client() as api:
        left = [] if force else _nodeconfigs(api)
        if left:
            fail(
                f"NodeConfigs still exist ({', '.join(left)}): they own the nodes. Delete them first "
                "(kubectl delete nodeconfigs --all), or --force when no operator runs any more",
                EXIT_USAGE,
            )
        if agent_namespace and not dry_run:
            _wait_for_agents(api, agent_namespace, timeout)
        planned = [r for body in nodes.list_nodes(api) if (r := release_node(body)) is not None]
        if not planned:
            click.echo("no node carries marks of eventedpleg")
        for release in planned:
            if dry_run:
                click.echo(f"node {release.node} (dry run): {'; '.join(release.changes)}")
            elif (done := _release(api, release, retry_seconds)) is not None:
                click.echo(f"node {done.node}: {'; '.join(done.changes)}")
        sys.exit(EXIT_OK)


def _nodeconfigs(api: Any) -> list[str]:
    try:
        return nodeconfigs.names(api)
    except NotServed:
        return []  # the CRD is gone: no NodeConfig can be left


def _wait_for_agents(api: Any, namespace: str, timeout: int) -> None:
    deadline = time.monotonic() + timeout
    while pods := nodes.agent_pods_in(api, namespace):
        if time.monotonic() >= deadline:
            names = ", ".join(str(p["metadata"]["name"]) for p in pods)
            fail(f"agent pods still in namespace {namespace} after {timeout}s: {names}", EXIT_API)
        click.echo(f"waiting for {len(pods)} agent pod(s) in namespace {namespace} to go")
        time.sleep(AGENT_POLL)


def _release(api: Any, release: NodeRelease | None, retry_seconds: int) -> NodeRelease | None:
    """Write one node's release; on 409 read the node again and plan again, on 403 wait and try again
    until `retry_seconds` have passed. Returns what was written (None: nothing was left to do)."""
    deadline = time.monotonic() + retry_seconds
    attempt = 0
    while release is not None:
        try:
            nodes.patch_node(api, release.node, nodes.write_patch(release.write, release.resource_version))
            return release
        except Conflict:
            pass  # the node changed since it was read: plan again on what it is now
        except Forbidden as exc:
            if time.monotonic() >= deadline:
                fail(f"node {release.node}: refused for {retry_seconds}s: {exc.message}", EXIT_API)
            delay = BACKOFF[min(attempt, len(BACKOFF) - 1)]
            click.echo(f"node {release.node}: refused ({exc.message}); again in {delay:.0f}s", err=True)
            time.sleep(delay)
            attempt += 1
        try:
            release = release_node(nodes.get_node(api, release.node))
        except NotFound:
            return None  # the node went away meanwhile
    return None
