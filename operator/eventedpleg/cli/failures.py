"""Exit codes and one-line errors shared by every command. The classification itself is
eventedpleg.k8s.errors.diagnose; this maps its kinds to exit codes and prints them.

Exit codes (README "Exit codes"):
  0  success (status: Available; preflight: every selected node eligible; retry: asked)
  1  status: Degraded (a node failed or the rollout halted)
  2  usage or bad input: a wrong option, a missing or invalid kubeconfig, an invalid spec;
     retry: a named node is not in a failure of that NodeConfig
  3  status: still progressing, paused or unknown; preflight: some selected nodes will be skipped
  4  preflight / render: no selected node is eligible
  5  cannot reach, authenticate to or be authorised by the API server (or it failed)
  6  not found: the NodeConfig or node, or the NodeConfig CRD is not installed
  7  the lab's commands (cluster, lab, realnode, demo): building or starting a part failed (a build,
     apt-get, a node that did not boot); the line names what, and the log where there is one
"""

from __future__ import annotations

import sys
import traceback
from typing import Any, NoReturn

import click

EXIT_OK, EXIT_DEGRADED, EXIT_USAGE, EXIT_PARTIAL, EXIT_NONE, EXIT_API, EXIT_NOT_FOUND, EXIT_SETUP = range(8)
VERBOSE = "eventedpleg.verbose"


def _remember_verbose(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.meta[VERBOSE] = True  # ctx.meta is shared by the whole command chain
    return value


verbose_option = click.option(
    "-v",
    "--verbose",
    is_flag=True,
    callback=_remember_verbose,
    help="Show the traceback of an error (and debug logs where there are any).",
)


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def report(exc: Exception, ctx: click.Context) -> NoReturn:
    """One line and an exit code for a failure talking to the API server; re-raise anything else (a bug)."""
    from eventedpleg.k8s.errors import Problem, diagnose  # noqa: PLC0415 - imports the kubernetes client

    diagnosis = diagnose(exc)
    if diagnosis is None:
        raise exc
    if ctx.meta.get(VERBOSE):
        traceback.print_exception(exc, file=sys.stderr)
    codes: dict[Any, int] = {
        Problem.CREDENTIALS: EXIT_USAGE,
        Problem.NOT_FOUND: EXIT_NOT_FOUND,
        Problem.NOT_SERVED: EXIT_NOT_FOUND,
    }
    fail(diagnosis.message, codes.get(diagnosis.problem, EXIT_API))
