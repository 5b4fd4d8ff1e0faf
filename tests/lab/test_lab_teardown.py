"""Last of the lab tier (the file name sorts last): `lab down` leaves nothing behind."""

from __future__ import annotations

import pytest

from eventedpleg_lab.lab import machine
from eventedpleg_lab.lab.lab import Lab
from eventedpleg_lab.lab.nodes import BRIDGE, NodeSpec

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def test_down_leaves_nothing_behind(lab: Lab, lab_specs: tuple[NodeSpec, ...]) -> None:
    """Takes the lab down (the fixture's own down is then a no-op)."""
    state = lab.state()
    assert state is not None
    pids = list(state.pids.values())
    left = lab.down()
    assert left == []
    assert lab.state() is None
    assert not machine.bridge_exists(), BRIDGE
    assert machine.processes_in_lab_cgroups() == []
    assert machine.lab_cgroups() == []
    assert machine.mounts_under(lab.directory) == []
    assert all(not machine.alive(pid, "systemd-nspawn") for pid in pids)
    assert machine.read_sysctls() == state.sysctls
