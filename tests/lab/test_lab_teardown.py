"""Last of the lab tier (the file name sorts last): `helm uninstall` leaves the documented state, and
`lab down` leaves nothing behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg_lab.demo.harness import NAMESPACE
from eventedpleg_lab.lab import chart, machine
from eventedpleg_lab.lab.lab import Lab
from eventedpleg_lab.lab.nodes import BRIDGE, NodeSpec

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def test_helm_uninstall_leaves_the_documented_state(installed: Lab) -> None:
    """The chart's NOTES: delete NodeConfigs first (the operator reverts/lets go of their nodes), then
    `helm uninstall` removes the operator and agents; Helm keeps the CRD."""
    chart.delete_nodeconfig(installed)
    chart.uninstall(installed)
    assert chart.get_json(installed, "pods", "-n", chart.AGENT_NAMESPACE)["items"] == []
    assert chart.get_json(installed, "pods", "-n", NAMESPACE)["items"] == []
    assert chart.get_json(installed, "crd", c.CRD_NAME)["metadata"]["name"] == c.CRD_NAME
    for name, node in installed.nodes().items():
        ours = {k for k in node["metadata"].get("annotations", {}) if k.startswith(f"{protocol.GROUP}/")}
        # Deleting the NodeConfig let go of every node. An agent stops after helm has begun removing its
        # permissions, so it may fail to take its host check off (README, Uninstall): that key alone may
        # stay, and the README's command removes it.
        assert ours <= {protocol.ANN_HOST_CHECK}, (name, ours)
        assert not node["spec"].get("unschedulable"), name
    chart.kubectl_ok(installed, "annotate", "nodes", "--all", f"{protocol.ANN_HOST_CHECK}-")
    for name, node in installed.nodes().items():
        ours = {k for k in node["metadata"].get("annotations", {}) if k.startswith(f"{protocol.GROUP}/")}
        assert ours == set(), (name, ours)


def test_down_leaves_nothing_behind(lab: Lab, lab_specs: tuple[NodeSpec, ...]) -> None:
    """Takes the lab down (the fixture's own down is then a no-op)."""
    state = lab.state()
    assert state is not None
    pids = list(state.pids.values())
    limit = (Path("/proc/sys") / machine.INOTIFY_INSTANCES).read_text().strip()
    assert int(limit) >= 256 + machine.INOTIFY_PER_NODE * len(state.specs), limit  # room beside the nodes
    left = lab.down()
    assert left == []
    assert lab.state() is None
    assert not machine.bridge_exists(), BRIDGE
    assert machine.processes_in_lab_cgroups() == []
    assert machine.lab_cgroups() == []
    assert machine.mounts_under(lab.directory) == []
    assert all(not machine.alive(pid, "systemd-nspawn") for pid in pids)
    assert machine.read_sysctls() == state.sysctls
