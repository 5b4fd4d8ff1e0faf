"""`eventedpleg demo`: the main job on an embedded default, start to finish, on this machine."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from eventedpleg.cli.examples import examples
from eventedpleg_lab.cli.errors import LabCommand
from eventedpleg_lab.demo import run as demo_run


@click.command(
    cls=LabCommand,
    epilog=examples(
        ("10 kwok nodes and simulated agents on a local control plane", "eventedpleg demo"),
        (
            "30 nodes; wait for Enter before tearing down, to look around with kubectl",
            "eventedpleg demo --nodes 30 --keep",
        ),
        ("real nodes (Linux, root)", "eventedpleg demo --lab"),
    ),
)
@click.option(
    "--nodes", default=10, show_default=True, type=click.IntRange(2, 200), help="kwok nodes to create."
)
@click.option(
    "--timeout", default=None, type=int, help="Seconds to wait for Available [default: 600; 1200 with --lab]."
)
@click.option(
    "--dir", "directory", default=None, type=click.Path(file_okay=False, path_type=Path),
    help="Keep the cluster state, operator log and simulated hosts here (default: a temp dir, removed).",
)  # fmt: skip
@click.option("--keep", is_flag=True, help="Wait for Enter before tearing down (inspect with kubectl).")
@click.option(
    "--lab", is_flag=True,
    help="Real nodes instead (Linux, root): `eventedpleg lab` nodes, the image built from the Dockerfile, "
    "`helm install`. --nodes and --dir do not apply.",
)  # fmt: skip
def demo(nodes: int, timeout: int | None, directory: Path | None, keep: bool, lab: bool) -> None:
    """Local control plane + kwok nodes with simulated hosts and agents + the operator: a live rollout.

    The first run builds etcd, Kubernetes, kwok and helm from Go modules (about 15 minutes on 2 cores);
    later runs start in seconds. Exit code 0 only when the NodeConfig reached Available.
    """
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if lab:
        from eventedpleg_lab.lab import demo as lab_demo  # noqa: PLC0415  (its imports are heavier)

        sys.exit(lab_demo.run(lab_demo.LabDemoOptions(timeout=timeout or 1200, keep=keep)))
    sys.exit(
        demo_run.run(
            demo_run.DemoOptions(nodes=nodes, timeout=timeout or 600, directory=directory, keep=keep)
        )
    )
