"""`eventedpleg lab`: the local control plane plus real nodes. `lab image` builds the operator's image for
them (cli/image.py)."""

from __future__ import annotations

import click

from eventedpleg_lab.cli.image import image_cmd


@click.group()
def lab() -> None:
    """A real cluster on this machine: real kubelets and runtimes in systemd-nspawn nodes."""


lab.add_command(image_cmd)
