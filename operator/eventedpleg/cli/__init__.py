"""The `eventedpleg` command. Each subcommand group lives in its own module and is registered here."""

from __future__ import annotations

import click

from eventedpleg import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="eventedpleg")
def main() -> None:
    """Turn on the kubelet's Evented PLEG across a cluster, safely, node by node."""


def _register() -> None:
    from eventedpleg.cli import crd  # noqa: PLC0415 - subcommands register themselves on import
    from eventedpleg.cli.agent import agent  # noqa: PLC0415
    from eventedpleg.cli.cluster import cluster  # noqa: PLC0415
    from eventedpleg.cli.demo import demo  # noqa: PLC0415
    from eventedpleg.cli.inspect import preflight, render_cmd, status  # noqa: PLC0415
    from eventedpleg.cli.operator_cmd import operator  # noqa: PLC0415
    from eventedpleg.cli.realnode import realnode  # noqa: PLC0415

    main.add_command(crd.crd)
    main.add_command(agent)
    main.add_command(cluster)
    main.add_command(operator)
    main.add_command(realnode)
    main.add_command(demo)
    main.add_command(preflight)
    main.add_command(status)
    main.add_command(render_cmd)


_register()
