"""The install as the documentation gives it, as commands a test runs: the README's install block and the
commands the chart's NOTES print after `helm install`. Pure text in, commands out; the lab tier runs
them (tests/lab/test_lab_readme_install.py).

Only the substitutions a user makes are made, each declared with why (`Substitution`), and each must
match, so a README that changes under them fails the test rather than running something else.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

README_HEADING = "### Install and watch"
# A command line in NOTES.txt: indented, and starting with one of the tools the install uses.
NOTES_COMMAND = re.compile(r"^\s+((?:kubectl|helm|eventedpleg) .+)$", re.MULTILINE)


class InstallDocError(ValueError):
    """The documentation is not what this module can run (no block, a substitution that matches nothing)."""


@dataclass(frozen=True)
class Substitution:
    """One change a user makes to a documented command: `pattern` (a regex over one command) replaced by
    `replacement`; a command that becomes empty is dropped."""

    pattern: str
    replacement: str
    why: str


def readme_substitutions(registry: str) -> tuple[Substitution, ...]:
    """What the lab changes in the README's block, as a user on it would."""
    return (
        Substitution(
            r"^sudo bash hack/release\.sh .*$",
            "",
            "the release is made beforehand by this same script, as root (release.ensure); the block runs"
            " from a copy of its directory, with no checkout",
        ),
        Substitution(r"registry\.example", registry, "the registry the nodes pull from"),
        Substitution(r"^crane push ", "crane push --insecure ", "that registry speaks plain HTTP"),
    )


def readme_block(readme: str, heading: str = README_HEADING) -> str:
    """The first ```bash block after `heading`."""
    at = readme.find(f"\n{heading}\n")
    if at < 0:
        raise InstallDocError(f"no section {heading!r}")
    found = re.search(r"^```bash\n(.*?)^```$", readme[at:], flags=re.MULTILINE | re.DOTALL)
    if found is None:
        raise InstallDocError(f"no ```bash block after {heading!r}")
    return found.group(1)


def commands(block: str) -> list[str]:
    """One entry per command of a shell block: continuation lines (a trailing backslash) joined, blank
    lines dropped. Comments stay: the shell ignores them."""
    joined = re.sub(r"\\\n\s*", "", block)
    return [line.strip() for line in joined.splitlines() if line.strip()]


def substitute(cmds: Sequence[str], subs: Sequence[Substitution]) -> list[str]:
    """`cmds` with every substitution made; InstallDocError names one that matches no command."""
    out = list(cmds)
    for sub in subs:
        matched = False
        for i, cmd in enumerate(out):
            new, n = re.subn(sub.pattern, sub.replacement, cmd)
            matched = matched or n > 0
            out[i] = new.strip()
        if not matched:
            raise InstallDocError(f"the substitution {sub.pattern!r} ({sub.why}) matches no command")
    return [cmd for cmd in out if cmd]


def notes(helm_install_output: str) -> str:
    """The rendered NOTES in `helm install`'s output."""
    _, sep, tail = helm_install_output.partition("\nNOTES:\n")
    if not sep:
        raise InstallDocError("no NOTES in helm install's output")
    return tail


def notes_commands(rendered_notes: str) -> list[str]:
    """Every command the NOTES print, in order."""
    return [cmd.strip() for cmd in NOTES_COMMAND.findall(rendered_notes)]


def script(cmds: Sequence[str], marker: str) -> str:
    """A bash script running `cmds` in order as a pasted block runs: each command whatever the exit code of
    the one before (a shell does not stop at one, and some report with theirs, as `eventedpleg preflight`
    does), each announced on stdout by `marker` and its index, its exit code after it (`split_output`).
    Each command's stderr joins its stdout, as on a terminal, so a failing command's report is its own."""
    lines = ["set -uo pipefail"]
    for i, cmd in enumerate(cmds):
        lines += [f"echo '{marker} {i}'", "{", cmd, "} 2>&1", f'echo "{marker} rc $?"']
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Ran:
    """One command of a `script` run: what it printed (stdout and stderr) and its exit code (None: it never
    ended)."""

    command: str
    stdout: str
    rc: int | None


def split_output(stdout: str, marker: str, cmds: Sequence[str]) -> list[Ran]:
    """Each command's stdout and exit code from a `script` run of `cmds`."""
    ran = [Ran(cmd, "", None) for cmd in cmds]
    pattern = rf"^{re.escape(marker)} (\d+)\n(.*?)(?:^{re.escape(marker)} rc (\d+)\n|\Z)"
    for found in re.finditer(pattern, stdout, flags=re.MULTILINE | re.DOTALL):
        i = int(found.group(1))
        rc = found.group(3)
        ran[i] = Ran(cmds[i], found.group(2), None if rc is None else int(rc))
    return ran
