"""The agent's guard against a REAL kubelet: a wedge made on demand
(eventedpleg_lab.realnode.wedge) is detected, healed and proven on kubelet 1.36; a second one in the window,
with the churn's containers left in place, takes the gate off the node; kubelet 1.37 under the same churn
raises no incident. A pod's status lost on kubelet 1.36 (an old sandbox removed: docs/compatibility.md
kubelet-136-missed-restarts) is detected and healed the same way.

The guard runs as in production, on its own thread (agent.runner.GuardLoop) every 5 s, while the wedge is
fired. The heal's restart clears the churn first when the test says so (the restart cannot clear a wedge the
1100 exited containers remake at once: docs/compatibility.md kubelet-pleg-wedge). Figures (first sign ->
detected -> healed, the guard's CPU per hour) are printed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime

import pytest

from eventedpleg import constants as c
from eventedpleg.agent.agent import drive
from eventedpleg.agent.metrics import AgentMetrics
from eventedpleg.agent.runner import GuardLoop
from eventedpleg.core import guardincidents as gi
from eventedpleg.core.node.blocks.host import CommandResult
from eventedpleg.core.node.facts.guardsigns import line_time, refused_first
from eventedpleg.protocol import ANN_GUARD_INCIDENTS, Cause, NodeState
from eventedpleg.reasons import EventReason
from eventedpleg_lab.realnode import config as cfg
from eventedpleg_lab.realnode import layout as lay
from eventedpleg_lab.realnode import rig as rn
from eventedpleg_lab.realnode import wedge
from eventedpleg_lab.realnode.agentrig import NODE, AgentRig, make_agent_rig
from tests.realnode.conftest import Seen

# Each wedge's churn alone takes 4-5 minutes on the rig (1100 containers through crictl).
pytestmark = [pytest.mark.realnode, pytest.mark.slow, pytest.mark.timeout(2400)]

DROPIN = lay.KUBELET_CONFIG_DIR + "/" + c.KUBELET_DROPIN_NAME
COST_LOOKS = 12  # healthy looks timed for the CPU figure (a minute at the production interval)
SETTLE_SECONDS = 240.0  # from the wedge line to the guard's verdict, at most


class Timed:
    """When each Event was emitted (wall time), and the heal's restart clearing the churn when told to."""

    def __init__(self, rig: AgentRig) -> None:
        self.rig = rig
        self.at: list[tuple[str, float]] = []
        self.clear_before_restart = False
        emit, run = rig.api.emit_event, rig.host.run

        def emit_event(node: object, *, reason: str, message: str, warning: bool = False) -> None:
            self.at.append((reason, time.time()))
            emit(node, reason=reason, message=message, warning=warning)  # type: ignore[arg-type]

        def host_run(argv: Sequence[str], *, timeout: float = 120.0) -> CommandResult:
            if tuple(argv) == ("systemctl", "restart", "kubelet") and self.clear_before_restart:
                wedge.clear(rig.node)
            return run(argv, timeout=timeout)

        rig.api.emit_event = emit_event  # type: ignore[method-assign]
        rig.host.run = host_run  # type: ignore[method-assign]

    def first(self, reason: EventReason, after: float = 0.0) -> float | None:
        return next((t for r, t in self.at if r == reason and t >= after), None)


def _done(node: rn.RealNode, kubelet: str) -> tuple[AgentRig, AgentMetrics]:
    node.up(rn.RigSpec(kubelet=kubelet))
    rig = make_agent_rig(node, kubelet)
    rig.apply()
    assert rig.state == NodeState.DONE, rig.annotations
    metrics = AgentMetrics()
    rig.agent.interpreter.metrics = metrics
    rig.agent.seen = rig.api.view(NODE)
    return rig, metrics


def _cpu_per_hour(rig: AgentRig) -> float:
    """The guard's CPU seconds per hour of looks at the production interval, on a healthy node."""
    spent = 0.0
    for _ in range(COST_LOOKS):
        before = time.process_time()
        drive(rig.agent.guard(), rig.host.clock.sleep)
        spent += time.process_time() - before
        time.sleep(rig.agent.settings.guard_interval_seconds)
    return spent / (COST_LOOKS * rig.agent.settings.guard_interval_seconds) * 3600


