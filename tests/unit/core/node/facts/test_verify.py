"""Version-aware verification: metrics + log lines -> PASS / FAIL / PENDING with evidence
(docs/compatibility.md §4)."""

from __future__ import annotations

import json

import pytest

from eventedpleg.core import runtimes
from eventedpleg.core.node.facts.kubeletlog import Signal, scan
from eventedpleg.core.node.facts.promtext import Metrics, parse_metrics
from eventedpleg.core.node.facts.verify import (
    Expectation,
    Observation,
    Outcome,
    RelistMode,
    evaluate,
    fallen_back,
    relist_mode,
)
from eventedpleg.core.versions import parse_version

V133 = parse_version("v1.33.2")
V137 = parse_version("v1.37.0")
V126 = parse_version("v1.26.5")
ENABLED = Expectation.enabled(None)


def metrics(
    *,
    gate: int | None = 1,
    stage: str = "ALPHA",
    success: int | None = 1,
    errors: int | None = 0,
    relists: int = 0,
    period: float = 300.0,
) -> Metrics:
    lines = []
    if gate is not None:
        lines.append(f'kubernetes_feature_enabled{{name="EventedPLEG",stage="{stage}"}} {gate}')
    if success is not None:
        lines.append(f"kubelet_evented_pleg_connection_success_count {success}")
    if errors is not None:
        lines.append(f"kubelet_evented_pleg_connection_error_count {errors}")
    lines.append(f"kubelet_pleg_relist_interval_seconds_count {relists}")
    lines.append(f"kubelet_pleg_relist_interval_seconds_sum {relists * period}")
    return parse_metrics("\n".join(lines))


def observe(
    latest: Metrics | None,
    *,
    baseline: Metrics | None = None,
    window: float = 30.0,
    log: list[str] | None = None,
    healthz: bool = True,
    ready: bool | None = True,
    crio: bool | None = None,
) -> Observation:
    return Observation(
        window_seconds=window,
        healthz=healthz,
        node_ready=ready,
        baseline=baseline if baseline is not None else metrics(relists=0),
        metrics=latest,
        log=scan(log or []),
        runtime_events=crio,
        runtime_source="crio status config" if crio is not None else "",
    )


def verdict(version: str, expect: Expectation, obs: Observation, min_window: float = 30.0) -> Outcome:
    return evaluate(parse_version(version), expect, obs, min_window=min_window).outcome


@pytest.mark.parametrize(
    ("baseline", "latest", "window", "mode"),
    [
        (metrics(relists=100, period=1), metrics(relists=130, period=1), 30, RelistMode.GENERIC),
        (metrics(relists=100, period=1), metrics(relists=100, period=1), 30, RelistMode.EVENTED),
        (metrics(relists=3, period=300), metrics(relists=4, period=300), 300, RelistMode.EVENTED),
        (metrics(relists=0), metrics(relists=0), 5, RelistMode.UNKNOWN),  # too short to tell
        (None, metrics(), 30, RelistMode.UNKNOWN),
    ],
)
def test_relist_mode(baseline: Metrics | None, latest: Metrics, window: float, mode: RelistMode) -> None:
    assert relist_mode(baseline, latest, window)[0] is mode


def test_enabled_136_passes_on_gate_stream_and_300s_relist() -> None:
    result = evaluate(V133, ENABLED, observe(metrics()), min_window=30)
    assert result.outcome is Outcome.PASS
    assert result.reason == "Evented PLEG in use: event stream connected, generic relist slowed to 300 s"
    evidence = result.evidence()
    assert evidence.checks == {
        "healthz": "ok: /healthz ok",
        "nodeReady": "ok: Ready=True",
        "gate": 'ok: kubernetes_feature_enabled{name="EventedPLEG",stage="ALPHA"} 1',
        "stream": "ok: kubelet_evented_pleg_connection_success_count 1, "
        "kubelet_evented_pleg_connection_error_count 0",
        "relist": "ok: 0 relists in 30s (period >= 300s)",
        "events": "info: 0 event lines",
    }


