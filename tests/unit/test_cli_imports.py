"""The read-only commands stay quick: their import graph leaves out kopf, the agent and the lab tools."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import json, sys
from click.testing import CliRunner
from eventedpleg.cli import main
result = CliRunner().invoke(main, [{command!r}, "--help"])
assert result.exit_code == 0, result.output
print(json.dumps(sorted(sys.modules)))
"""
HEAVY = ("kopf", "aiohttp", "eventedpleg.controller", "eventedpleg.agent", "eventedpleg.localcluster")


@pytest.mark.parametrize("command", ["status", "render", "preflight", "crd"])
def test_read_only_commands_do_not_import_the_operator_machinery(command: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(command=command)], capture_output=True, text=True, check=True
    )
    modules = json.loads(out.stdout)
    loaded = [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]
    assert loaded == []
    assert "eventedpleg.cli.inspect" in modules or command == "crd"


def test_every_command_is_listed_and_loads() -> None:
    from click.testing import CliRunner  # noqa: PLC0415

    from eventedpleg.cli import COMMANDS, main  # noqa: PLC0415

    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0, result.output
    for name in COMMANDS:
        assert f"  {name} " in result.output