@pytest.fixture
def guarded() -> Iterator[list[GuardLoop]]:
    loops: list[GuardLoop] = []
    yield loops
    for loop in loops:
        loop.stop()
        loop.thread.join(timeout=180)


def _guard(rig: AgentRig, loops: list[GuardLoop]) -> GuardLoop:
    loop = GuardLoop(rig.agent, threading.Lock())
    loops.append(loop)
    loop.start()
    return loop


def _wait_for(timed: Timed, reasons: set[EventReason], after: float) -> str:
    end = time.monotonic() + SETTLE_SECONDS
    while time.monotonic() < end:
        found = next((r for r, t in timed.at if r in reasons and t >= after), None)
        if found is not None:
            return found
        time.sleep(1)
    raise AssertionError(f"no {sorted(reasons)} within {SETTLE_SECONDS:.0f}s: {timed.at}")


def test_guard_heals_a_wedge_on_136_and_takes_the_gate_off_after_the_second(
    node: rn.RealNode, seen: Seen, guarded: list[GuardLoop]
) -> None:
    rig, metrics = _done(node, "1.36")
    timed = Timed(rig)
    cost = _cpu_per_hour(rig)
    print(f"\nguard on kubelet 1.36, healthy: CPU {cost:.2f} s per hour of looks", flush=True)
    condition = rig.api.conditions[NODE][gi.CONDITION_TYPE]
    assert (condition["status"], condition["reason"]) == ("True", gi.HealthReason.HEALTHY)
    _guard(rig, guarded)

    # First incident: healed by a kubelet restart (the churn cleared before it), and proven.
    timed.clear_before_restart = True
    began = time.time()
    fired = wedge.fire(node)
    assert fired.wedged, fired.to_json()
    first_sign = line_time(fired.line, datetime.now(UTC))
    assert first_sign is not None
    ended = _wait_for(timed, {EventReason.PLEG_WEDGE_HEALED, EventReason.PLEG_WEDGE_NOT_HEALED}, began)
    assert ended == EventReason.PLEG_WEDGE_HEALED, timed.at
    detected = timed.first(EventReason.PLEG_WEDGED, began)
    healed = timed.first(EventReason.PLEG_WEDGE_HEALED, began)
    assert detected is not None and healed is not None
    to_detect, to_heal = detected - first_sign.timestamp(), healed - first_sign.timestamp()
    print(
        f"\nguard on kubelet 1.36: first sign -> detected {to_detect:.1f}s, -> healed {to_heal:.1f}s; "
        f"guard CPU {cost:.1f} s/h"
    )
    assert to_detect <= 15
    condition = rig.api.conditions[NODE][gi.CONDITION_TYPE]
    assert (condition["status"], condition["reason"]) == ("True", gi.HealthReason.HEALTHY)
    assert metrics.guard_incidents.labels("wedge")._value.get() == 1
    assert len(gi.parse(rig.annotations[ANN_GUARD_INCIDENTS])) == 1
    assert rig.state == NodeState.DONE

    # Second incident in the window, the containers left in place: the gate comes off.
    timed.clear_before_restart = False
    began = time.time()
    fired = wedge.fire(node)
    assert fired.wedged, fired.to_json()
    ended = _wait_for(timed, {EventReason.GUARD_ROLLED_BACK, EventReason.ROLLBACK_FAILED}, began)
    print(
        f"guard: second incident -> {ended} {time.time() - began:.0f}s after the second fire began",
        flush=True,
    )
    assert ended == EventReason.GUARD_ROLLED_BACK, (timed.at, rig.annotations)
    assert rig.state == NodeState.ROLLED_BACK, rig.annotations
    assert rig.evidence()["result"] == Cause.GUARD_ROLLBACK.value
    assert not node.layout.at(DROPIN).is_file()
    condition = rig.api.conditions[NODE][gi.CONDITION_TYPE]
    assert (condition["status"], condition["reason"]) == ("False", gi.HealthReason.ROLLED_BACK)
    assert metrics.guard_rollbacks._value.get() == 1
    wedge.clear(node)


