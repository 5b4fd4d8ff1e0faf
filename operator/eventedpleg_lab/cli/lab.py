"""`eventedpleg lab`: the local control plane plus real nodes (systemd-nspawn machines with systemd as PID 1,
containerd or CRI-O, a kubelet joined with its own node certificate). Linux and root only. docs/lab.md."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import click

from eventedpleg.cli.examples import examples
from eventedpleg_lab.cli.errors import LabGroup
from eventedpleg_lab.cli.image import image_cmd
from eventedpleg_lab.lab import nodes
from eventedpleg_lab.lab.assets import AssetError
from eventedpleg_lab.lab.lab import Lab, LabError, default_dir
from eventedpleg_lab.localcluster.build import BuildError
from eventedpleg_lab.localcluster.cluster import ClusterError


def _log(message: str) -> None:
    click.echo(message, err=True)


_DIR = click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help=f"State directory [default: {default_dir()}].",
)


@click.group(
    cls=LabGroup,
    epilog=examples(
        ("build the parts once, then start the control plane and the real nodes", "eventedpleg lab up"),
        ("what runs", "eventedpleg lab status"),
        ("stop everything and check that nothing is left", "eventedpleg lab down"),
    ),
)
def lab() -> None:
    """A real cluster on this machine: real kubelets and runtimes in systemd-nspawn nodes."""


@lab.command(
    "build",
    epilog=examples(
        ("what the default nodes are made from", "eventedpleg lab build"),
        (
            "for one containerd 2.2 node with kubelet 1.37",
            "eventedpleg lab build --nodes lab-c22:1.37:containerd-2.2",
        ),
    ),
)
@click.option(
    "--nodes",
    "spec",
    default=nodes.DEFAULT_SPEC,
    show_default=True,
    help="Build what this node set needs (the same syntax as `lab up --nodes`).",
)
def build_cmd(spec: str) -> None:
    """Build or find in the cache what the nodes are made from (rootfs, nspawn, CRI-O, kubelets, runtimes)."""
    try:
        specs = nodes.parse(spec)
    except nodes.SpecError as exc:
        raise click.BadParameter(str(exc), param_hint="--nodes") from exc
    start = time.monotonic()
    try:
        Lab(None, log=_log).prepare(specs)
    except (AssetError, BuildError, subprocess.CalledProcessError) as exc:
        raise click.ClickException(str(exc)) from exc
    _log(f"[lab] built in {time.monotonic() - start:.0f}s")


@lab.command(
    "up",
    epilog=examples(
        ("the default nodes", "eventedpleg lab up"),
        (
            "one containerd 2.2 node joined by kubeadm, ten minutes to be Ready",
            "eventedpleg lab up --nodes lab-c22:1.36:containerd-2.2:kubeadm --timeout 600",
        ),
    ),
)
@_DIR
@click.option(
    "--nodes",
    "spec",
    default=nodes.DEFAULT_SPEC,
    show_default=True,
    help="Comma-separated NAME:KUBELET:RUNTIME[:admin-pod-events-off|:kubeadm].",
)
@click.option(
    "--timeout", default=300.0, show_default=True, help="Seconds to wait for the nodes to be Ready."
)
def up(directory: Path | None, spec: str, timeout: float) -> None:
    """Build or find the cached parts, start the control plane, boot the nodes, wait until they are Ready."""
    try:
        specs = nodes.parse(spec)
    except nodes.SpecError as exc:
        raise click.BadParameter(str(exc), param_hint="--nodes") from exc
    the_lab = Lab(directory, log=_log)
    start = time.monotonic()
    try:
        state = the_lab.up(specs, timeout=timeout)
    except (LabError, AssetError, BuildError, ClusterError, subprocess.CalledProcessError) as exc:
        raise click.ClickException(str(exc)) from exc
    _log(f"[lab] up in {time.monotonic() - start:.0f}s: {json.dumps(state.timings)}")
    click.echo(f"export KUBECONFIG={the_lab.kubeconfig}")


@lab.command(
    "load",
    epilog=examples(
        (
            "the image `eventedpleg lab image --out epo.tar` built, into every node's runtime",
            "eventedpleg lab load --archive epo.tar --ref localhost/evented-pleg-operator:0.1.0",
        ),
    ),
)
@_DIR
@click.option("--archive", type=click.Path(dir_okay=False, exists=True, path_type=Path), required=True)
@click.option("--ref", required=True, help="The name pods use, e.g. localhost/evented-pleg-operator:0.1.0.")
def load(directory: Path | None, archive: Path, ref: str) -> None:
    """Import an OCI image archive into every node's runtime (containerd: ctr; CRI-O: skopeo)."""
    try:
        Lab(directory, log=_log).load_image(archive, ref)
    except LabError as exc:
        raise click.ClickException(str(exc)) from exc


@lab.command("status", epilog=examples(("PIDs and addresses, as JSON", "eventedpleg lab status")))
@_DIR
def status(directory: Path | None) -> None:
    """JSON: control-plane PIDs, and per node its nspawn PID, systemd state, Ready, versions."""
    click.echo(json.dumps(Lab(directory, log=_log).status(), indent=2))


@lab.command("down", epilog=examples(("stop the nodes and the control plane", "eventedpleg lab down")))
@_DIR
def down(directory: Path | None) -> None:
    """Stop the nodes and the control plane; exits 1 and lists what is left if anything is."""
    start = time.monotonic()
    left = Lab(directory, log=_log).down()
    if left:
        for item in left:
            click.echo(f"left behind: {item}", err=True)
        raise SystemExit(1)
    _log(f"[lab] down in {time.monotonic() - start:.0f}s; nothing left behind")


lab.add_command(image_cmd)
