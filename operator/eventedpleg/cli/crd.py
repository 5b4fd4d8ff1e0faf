"""`eventedpleg crd`: print or check the generated CustomResourceDefinition."""

from __future__ import annotations

import sys

import click

from eventedpleg import crdgen
from eventedpleg.cli.examples import examples


@click.group(
    epilog=examples(
        (
            "install or upgrade the CRD without the chart (crds.enabled: false)",
            "eventedpleg crd print | kubectl apply --server-side -f -",
        ),
        ("in a source checkout: is crds/ up to date with the models?", "eventedpleg crd check"),
    )
)
def crd() -> None:
    """The NodeConfig CustomResourceDefinition (generated from the API models)."""


@crd.command(
    "print",
    epilog=examples(
        ("apply it", "eventedpleg crd print | kubectl apply --server-side -f -"),
        ("what would change on the cluster", "eventedpleg crd print | kubectl diff -f -"),
    ),
)
def print_crd() -> None:
    """Print the CRD YAML to standard output (pipe it to `kubectl apply -f -`)."""
    click.echo(crdgen.render_crd(), nl=False)


@crd.command(
    "check",
    epilog=examples(
        (
            "after editing operator/eventedpleg/models/ (exit 1: run python -m eventedpleg.crdgen)",
            "eventedpleg crd check",
        )
    ),
)
def check() -> None:
    """Exit 1 when crds/ or the chart's copy differs from the models (source checkout only)."""
    sys.exit(crdgen.main(["--check"]))
