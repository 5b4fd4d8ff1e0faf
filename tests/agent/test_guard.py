"""The guard's rollback through the real agent on a simulated host: a second wedge in the window takes the
gate off in place through the apply's own steps (applyphase.take_back) -- the kubelet drop-in removed, the
runtime's setting left, only the kubelet restarted, generic PLEG verified, RolledBack with the incidents
and the typed cause -- and a wedge with the guard off restarts nothing."""

from __future__ import annotations

from datetime import timedelta

from eventedpleg import constants as c
from eventedpleg.agent.agent import drive
from eventedpleg.core import guardincidents as gi
from eventedpleg.core.agentoptions import AgentOptions
from eventedpleg.protocol import ANN_CURRENT, ANN_GUARD_INCIDENTS, Cause, NodeState
from eventedpleg.reasons import EventReason
from eventedpleg_lab.sim import profiles
from tests.agent.conftest import NODE, Rig, RigFactory
from tests.unit.core.node.phases.test_guardphase import WEDGE

KUBELET_DROPIN = f"{profiles.CONFIG_DIR}/{c.KUBELET_DROPIN_NAME}"
CRIO_DROPIN = f"/{c.CRIO_DROPIN_DIR}/{c.CRIO_DROPIN_NAME}"


def _restarts(rig: Rig) -> list[str]:
    return [cmd[2] for cmd in rig.host.commands if cmd[:2] == ("systemctl", "restart")]


def _wedged_done(rig: Rig, options: AgentOptions | None = None) -> int:
    """Done with the gate on, one incident already in the window, and the kubelet logging a wedge line now;
    how many restarts the apply made."""
    rig.apply(options=options)
    assert rig.state == NodeState.DONE, rig.annotations
    earlier = gi.Incident(rig.clock.now().replace(microsecond=0) - timedelta(hours=2), gi.Kind.WEDGE)
    rig.api.annotate(NODE, {ANN_GUARD_INCIDENTS: gi.to_json((earlier,))})
    rig.agent.seen = rig.api.view(NODE)
    rig.clock.sleep(1)
    rig.host.logs.write("kubelet", rig.clock.now(), WEDGE[0])
    return len(_restarts(rig))


def test_a_second_wedge_in_the_window_takes_the_gate_off_in_place(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.crio())
    before = _wedged_done(rig)
    drive(rig.agent.guard(), rig.clock.sleep)

    assert rig.state == NodeState.ROLLED_BACK, rig.annotations
    assert rig.evidence["result"] == Cause.GUARD_ROLLBACK.value
    assert len(rig.evidence["lines"]) == 2  # type: ignore[arg-type]
    assert not rig.path(KUBELET_DROPIN).exists()
    assert rig.path(CRIO_DROPIN).exists()  # the runtime's setting stays ...
    assert _restarts(rig)[before:] == ["kubelet"]  # ... so only the kubelet restarts
    assert ANN_CURRENT not in rig.annotations
    assert rig.api.event_reasons(NODE)[-2:] == [EventReason.PLEG_WEDGED, EventReason.GUARD_ROLLED_BACK]
    condition = rig.api.conditions[NODE][gi.CONDITION_TYPE]
    assert (condition["status"], condition["reason"]) == ("False", gi.HealthReason.ROLLED_BACK)
    assert len(gi.parse(rig.annotations[ANN_GUARD_INCIDENTS])) == 2


def test_with_the_guard_off_a_wedge_restarts_nothing(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.crio())
    before = _wedged_done(rig, AgentOptions(guard=False))
    drive(rig.agent.guard(), rig.clock.sleep)

    assert rig.state == NodeState.DONE
    assert _restarts(rig)[before:] == []
    assert rig.path(KUBELET_DROPIN).exists()
    assert rig.api.event_reasons(NODE)[-1] == EventReason.PLEG_WEDGED
    condition = rig.api.conditions[NODE][gi.CONDITION_TYPE]
    assert (condition["status"], condition["reason"]) == ("False", gi.HealthReason.WEDGED)
