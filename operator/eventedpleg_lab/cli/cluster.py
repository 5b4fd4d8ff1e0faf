"""`eventedpleg cluster`: a real local control plane (etcd, kube-apiserver, kcm, scheduler, kwok) to try the
operator without a cluster. Binaries are compiled from Go modules on first use and cached."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from eventedpleg.cli.examples import examples
from eventedpleg_lab.cli.errors import LabGroup
from eventedpleg_lab.localcluster import build
from eventedpleg_lab.localcluster import cluster as lc


def _default_dir() -> Path:
    return build.cache_dir() / "cluster"


_dir_option = click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="State directory (kubeconfig, PKI, etcd data, logs, PIDs). Default: <cache>/cluster.",
)


@click.group(
    cls=LabGroup,
    epilog=examples(
        ("compile the binaries once (about 10 minutes cold, cached afterwards)", "eventedpleg cluster build"),
        ("a control plane with 20 fake nodes; prints the kubeconfig", "eventedpleg cluster up --nodes 20"),
        ("stop it", "eventedpleg cluster down"),
    ),
)
def cluster() -> None:
    """A local Kubernetes control plane with kwok fake nodes (no containers run)."""


@cluster.command(
    "build",
    epilog=examples(
        ("compile or find etcd, the control plane, kwok and helm", "eventedpleg cluster build"),
        ("compile again even when cached", "eventedpleg cluster build --rebuild"),
    ),
)
@click.option("--rebuild", is_flag=True, help="Compile again even when cached.")
def build_cmd(rebuild: bool) -> None:
    """Compile (or find) etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok and helm.

    The first build takes about 10 minutes; binaries are cached in $EVENTEDPLEG_CACHE (default
    ~/.cache/eventedpleg). Binaries in $EVENTEDPLEG_BIN_DIR or $KUBEBUILDER_ASSETS are used instead.
    """
    try:
        found = build.ensure(rebuild=rebuild, log=lambda m: click.echo(m, err=True))
    except build.BuildError as exc:
        raise click.ClickException(str(exc)) from exc
    for name, path in found.paths.items():
        click.echo(f"{name:24} {path}")


@cluster.command(
    "up",
    epilog=examples(
        ("20 fake nodes, state in the default directory", "eventedpleg cluster up --nodes 20"),
        ("no nodes, state where you choose", "eventedpleg cluster up --nodes 0 --dir /tmp/epo-cluster"),
    ),
)
@click.option(
    "--nodes", "count", type=click.IntRange(0, 5000), default=5, show_default=True, help="Fake nodes."
)
@_dir_option
def up(count: int, directory: Path | None) -> None:
    """Start the control plane in the background and create fake nodes (the first is a control-plane node,
    the rest mix kubelet and runtime versions). Stop it with `eventedpleg cluster down`."""
    directory = directory or _default_dir()
    if lc.running_pids(directory):
        raise click.ClickException(
            f"a cluster is already running from {directory}; run `eventedpleg cluster down`"
        )
    lc.remove_state(directory)  # leftovers of a cluster that was not stopped cleanly
    started = time.monotonic()
    try:
        binaries = build.ensure(build.CONTROL_PLANE, log=lambda m: click.echo(m, err=True))
        local = lc.LocalCluster(directory, binaries, log=lambda m: click.echo(m, err=True), detach=True)
        click.echo(f"starting the control plane in {directory} ...", err=True)
        local.start()
        if count:
            names = local.add_nodes(lc.default_mix(count), timeout=max(60.0, count / 10))
            click.echo(f"{len(names)} fake nodes Ready", err=True)
    except (build.BuildError, lc.ClusterError, TimeoutError) as exc:
        raise click.ClickException(str(exc)) from exc
    kubeconfig = local.kubeconfig
    click.echo(
        f"control plane up in {time.monotonic() - started:.1f}s at {local.server}\n"
        f"kubeconfig: {kubeconfig}\n\n"
        f"  export KUBECONFIG={kubeconfig}\n"
        f"  kubectl get nodes -o wide\n\n"
        f"Logs: {directory / 'logs'}.  Stop with: eventedpleg cluster down"
        + (f" --dir {directory}" if directory != _default_dir() else "")
    )


@cluster.command(
    "down",
    epilog=examples(
        ("stop the control plane and remove its state", "eventedpleg cluster down"),
        ("stop it, keep the logs and etcd data", "eventedpleg cluster down --keep"),
    ),
)
@_dir_option
@click.option("--keep", is_flag=True, help="Keep the state directory (logs, etcd data) after stopping.")
def down(directory: Path | None, keep: bool) -> None:
    """Stop the processes `cluster up` recorded (by PID) and remove the state directory."""
    directory = directory or _default_dir()
    stopped = lc.stop(directory)
    click.echo(f"stopped: {', '.join(stopped)}" if stopped else f"nothing running from {directory}")
    if not keep:
        lc.remove_state(directory)


@cluster.command(
    "status",
    epilog=examples(("what runs, for the cluster in the default directory", "eventedpleg cluster status")),
)
@_dir_option
def status(directory: Path | None) -> None:
    """Show which components of the local control plane run, and where the kubeconfig is."""
    directory = directory or _default_dir()
    state = lc.load_state(directory)
    if state is None:
        click.echo(f"no cluster in {directory}")
        sys.exit(1)
    alive = lc.running_pids(directory)
    for proc in state["processes"]:
        mark = "running" if proc["name"] in alive else "STOPPED"
        click.echo(f"{proc['name']:24} pid {proc['pid']:<8} {mark}")
    click.echo(f"server:     {state['server']}\nkubeconfig: {state['kubeconfig']}")
    sys.exit(0 if len(alive) == len(state["processes"]) else 1)
