"""The `eventedpleg` command. Subcommands are imported only when they run (or when --help lists them), so
`eventedpleg status` loads the status code alone and `eventedpleg operator` never loads the lab.

The lab's commands (distribution evented-pleg-lab: cluster, demo, realnode, sim-agent) join through the
`eventedpleg.commands` entry-point group. `eventedpleg --help` lists them by name without loading them.
"""

from __future__ import annotations

import importlib
from importlib import metadata

import click

from eventedpleg import __version__
from eventedpleg.cli.examples import examples
from eventedpleg.cli.failures import verbose_option

LAB_COMMANDS = "eventedpleg.commands"  # the entry-point group the lab's distribution registers in
# name -> "module:attribute" of the production commands.
COMMANDS = {
    "agent": "eventedpleg.cli.agent:agent",
    "approve": "eventedpleg.cli.approve_cmd:approve_cmd",
    "crd": "eventedpleg.cli.crd:crd",
    "operator": "eventedpleg.cli.operator_cmd:operator",
    "preflight": "eventedpleg.cli.inspect:preflight",
    "release-nodes": "eventedpleg.cli.release_cmd:release_cmd",
    "render": "eventedpleg.cli.inspect:render_cmd",
    "retry": "eventedpleg.cli.retry_cmd:retry_cmd",
    "status": "eventedpleg.cli.inspect:status",
}
# The one-line summaries `eventedpleg --help` lists, so that listing them imports no command (the operator
# and agent commands pull in kopf and the kubernetes client: seconds). tests/unit/cli/test_cli_imports.py
# checks each against the command's own first docstring line.
SUMMARIES = {
    "approve": "Let a node be taken for a NodeConfig's present config (spec.rollout.approval: Manual).",
    "agent": "Apply, verify and watch Evented PLEG on this node when the operator asks (node annotations).",
    "crd": "The NodeConfig CustomResourceDefinition (generated from the API models).",
    "operator": "Watch NodeConfigs and Nodes and roll Evented PLEG out node by node.",
    "preflight": "Per-node verdicts from the compatibility matrix: what would be changed, skipped, and why.",
    "release-nodes": "Give every node back after the operator is gone: undo our cordon, taint and marks.",
    "render": "The exact drop-ins a node would get, and where they go.",
    "retry": "Take the Failed, RolledBack or Skipped nodes of a NodeConfig again, once the cause is fixed.",
    "status": "Conditions and per-node progress of a NodeConfig (default: `cluster`).",
}


def lab_commands() -> dict[str, metadata.EntryPoint]:
    """The installed lab commands; a production name always wins over a lab entry of the same name."""
    return {ep.name: ep for ep in metadata.entry_points(group=LAB_COMMANDS) if ep.name not in COMMANDS}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS:
            module, _, attribute = COMMANDS[cmd_name].partition(":")
            command = getattr(importlib.import_module(module), attribute)
        elif (entry := lab_commands().get(cmd_name)) is not None:
            command = entry.load()
        else:
            return None
        assert isinstance(command, click.Command), COMMANDS.get(cmd_name, cmd_name)
        return command

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:
            from eventedpleg.cli.failures import report  # noqa: PLC0415

            report(exc, ctx)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's own would import every command for its summary; ours are in SUMMARIES."""
        with formatter.section("Commands"):
            formatter.write_dl([(name, SUMMARIES[name]) for name in self.list_commands(ctx)])
        if lab := sorted(lab_commands()):
            with formatter.section("Lab commands (evented-pleg-lab; `eventedpleg COMMAND --help` for each)"):
                formatter.write_text(", ".join(lab))


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
    epilog=examples(
        ("what a rollout would do on each node, before any NodeConfig exists", "eventedpleg preflight"),
        ("follow a rollout until it is Ready", "eventedpleg status cluster --watch"),
        (
            "NodeConfig cluster as YAML, through kubectl (plugin kubectl-eventedpleg), in another context",
            "kubectl eventedpleg status --context prod -o yaml",
        ),
        ("the options and examples of one command", "eventedpleg status --help"),
    ),
)
@click.version_option(__version__, prog_name="eventedpleg")
@verbose_option
def main(verbose: bool) -> None:
    """Turn on the kubelet's Evented PLEG across a cluster, safely, node by node."""


def kubectl_plugin() -> None:
    """`kubectl eventedpleg ...`: kubectl finds `kubectl-eventedpleg` on PATH and runs it with the rest of
    the command line; help and completion name it as the user typed it."""
    main(prog_name="kubectl eventedpleg", complete_var="_KUBECTL_EVENTEDPLEG_COMPLETE")