@pytest.mark.parametrize(
    ("case", "obs", "outcome", "reason"),
    [
        ("gate off", observe(metrics(gate=0)), Outcome.FAIL, "gate: kubernetes_feature_enabled"),
        ("error count 5", observe(metrics(errors=5, success=5)), Outcome.FAIL, "stream: kubelet_evented"),
        (
            "fallback line",
            observe(
                metrics(), log=['"Fall back to Generic PLEG relisting since Evented PLEG is not working"']
            ),
            Outcome.FAIL,
            "stream: ",
        ),
        (
            "still polling",
            observe(metrics(relists=30, period=1), baseline=metrics(relists=0, period=1)),
            Outcome.FAIL,
            "relist: 30 relists in 30s, mean interval 1.0s: still polling",
        ),
        ("errors below 5: watch", observe(metrics(errors=2)), Outcome.PENDING, "waiting for stream"),
        ("no connection yet", observe(metrics(success=0)), Outcome.PENDING, "waiting for stream"),
        ("window too short", observe(metrics(), window=10), Outcome.PENDING, "observed 10s of 30s"),
        ("kubelet down", observe(None, healthz=False), Outcome.PENDING, "waiting for healthz"),
        ("node not ready", observe(metrics(), ready=False), Outcome.PENDING, "waiting for nodeReady"),
    ],
)
def test_enabled_136_failures_are_immediate_and_doubt_waits(
    case: str, obs: Observation, outcome: Outcome, reason: str
) -> None:
    result = evaluate(V133, ENABLED, obs, min_window=30)
    assert result.outcome is outcome, case
    assert result.reason.startswith(reason), result.reason


def test_crio_needs_enable_pod_events_true() -> None:
    expect = Expectation.enabled(runtimes.CRIO)
    assert verdict("1.33.2", expect, observe(metrics(), crio=True)) is Outcome.PASS
    assert verdict("1.33.2", expect, observe(metrics(), crio=False)) is Outcome.FAIL
    assert verdict("1.33.2", expect, observe(metrics(), crio=None)) is Outcome.PENDING

    # The check keeps its wire name and words (reports and operators of other versions read them).
    def rendered(crio: bool | None) -> str:
        obs = observe(metrics(), crio=crio)
        check = evaluate(parse_version("v1.33.2"), expect, obs, min_window=30.0).check("crioPodEvents")
        return check.render() if check is not None else "absent"

    assert rendered(True) == "ok: enable_pod_events = true (crio status config)"
    assert rendered(None) == "wait: could not read enable_pod_events (crio)"


def test_containerd_has_nothing_to_read_back() -> None:
    assert Expectation.enabled(runtimes.CONTAINERD) == Expectation.enabled(None)
    assert Expectation.enabled(runtimes.CONTAINERD).runtime_readback is None


def test_137_passes_with_one_second_relist_and_fails_on_the_fast_path_line() -> None:
    polling = observe(metrics(relists=30, period=1), baseline=metrics(relists=0, period=1))
    result = evaluate(V137, ENABLED, polling, min_window=30)
    assert result.outcome is Outcome.PASS
    assert "no steady-state CPU saving (k8s#139262)" in (result.evidence().checks or {})["relist"]
    gave_up = observe(
        metrics(relists=30, period=1),
        baseline=metrics(relists=0, period=1),
        log=[
            'E0101 evented.go:176] "Evented PLEG: disabling unexpected-termination fast path after '
            'exhausting event stream retries"'
        ],
    )
    result = evaluate(V137, ENABLED, gave_up, min_window=30)
    assert result.outcome is Outcome.FAIL
    assert "disabling unexpected-termination fast path" in result.reason
    assert result.lines


def test_126_without_evented_metrics_relies_on_lines() -> None:
    no_conn_metrics = metrics(success=None, errors=None)
    assert verdict("1.26.5", ENABLED, observe(no_conn_metrics)) is Outcome.PASS
    closed = ['E0101 log.go:32] "container events stream is closed" err="EOF"'] * 5
    assert verdict("1.26.5", ENABLED, observe(no_conn_metrics, log=closed)) is Outcome.FAIL


def test_gate_from_the_log_line_when_the_metric_is_missing() -> None:
    obs = observe(metrics(gate=None), log=["feature gates: &{map[EventedPLEG:true]}"])
    assert verdict("1.33.2", ENABLED, obs) is Outcome.PASS


def test_beta_stage_counts_as_on() -> None:
    assert verdict("1.28.3", ENABLED, observe(metrics(stage="BETA"))) is Outcome.PASS


@pytest.mark.parametrize("version", ["1.33.2", "1.37.0", "1.25.16"])
def test_disabled_needs_the_gate_off_and_one_second_relist(version: str) -> None:
    gate = None if version == "1.25.16" else 0
    polling = observe(
        metrics(gate=gate, relists=30, period=1), baseline=metrics(gate=gate, relists=0, period=1)
    )
    assert verdict(version, Expectation.disabled(), polling) is Outcome.PASS


def test_disabled_fails_while_still_evented() -> None:
    still = observe(metrics(gate=1))
    result = evaluate(V133, Expectation.disabled(), still, min_window=30)
    assert result.outcome is Outcome.FAIL
    assert result.reason.startswith("gate:")


