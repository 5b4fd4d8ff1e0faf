"""`eventedpleg demo`: the main job on an embedded default, start to finish, on this machine."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from eventedpleg_lab.demo import run as demo_run


@click.command()
@click.option(
    "--nodes", default=10, show_default=True, type=click.IntRange(2, 200), help="kwok nodes to create."
)
@click.option("--timeout", default=600, show_default=True, type=int, help="Seconds to wait for Available.")
@click.option(
    "--dir", "directory", default=None, type=click.Path(file_okay=False, path_type=Path),
    help="Keep the cluster state, operator log and simulated hosts here (default: a temp dir, removed).",
)  # fmt: skip
@click.option("--keep", is_flag=True, help="Wait for Enter before tearing down (inspect with kubectl).")
def demo(nodes: int, timeout: int, directory: Path | None, keep: bool) -> None:
    """Local control plane + kwok nodes with simulated hosts and agents + the operator: a live rollout.

    The first run builds etcd, Kubernetes, kwok and helm from Go modules (about 15 minutes on 2 cores);
    later runs start in seconds. Exit code 0 only when the NodeConfig reached Available.
    """
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    sys.exit(demo_run.run(demo_run.DemoOptions(nodes=nodes, timeout=timeout, directory=directory, keep=keep)))