def test_guard_raises_no_incident_on_137_under_the_same_churn(
    node: rn.RealNode, seen: Seen, guarded: list[GuardLoop]
) -> None:
    rig, metrics = _done(node, "1.37")
    timed = Timed(rig)
    _guard(rig, guarded)
    fired = wedge.fire(node)
    time.sleep(30)  # the guard's looks after the start that met the churn
    wedge.clear(node)
    assert not fired.wedged, fired.to_json()
    assert not [r for r, _ in timed.at if r in (EventReason.PLEG_WEDGED, EventReason.EVENT_STREAM_LOST)]
    assert all(metrics.guard_incidents.labels(k.value)._value.get() == 0 for k in gi.Kind)
    condition = rig.api.conditions[NODE][gi.CONDITION_TYPE]
    assert condition["status"] == "True"


def _ready_sandbox(node: rn.RealNode, pod: str, *, besides: str = "") -> str:
    """The pod's ready sandbox other than `besides`, once one runs a container (120 s at most)."""
    end = time.monotonic() + 120
    while time.monotonic() < end:
        for sandbox in node.crictl("pods", "--name", pod, "--state", "ready", "-q").stdout.split():
            running = node.crictl("ps", "--pod", sandbox, "--state", "running", "-q").stdout.split()
            if sandbox != besides and running:
                return sandbox
        time.sleep(1)
    raise AssertionError(f"no ready sandbox of {pod} with a running container in 120s")


def _lose_status(node: rn.RealNode, pod: str) -> None:
    """Give the pod an old sandbox (stop its sandbox: the kubelet makes a new one), then remove that old
    sandbox and its container, as the kubelet's own GC does: with the gate on, kubelet 1.36 deletes the
    pod's whole cached status on that removal's event."""
    old = _ready_sandbox(node, pod)
    assert node.crictl("stopp", old).returncode == 0
    _ready_sandbox(node, pod, besides=old)
    for container in node.crictl("ps", "-a", "--pod", old, "-q").stdout.split():
        node.crictl("rm", container)
    assert node.crictl("rmp", old).returncode == 0


def test_guard_heals_a_lost_pod_status_on_136(
    node: rn.RealNode, seen: Seen, guarded: list[GuardLoop]
) -> None:
    rig, metrics = _done(node, "1.36")
    node.set_pods(1)
    pod = f"{cfg.idle_pod_name(0)}-{NODE}"
    try:
        _ready_sandbox(node, pod)
        timed = Timed(rig)
        _guard(rig, guarded)
        log = node.layout.at(lay.KUBELET_LOG)
        offset = log.stat().st_size
        began = time.time()
        _lose_status(node, pod)
        ended = _wait_for(timed, {EventReason.PLEG_WEDGE_HEALED, EventReason.PLEG_WEDGE_NOT_HEALED}, began)
        refusals = [ln for ln in wedge.lines_since(node, offset) if refused_first(ln) == f"default/{pod}"]
        detected = timed.first(EventReason.POD_STATUS_LOST, began)
        healed = timed.first(EventReason.PLEG_WEDGE_HEALED, began)
        first = line_time(refusals[0], datetime.now(UTC)) if refusals else None
        print(
            f"\nguard on kubelet 1.36, a pod's status lost: {len(refusals)} refusals of its first sandbox; "
            f"old sandbox removed -> first refusal "
            f"{(first.timestamp() - began) if first else float('nan'):.1f}s -> detected "
            f"{(detected or float('nan')) - began:.1f}s -> {ended} {time.time() - began:.1f}s",
            flush=True,
        )
        assert detected is not None and first is not None, (timed.at, refusals[:3])
        assert detected - first.timestamp() <= 30  # the second refusal comes ~12 s after the first
        assert ended == EventReason.PLEG_WEDGE_HEALED, timed.at
        assert healed is not None
        assert metrics.guard_incidents.labels(gi.Kind.STATUS_LOST.value)._value.get() == 1
        condition = rig.api.conditions[NODE][gi.CONDITION_TYPE]
        assert (condition["status"], condition["reason"]) == ("True", gi.HealthReason.HEALTHY)
        assert rig.state == NodeState.DONE
    finally:
        node.set_pods(0)
