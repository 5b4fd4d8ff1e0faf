"""The agent's loop (agent.runner) on an error that is not a host fault: it never crash-loops. The error is
said on the Node once, with what to do, and retried after a pause that doubles up to a cap, on the
injected clock."""

from __future__ import annotations

import pytest

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg.agent import runner
from eventedpleg.core.node.blocks.effects import Report
from eventedpleg.core.node.blocks.host import KubeletProcess
from eventedpleg.protocol import NodeState
from eventedpleg_lab.sim import profiles
from tests.agent.conftest import NODE, Rig, RigFactory


def boom() -> KubeletProcess | None:
    raise RuntimeError("an unforeseen state of /proc")


def run_until(rig: Rig, pauses: list[float], count: int) -> None:
    """Run the loop until it has paused `count` times after errors (the pauses recorded in order)."""
    sleep = rig.clock.sleep

    def record(seconds: float) -> None:
        if seconds >= runner.ERROR_BACKOFF_SECONDS:
            pauses.append(seconds)
        sleep(seconds)

    rig.clock.sleep = record  # type: ignore[method-assign]
    calls = iter(range(10_000))
    runner.run(rig.agent, stop=lambda: len(pauses) >= count or next(calls) >= 9_999)


def test_backoff_doubles_to_its_cap() -> None:
    assert [runner.backoff_seconds(n) for n in range(1, 10)] == [5, 10, 20, 40, 80, 160, 300, 300, 300]


def test_an_error_after_done_is_said_once_and_retried_with_backoff(
    make_rig: RigFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = make_rig(profiles.kubeadm_containerd(), benefit_window_seconds=0)
    rig.apply()
    assert rig.state == NodeState.DONE
    monkeypatch.setattr(rig.host, "kubelet_process", boom)  # the after-Done check's FindKubelet raises
    pauses: list[float] = []

    run_until(rig, pauses, 9)

    assert pauses == [5, 10, 20, 40, 80, 160, 300, 300, 300]
    errors = [e for e in rig.api.events if e.reason == "AgentError"]
    assert len(errors) == 1
    message = errors[0].message
    assert "RuntimeError: an unforeseen state of /proc" in message
    assert "retries with back-off" in message and "log of the agent pod" in message
    assert rig.state == NodeState.DONE  # not an apply's: the state is left alone


def test_an_error_during_an_apply_is_reported_failed_once(
    make_rig: RigFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = make_rig(profiles.kubeadm_containerd(), benefit_window_seconds=0)
    rig.request(rig.publish(enabled=True))
    before = {k: v for k, v in rig.snapshot().items() if not k.startswith(c.AGENT_STATE_DIR)}
    monkeypatch.setattr(rig.host, "kubelet_process", boom)  # ReadHost raises before anything changed
    pauses: list[float] = []

    run_until(rig, pauses, 3)

    assert pauses == [5]  # Failed: the apply is the operator's (or a human's) again, nothing left to retry
    assert rig.state == NodeState.FAILED
    assert "RuntimeError: an unforeseen state of /proc" in rig.annotations[protocol.ANN_REASON]
    failed = [e for e in rig.trace if isinstance(e, Report) and e.state is NodeState.FAILED]
    assert len(failed) == 1
    assert rig.api.event_reasons(NODE).count("AgentError") == 1
    assert {k: v for k, v in rig.snapshot().items() if not k.startswith(c.AGENT_STATE_DIR)} == before
