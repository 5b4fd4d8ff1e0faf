"""`eventedpleg crd`: print or check the generated CustomResourceDefinition."""

from __future__ import annotations

import sys

import click

from eventedpleg import crdgen


@click.group()
def crd() -> None:
    """The NodeConfig CustomResourceDefinition (generated from the API models)."""


@crd.command("print")
def print_crd() -> None:
    """Print the CRD YAML to standard output (pipe it to `kubectl apply -f -`)."""
    click.echo(crdgen.render_crd(), nl=False)


@crd.command("check")
def check() -> None:
    """Exit 1 when crds/ or the chart's copy differs from the models (source checkout only)."""
    sys.exit(crdgen.main(["--check"]))
