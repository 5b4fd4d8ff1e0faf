"""Every command of `eventedpleg` (the lab's too, installed in the development venv) has an Examples section
in its --help, and every example is a command line that command accepts: its subcommand path, options it
has and no more arguments than it takes. Parsed by click itself, run nowhere."""

from __future__ import annotations

import shlex
from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from eventedpleg.cli import main


def commands(
    group: click.Group = main, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield path, group
    ctx = click.Context(group, info_name="eventedpleg")
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))
        else:
            yield (*path, name), command
    if group is main:  # the lab's, listed apart from the production commands
        from eventedpleg.cli import lab_commands  # noqa: PLC0415

        for name in sorted(lab_commands()):
            command = main.get_command(ctx, name)
            assert command is not None, name
            if isinstance(command, click.Group):
                yield from commands(command, (name,))
            else:
                yield (name,), command


ALL = dict(commands())


def examples_of(help_text: str) -> list[str]:
    """The command lines of the Examples section (the lines under it that are not comments)."""
    section = help_text.split("Examples:", 1)[1]
    return [
        line.strip() for line in section.splitlines() if line.strip() and not line.strip().startswith("#")
    ]


def test_the_walk_finds_the_production_and_the_lab_commands() -> None:
    assert {("status",), ("crd", "print"), ("approve",), ("cluster", "up"), ("lab", "image")} <= set(ALL)


@pytest.mark.parametrize("path", sorted(ALL), ids=lambda p: " ".join(p) or "eventedpleg")
def test_every_command_help_has_examples_it_accepts(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(main, [*path, "--help"], prog_name="eventedpleg")
    assert result.exit_code == 0, result.output
    assert "Examples:" in result.output, f"eventedpleg {' '.join(path)} --help has no Examples section"
    runs = []
    for line in examples_of(result.output):
        words = shlex.split(line.split(" | ")[0])  # the eventedpleg part of a pipeline
        if words[0] == "kubectl":  # the kubectl plugin: `kubectl eventedpleg ...`
            words = words[1:]
        assert words[0] == "eventedpleg", line
        args = words[1:]
        runs.append(tuple(args[: len(path)]))
        command: click.Command = main
        while isinstance(command, click.Group) and args and not args[0].startswith("-"):
            sub = command.get_command(click.Context(command), args[0])
            assert sub is not None, line
            command, args = sub, args[1:]
        ctx = click.Context(command, info_name=command.name)
        _, rest, _ = command.make_parser(ctx).parse_args(args)  # an unknown option raises NoSuchOption
        arguments = [p for p in command.params if isinstance(p, click.Argument)]
        assert len(rest) <= sum(max(p.nargs, 0) for p in arguments), (line, rest)
    assert path in runs, (
        f"no example runs eventedpleg {' '.join(path)}"
    )  # another command's may lead up to it
