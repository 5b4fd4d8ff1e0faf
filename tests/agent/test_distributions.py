"""The nodes users actually have: k3s is recognised and skipped with the platform's own fix."""

from __future__ import annotations

import pytest

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg.protocol import NodeState
from eventedpleg_lab.sim import profiles
from tests.agent.conftest import Rig, RigFactory


def _host_files(rig: Rig) -> dict[str, bytes]:
    """Every file but the agent's own bookkeeping."""
    return {k: v for k, v in rig.snapshot().items() if not k.startswith(c.AGENT_STATE_DIR)}


@pytest.mark.parametrize("enabled", [True, False])
def test_k3s_agent_is_skipped_with_kubelet_arg_and_nothing_is_touched(
    make_rig: RigFactory, enabled: bool
) -> None:
    rig = make_rig(profiles.k3s_agent())
    before = _host_files(rig)

    rig.apply(enabled=enabled)

    assert rig.state == NodeState.SKIPPED
    reason = rig.annotations[protocol.ANN_REASON]
    assert reason.startswith("Unsupported: k3s: the kubelet is embedded in k3s (/etc/rancher/k3s, ")
    assert rig.evidence["fix"] == (
        'set `kubelet-arg: ["feature-gates=EventedPLEG=true"]` in /etc/rancher/k3s/config.yaml (or put a '
        "KubeletConfiguration drop-in with featureGates.EventedPLEG: true in "
        "/var/lib/rancher/k3s/agent/etc/kubelet.conf.d), restart k3s (`systemctl restart k3s-agent` or "
        "`systemctl restart k3s`) node by node, and label the node eventedpleg.io/skip=true"
    )
    assert rig.evidence["changed"] == "nothing"
    assert rig.api.event_reasons("node-a")[-1] == "Unsupported"
    assert _host_files(rig) == before
    assert not any(cmd[:2] == ("systemctl", "restart") for cmd in rig.host.commands)
