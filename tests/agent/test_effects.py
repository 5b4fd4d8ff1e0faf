"""The agent's phases as the effects they yield (core.node.blocks.effects): on simulated hosts through the
agent's own interpreter, and driven directly with scripted answers (no host at all)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from eventedpleg import protocol
from eventedpleg.core.agentoptions import AgentOptions
from eventedpleg.core.node.blocks.agentsettings import AgentSettings
from eventedpleg.core.node.blocks.effects import (
    Effect,
    EffectAnswer,
    FindKubelet,
    Healthz,
    NodeEvent,
    ReadApplied,
    ReadFile,
    ReadJournal,
    Report,
    Restart,
    Run,
    Scrape,
    Wait,
    is_act,
)
from eventedpleg.core.node.blocks.host import CommandResult, HttpResult, KubeletProcess
from eventedpleg.core.node.blocks.nodeapi import AgentNode
from eventedpleg.core.node.blocks.verifyloop import verify
from eventedpleg.core.node.facts.hostplan import ManagedState
from eventedpleg.core.node.facts.promtext import parse_metrics
from eventedpleg.core.node.facts.verify import Expectation, Outcome
from eventedpleg.core.node.phases import donephase
from eventedpleg.core.versions import parse_version
from eventedpleg.protocol import NodeState
from eventedpleg_lab.sim import profiles
from tests.agent.conftest import NAMESPACE, NODE, RigFactory
from tests.agent.scripted import ScriptedHost

Step = tuple[object, ...]
POLL = ("Wait", 2.0)  # AgentSettings.poll_seconds
VERIFY_WINDOW = [POLL] * 6  # healthz once, then 5 polls to the 10 s minimum window
BENEFIT = ("Wait", 30.0)  # AgentSettings.benefit_window_seconds


def acts(trace: list[Effect]) -> list[Step]:
    """What a phase did to the node, in order, by kind and the one field that tells them apart."""
    shown: list[Step] = []
    for effect in trace:
        match effect:
            case Wait(seconds):
                shown.append(("Wait", seconds))
            case Restart(unit):
                shown.append(("Restart", unit))
            case Run(argv):
                shown.append(("Run", *argv))
            case Report(state):
                shown.append(("Report", state.value))
            case NodeEvent(reason):
                shown.append(("NodeEvent", reason))
            case _ if is_act(effect):
                shown.append((type(effect).__name__,))
    return shown


def test_apply_ok_writes_restarts_the_kubelet_verifies_and_reports(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_containerd())
    rig.apply()
    assert acts(rig.trace) == [
        # No wait before the change: its window was measured while the node served (servicephase).
        ("SaveTransaction",),  # backups first
        ("NodeEvent", "Applying"),
        ("WriteFiles",),
        ("Wait", 1.0),
        ("Restart", "kubelet"),  # containerd's config did not change: no runtime restart
        ("Report", "Verifying"),
        *VERIFY_WINDOW,
        ("SaveApplied",),
        ("EndTransaction",),
        ("Report", "Done"),  # the operator gives the node back now
        ("NodeEvent", "Verified"),
        BENEFIT,  # the window after, measured while the node serves again
        ("PublishBenefit",),
    ]
    done = _reports(rig.trace)[-1]
    assert done.current == rig.annotations[protocol.ANN_DESIRED]
    assert done.evidence is not None and done.evidence.result == "pass"
    figures = json.loads(rig.annotations[protocol.ANN_BENEFIT])
    assert figures["before"]["windowSeconds"] == 30.0 and figures["before"]["relists"] == 30
    assert figures["after"]["windowSeconds"] == 30.0 and figures["after"]["relists"] == 0


def test_failed_verification_restores_restarts_runtime_then_kubelet_and_verifies_again(
    make_rig: RigFactory,
) -> None:
    rig = make_rig(profiles.crio())
    rig.host.faults.kubelet.fails_when_evented = True
    rig.apply()
    assert acts(rig.trace) == [
        ("SaveTransaction",),
        ("NodeEvent", "Applying"),
        ("WriteFiles",),
        ("Wait", 1.0),
        ("Restart", "crio"),  # the runtime first (k8s#129827)
        ("Wait", 1.0),
        ("Restart", "kubelet"),
        ("Report", "Verifying"),
        ("Run", "systemctl", "is-active", "kubelet"),  # a startup error: is it an older attempt?
        ("RestoreFiles",),
        ("Wait", 1.0),
        ("Restart", "crio"),
        ("Wait", 1.0),
        ("Restart", "kubelet"),
        *VERIFY_WINDOW,  # the state before, verified again
        ("EndTransaction",),
        ("Report", "RolledBack"),
        ("NodeEvent", "RolledBack"),
    ]
    report = _reports(rig.trace)[-1]
    assert report.evidence is not None
    assert report.evidence.failure is not None and report.evidence.failure.result == "fail"
    assert report.evidence.rollback is not None and report.evidence.rollback.result == "pass"
    assert not report.current and not report.forget_current


def test_after_done_silent_fallback_is_healed_by_a_kubelet_restart_alone(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.crio())
    rig.apply()
    rig.host.restart_runtime()  # k8s#129827: the running kubelet falls back for good
    del rig.trace[:]
    rig.check()
    assert acts(rig.trace) == [
        ("NodeEvent", "FallbackDetected"),
        ("Wait", 1.0),
        ("Restart", "kubelet"),  # never the runtime: that is what caused it
        *VERIFY_WINDOW,
        ("Report", "Done"),
        ("NodeEvent", "FallbackHealed"),
    ]


def test_after_done_with_nothing_wrong_does_nothing(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_containerd())
    rig.apply()
    del rig.trace[:]
    rig.check()
    assert acts(rig.trace) == []
    assert {type(e) for e in rig.trace} == {
        ReadApplied,
        ReadFile,
        FindKubelet,
        Scrape,
        ReadJournal,
    }  # looks only


# --- phases driven without a host ---------------------------------------------------------------------

T0 = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
SETTINGS = AgentSettings(namespace=NAMESPACE)
V134 = parse_version("v1.34.2")


def test_verify_fails_at_once_on_a_kubelet_startup_error_that_systemd_confirms() -> None:
    line = 'E1102 12:00:01 run.go:72] "command failed" err="unrecognized feature gate: EventedPLEG"'

    def answer(effect: Effect) -> EffectAnswer:
        match effect:
            case Healthz():
                return HttpResult(0, error="connection refused")
            case ReadJournal():
                return (line,)
            case Run(("systemctl", "is-active", "kubelet")):
                return CommandResult(effect.argv, 3, stdout="failed\n")
        raise AssertionError(effect)

    host = ScriptedHost(answer, T0)
    result = host.play(
        verify(V134, Expectation.enabled(None), since=T0, timeout=300, settings=SETTINGS, clock=host.clock)
    )
    assert [type(e) for e in host.effects] == [Healthz, ReadJournal, Run]
    assert getattr(result, "outcome", None) is Outcome.FAIL
    assert getattr(result, "reason", "").startswith("kubelet did not start: ")


def _fallen_back(effect: Effect) -> EffectAnswer:
    """A Done node whose running kubelet gave up on the event stream (5 errors), and a kubelet that
    would not restart."""
    match effect:
        case ReadApplied():
            return ManagedState(hash="h1", enabled=True)
        case FindKubelet():
            return KubeletProcess(1, ("kubelet",), started_at=T0 - timedelta(minutes=5))
        case Scrape():
            gate = 'kubernetes_feature_enabled{name="EventedPLEG",stage="ALPHA"} 1'
            return parse_metrics(f"{gate}\nkubelet_evented_pleg_connection_error_count 5\n")
        case ReadJournal():
            return ()
        case Restart():
            return CommandResult(("systemctl", "restart", effect.unit), 1, stderr="unit failed")
    raise AssertionError(effect)


def _done_node(options: AgentOptions) -> AgentNode:
    annotations = {
        protocol.ANN_DESIRED: "h1",
        protocol.ANN_CURRENT: "h1",
        protocol.ANN_STATE: NodeState.DONE.value,
        protocol.ANN_AGENT_OPTIONS: options.to_json(),
    }
    return AgentNode(
        "node-a", annotations=annotations, kubelet_version="v1.34.2", runtime_version="containerd://2.1.4"
    )


def _effects_of_after_done(
    options: AgentOptions, heals: tuple[datetime, ...] = ()
) -> tuple[list[Step], object]:
    host = ScriptedHost(_fallen_back, T0)
    memory = donephase.DoneMemory(heals=heals)
    kept = host.play(donephase.after_done(_done_node(options), memory, SETTINGS, host.clock))
    assert isinstance(kept, donephase.DoneMemory)
    return acts(host.effects), kept.heals


def _reports(effects: list[Effect]) -> list[Report]:
    return [e for e in effects if isinstance(e, Report)]


def test_after_done_silent_fallback_with_healing_off_is_drift_without_a_restart() -> None:
    steps, heals = _effects_of_after_done(AgentOptions(heal_fallback=False))
    assert steps == [("Report", "Drifted"), ("NodeEvent", "FallbackDetected")]
    assert heals == ()


def test_after_done_heal_budget_spent_is_drift_without_a_restart() -> None:
    spent = tuple(T0 - timedelta(minutes=m) for m in (10, 20, 30))  # max_heals_per_hour = 3
    steps, heals = _effects_of_after_done(AgentOptions(), spent)
    assert steps == [("Report", "Drifted"), ("NodeEvent", "FallbackDetected")]
    assert heals == spent


def test_after_done_heal_whose_restart_fails_reports_drift_and_counts_the_heal() -> None:
    host = ScriptedHost(_fallen_back, T0)
    memory = donephase.DoneMemory()
    kept = host.play(donephase.after_done(_done_node(AgentOptions()), memory, SETTINGS, host.clock))
    assert isinstance(kept, donephase.DoneMemory)
    assert acts(host.effects) == [
        ("NodeEvent", "FallbackDetected"),
        ("Wait", 1.0),
        ("Restart", "kubelet"),
        ("Report", "Drifted"),
        ("NodeEvent", "FallbackNotHealed"),
    ]
    (report,) = _reports(host.effects)
    assert report.forget_current  # so the operator re-applies
    assert report.evidence is not None and report.evidence.heal is not None
    assert report.evidence.heal.result == "fail"
    assert kept.heals == (T0,)  # counted when it was tried


def test_the_window_before_ends_at_the_cordon_however_long_the_drain(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_containerd())
    config_hash = rig.publish(enabled=True)
    rig.serve_then_cordon()
    rig.clock.sleep(600)  # a long drain: none of it is in the window, and no wait is added to it
    rig.request(config_hash)
    del rig.trace[:]
    rig.step()
    assert acts(rig.trace)[0] == ("SaveTransaction",)
    figures = json.loads(rig.annotations[protocol.ANN_BENEFIT])
    assert figures["before"]["windowSeconds"] == 30.0 and figures["before"]["relists"] == 30


def test_an_agent_that_never_saw_the_node_serve_reports_no_before_figures(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_containerd())
    rig.api.cordon(NODE)  # taken while this agent was not running
    rig.request(rig.publish(enabled=True))
    rig.step()
    assert rig.state == NodeState.DONE
    figures = json.loads(rig.annotations[protocol.ANN_BENEFIT])
    assert "before" not in figures and figures["after"]["relists"] == 0
