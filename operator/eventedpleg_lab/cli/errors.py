"""One-line errors for the lab's commands, with the product CLI's exit codes (eventedpleg.cli.failures).

A failure to build or start something (a Go build, apt-get, mmdebstrap, buildah, a node that did not boot)
is one line on stderr and exit code 7; `-v` adds the whole message (a build's log tail) and the traceback.
Failures talking to the API server go on to the product's own mapping (codes 2, 5, 6); anything else is a
bug and keeps its traceback.
"""

from __future__ import annotations

import subprocess
import sys
import traceback
from typing import Any, NoReturn

import click

from eventedpleg.cli.failures import EXIT_SETUP, VERBOSE, fail
from eventedpleg_lab.image import ImageError
from eventedpleg_lab.lab.assets import AssetError
from eventedpleg_lab.lab.lab import LabError
from eventedpleg_lab.lab.machine import MachineError
from eventedpleg_lab.localcluster.build import BuildError
from eventedpleg_lab.localcluster.cluster import ClusterError
from eventedpleg_lab.realnode.rig import RigError

# What building or starting the lab's parts raises; OSError covers a missing tool or file.
SETUP_FAILURES: tuple[type[BaseException], ...] = (
    AssetError,
    BuildError,
    ClusterError,
    ImageError,
    LabError,
    MachineError,
    RigError,
    subprocess.CalledProcessError,
    subprocess.TimeoutExpired,
    TimeoutError,
    OSError,
)


def first_line(text: str) -> str:
    """The first line of a message, which names what failed (and the log, where there is one)."""
    lines = text.strip().splitlines()
    return (lines[0] if lines else "failed") + (" (-v for more)" if len(lines) > 1 else "")


def one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, subprocess.CalledProcessError):
        argv = exc.cmd if isinstance(exc.cmd, str) else " ".join(str(a) for a in exc.cmd[:4])
        text = f"{argv} failed (exit {exc.returncode})"
    elif isinstance(exc, OSError) and exc.filename is not None:
        text = f"{exc.strerror or type(exc).__name__}: {exc.filename}"
    return first_line(text)


def report_setup_failure(exc: BaseException, ctx: click.Context, message: str | None = None) -> NoReturn:
    if ctx.meta.get(VERBOSE):
        traceback.print_exception(exc, file=sys.stderr)
    fail(first_line(message) if message is not None else one_line(exc), EXIT_SETUP)


class _OneLineErrors:
    """Mixed into the lab's click groups and commands: their setup failures become one line and code 7."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)  # type: ignore[misc]
        except (click.exceptions.Exit, click.Abort, click.UsageError):
            raise
        except click.ClickException as exc:  # the commands' own messages: same shape, same code
            cause = exc.__cause__
            if isinstance(cause, SETUP_FAILURES):
                report_setup_failure(cause, ctx)
            report_setup_failure(exc, ctx, exc.format_message())
        except SETUP_FAILURES as exc:
            report_setup_failure(exc, ctx)


class LabGroup(_OneLineErrors, click.Group):
    pass


class LabCommand(_OneLineErrors, click.Command):
    pass
