"""`eventedpleg operator` and `eventedpleg --help` load neither the lab nor `cryptography`, even with the lab
installed (it is, in the development venv: hack/venv.sh installs both distributions). Each check runs in a
fresh interpreter, so nothing this test session imported can hide or fake a load."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

import pytest

PROBE = """
import contextlib, io, json, sys
from eventedpleg.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
    main(ARGV, prog_name="eventedpleg")
for name in LOAD:
    main.get_command(None, name)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("eventedpleg_lab", "cryptography"))
print(json.dumps({"help": out.getvalue(), "loaded": loaded, "modules": sorted(sys.modules)}))
"""


@dataclass(frozen=True)
class Probe:
    help: str
    loaded: list[str]  # eventedpleg_lab and cryptography modules
    modules: list[str]  # every module


def probe(argv: list[str], load: tuple[str, ...] = ()) -> Probe:
    code = PROBE.replace("ARGV", repr(argv)).replace("LOAD", repr(load))
    argv = [sys.executable, "-c", code]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    return Probe(**json.loads(done.stdout))


def test_the_operator_command_loads_no_lab_and_no_cryptography() -> None:
    # `operator --help` resolves and parses the very command the Deployment runs; loading it again by name
    # imports the module that `eventedpleg operator` executes (eventedpleg.controller.main).
    result = probe(["operator", "--help"], load=("operator",))
    assert "--leader-elect" in result.help
    assert "eventedpleg.controller.main" in result.modules
    assert result.loaded == []


def test_top_level_help_lists_the_lab_commands_without_loading_them() -> None:
    result = probe(["--help"])
    text = result.help
    assert "operator" in text and "status" in text
    lab_section = text[text.index("Lab commands") :]
    for name in ("cluster", "demo", "lab", "realnode", "sim-agent"):
        assert name in lab_section, name
    assert result.loaded == []


def test_running_a_lab_command_does_load_the_lab() -> None:
    """The probe sees a lab load when there is one: the empty lists above are not a blind check.
    (`cluster` holds the control plane's certificates, hence `cryptography`.)"""
    result = probe(["cluster", "--help"])
    assert "eventedpleg_lab.cli.cluster" in result.loaded
    assert "cryptography" in result.loaded


READ_ONLY_PROBE = """
import json, sys
from click.testing import CliRunner
from eventedpleg.cli import main
result = CliRunner().invoke(main, [{command!r}, "--help"])
assert result.exit_code == 0, result.output
print(json.dumps(sorted(sys.modules)))
"""
HEAVY = ("kopf", "aiohttp", "eventedpleg.controller", "eventedpleg.agent", "eventedpleg_lab", "jinja2")


@pytest.mark.parametrize("command", ["status", "render", "preflight", "crd"])
def test_read_only_commands_do_not_import_the_operator_machinery(command: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", READ_ONLY_PROBE.format(command=command)],
        capture_output=True,
        text=True,
        check=True,
    )
    modules = json.loads(out.stdout)
    loaded = [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]
    assert loaded == []
    assert "eventedpleg.cli.inspect" in modules or command == "crd"


def test_the_listed_summaries_are_the_commands_own() -> None:
    """`eventedpleg --help` lists summaries without importing the commands; they must not drift."""
    from eventedpleg.cli import COMMANDS, SUMMARIES, main  # noqa: PLC0415

    assert set(SUMMARIES) == set(COMMANDS)
    for name in COMMANDS:
        command = main.get_command(None, name)  # type: ignore[arg-type]
        assert command is not None and command.get_short_help_str(200) == SUMMARIES[name], name


def test_top_level_help_imports_no_command() -> None:
    result = probe(["--help"])
    assert "retry" in result.help and "Take the Failed" in result.help
    imported = [m for m in result.modules if m.startswith(("kopf", "kubernetes", "eventedpleg.controller"))]
    assert imported == []