def test_rollback_expectation_checks_only_health_and_the_old_gate() -> None:
    expect = Expectation(gate=False, in_use=None)
    assert verdict("1.33.2", expect, observe(metrics(gate=0, relists=30, period=1))) is Outcome.PASS
    assert verdict("1.33.2", expect, observe(metrics(gate=1))) is Outcome.FAIL


def test_fallen_back_per_version() -> None:
    assert fallen_back(V133, metrics(errors=5), scan([])) is not None
    assert fallen_back(V133, metrics(errors=4), scan([])) is None
    line_137 = (
        '"Evented PLEG: disabling unexpected-termination fast path after exhausting event stream retries"'
    )
    assert fallen_back(V137, metrics(errors=None), scan([line_137])) is not None
    assert fallen_back(V126, None, scan(['"failed to receive streaming container event"'] * 5)) is not None


def test_evidence_is_compact_and_bounded() -> None:
    long_line = "E0101 log.go:32] " + '"container events stream is closed" err="' + "x" * 5000 + '"'
    obs = observe(metrics(errors=5), log=[long_line] * 5)
    result = evaluate(V133, ENABLED, obs, min_window=30)
    text = result.evidence().to_json(limit=600)
    assert len(text) <= 600
    doc = json.loads(text)
    assert doc["result"] == "fail"
    assert json.dumps(doc, separators=(",", ":"), ensure_ascii=False) == text  # compact


# The v1.37.2 line (evented.go:119, error level) as klog writes it: the whole event is dumped, and its
# container statuses carry the containers' own exit messages (here a control-plane component that exited
# on a bad flag, and an application that printed a PLEG-looking text).
NIL_SANDBOX_137 = (
    'E1127 08:40:01.123456    812 evented.go:119] "Evented PLEG: received ContainerEventResponse with nil '
    'PodSandboxStatus or PodSandboxStatus.Metadata" containerEventResponse="&ContainerEventResponse{'
    "ContainerId:4f1c,ContainerEventType:CONTAINER_DELETED_EVENT,CreatedAt:1795250401123456789,"
    "PodSandboxStatus:nil,ContainersStatuses:[]*ContainerStatus{&ContainerStatus{Id:4f1c,State:"
    "CONTAINER_EXITED,ExitCode:1,Reason:Error,Message:unrecognized feature gate: Foo,},&ContainerStatus{"
    "Id:9a2b,State:CONTAINER_EXITED,ExitCode:1,Reason:Error,Message:Fall back to Generic PLEG relisting "
    'since Evented PLEG is not working,},},}"'
)


@pytest.mark.parametrize("version", ["v1.37.2", "v1.36.4"])
def test_the_harmless_nil_sandbox_line_never_fails_verification(version: str) -> None:
    kubelet = parse_version(version)
    period = 1.0 if kubelet.minor_pair >= (1, 37) else 300.0
    relists = 30 if kubelet.minor_pair >= (1, 37) else 0
    obs = observe(
        metrics(relists=relists, period=period),
        baseline=metrics(relists=0, period=period),
        log=[NIL_SANDBOX_137] * 7,
    )
    assert obs.log.count(Signal.NIL_SANDBOX) == 7
    assert obs.log.count(*(s for s in Signal if s is not Signal.NIL_SANDBOX)) == 0
    assert fallen_back(kubelet, obs.metrics, obs.log) is None
    assert evaluate(kubelet, ENABLED, obs, min_window=30).outcome is Outcome.PASS


def test_real_failure_lines_still_fail_beside_the_nil_sandbox_line() -> None:
    fast_path = (
        'E1127 08:40:02.000001    812 evented.go:141] "Evented PLEG: disabling container-termination '
        'fast path after exhausting event stream retries"'
    )
    obs = observe(
        metrics(relists=30, period=1),
        baseline=metrics(relists=0, period=1),
        log=[NIL_SANDBOX_137, fast_path, NIL_SANDBOX_137],
    )
    result = evaluate(parse_version("v1.37.2"), ENABLED, obs, min_window=30)
    assert result.outcome is Outcome.FAIL
    assert "disabling container-termination fast path" in result.reason
    fallback = (
        'I1127 08:40:02.000001    812 evented.go:186] "Fall back to Generic PLEG relisting since Evented '
        'PLEG is not working"'
    )
    obs = observe(metrics(errors=5), log=[NIL_SANDBOX_137, fallback])
    assert evaluate(V133, ENABLED, obs, min_window=30).outcome is Outcome.FAIL
    assert fallen_back(V133, None, scan([NIL_SANDBOX_137, fallback])) is not None
