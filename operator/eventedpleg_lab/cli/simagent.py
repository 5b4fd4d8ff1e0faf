"""`eventedpleg sim-agent`: the real node agent against a simulated host (tests, demos). The production
`eventedpleg agent` has no simulator; this command is the lab's way to run the agent as its own process."""

from __future__ import annotations

from pathlib import Path

import click

from eventedpleg.agent.linuxhost import RealClock
from eventedpleg.agent.main import AgentProcess, run
from eventedpleg.cli.agent import agent_command_options
from eventedpleg.cli.examples import examples
from eventedpleg_lab.sim.host import SimHost
from eventedpleg_lab.sim.profiles import PROFILES


@click.command(
    "sim-agent",
    epilog=examples(
        (
            "the agent for node kind-worker against a simulated CRI-O host under /tmp/host",
            "eventedpleg sim-agent --profile crio --host-root /tmp/host --node kind-worker",
        ),
    ),
)
@click.option(
    "--profile", type=click.Choice(sorted(PROFILES)), required=True, help="The simulated host's layout."
)
@click.option(
    "--host-root",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the simulated host's files are laid out (created when missing).",
)
@agent_command_options
def sim_agent(process: AgentProcess, profile: str, host_root: Path) -> None:
    """Run the node agent against a simulated host of PROFILE laid out under --host-root."""
    run(process, SimHost(host_root, PROFILES[profile], RealClock()))
