"""The `eventedpleg` command. Each subcommand lives in its own module, imported only when that command runs:
`eventedpleg status` must not pay for kopf, the agent or the lab tools (docs: README "Command line")."""

from __future__ import annotations

import importlib

import click

from eventedpleg import __version__
from eventedpleg.cli.failures import verbose_option

# name -> "module:attribute". Importing a module is deferred until its command is looked up.
COMMANDS = {
    "agent": "eventedpleg.cli.agent:agent",
    "cluster": "eventedpleg.cli.cluster:cluster",
    "crd": "eventedpleg.cli.crd:crd",
    "demo": "eventedpleg.cli.demo:demo",
    "operator": "eventedpleg.cli.operator_cmd:operator",
    "preflight": "eventedpleg.cli.inspect:preflight",
    "realnode": "eventedpleg.cli.realnode:realnode",
    "render": "eventedpleg.cli.inspect:render_cmd",
    "status": "eventedpleg.cli.inspect:status",
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported by name on first use."""

    def __init__(self, *args: object, lazy: dict[str, str], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            module, _, attribute = self.lazy[cmd_name].partition(":")
            command = getattr(importlib.import_module(module), attribute)
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:
            from eventedpleg.cli.failures import report  # noqa: PLC0415

            report(exc, ctx)


@click.group(
    cls=LazyGroup,
    lazy=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
)
@click.version_option(__version__, prog_name="eventedpleg")
@verbose_option
def main(verbose: bool) -> None:
    """Turn on the kubelet's Evented PLEG across a cluster, safely, node by node."""
