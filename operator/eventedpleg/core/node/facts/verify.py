"""Decide from kubelet metrics, log lines and the runtime's config whether Evented PLEG is really in use.

Pure: the agent gathers an `Observation` (two metric scrapes, the journal since the kubelet restart, healthz,
Node Ready, CRI-O's running config) and `evaluate` returns PASS, FAIL or PENDING with the evidence behind it.
The signals differ by kubelet version (docs/compatibility.md §4; bare §N below refer to that file):

- <=1.36: the gate is on (`kubernetes_feature_enabled`), the event stream is connected
  (`kubelet_evented_pleg_connection_success_count` >= 1, error count < 5, no fallback line) and, the best
  "actually in use" signal, the generic relist has slowed from 1 s to 300 s
  (`kubelet_pleg_relist_interval_seconds`).
- 1.37 (k8s#139262): the relist stays at 1 s by design (no CPU saving); the failure signal is the error-level
  "disabling container-termination fast path" line (or the error counter reaching 5).
- Turning it off: the gate is off and relisting is back to every second.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from eventedpleg import constants as c
from eventedpleg.core.evidence import Evidence
from eventedpleg.core.node.facts.kubeletlog import STREAM_ERRORS, LogScan, Signal
from eventedpleg.core.node.facts.promtext import Metrics
from eventedpleg.core.runtimes import RuntimeProfile
from eventedpleg.core.versions import Version

FEATURE_METRIC = "kubernetes_feature_enabled"
CONN_SUCCESS = "kubelet_evented_pleg_connection_success_count"
CONN_ERROR = "kubelet_evented_pleg_connection_error_count"
CONN_LATENCY_COUNT = "kubelet_evented_pleg_connection_latency_seconds_count"
RELIST_COUNT = "kubelet_pleg_relist_interval_seconds_count"
RELIST_SUM = "kubelet_pleg_relist_interval_seconds_sum"

# evented.go: eventedPlegMaxStreamRetries = 5, then the one-way fallback (§4, k8s#129827).
MAX_STREAM_RETRIES = 5
# kubelet.go: genericPlegRelistPeriod = 1s, eventedPlegRelistPeriod = 300s (§4).
GENERIC_RELIST_SECONDS = 1.0
EVENTED_RELIST_SECONDS = 300.0
MAX_LINES = 4


class Outcome(StrEnum):
    PASS = "pass"  # noqa: S105 - an outcome, not a password
    FAIL = "fail"
    PENDING = "pending"


class RelistMode(StrEnum):
    EVENTED = "evented"  # ~300 s between relists: the event stream drives the pod cache (<=1.36)
    GENERIC = "generic"  # ~1 s: polling
    UNKNOWN = "unknown"  # not enough data yet


@dataclass(frozen=True)
class Expectation:
    """What must hold. None means "do not check" (e.g. re-verifying the state before a failed apply)."""

    gate: bool | None
    in_use: bool | None  # the event stream drives the PLEG (<=1.36) / feeds relist hints (1.37)
    # The runtime whose running config must have its drop-in's setting on; None: nothing to read back.
    runtime_readback: RuntimeProfile | None = None

    @classmethod
    def enabled(cls, runtime: RuntimeProfile | None) -> Expectation:
        """`runtime`: the node's runtime profile; read back only when the profile can."""
        reads_back = runtime is not None and runtime.reads_back_config and runtime.dropin is not None
        return cls(gate=True, in_use=True, runtime_readback=runtime if reads_back else None)

    @classmethod
    def disabled(cls) -> Expectation:
        return cls(gate=False, in_use=False)


@dataclass(frozen=True)
class Observation:
    window_seconds: float  # time between `baseline` and `metrics`
    healthz: bool
    healthz_detail: str = ""
    node_ready: bool | None = None  # None: unknown (not checked)
    baseline: Metrics | None = None  # first scrape after the kubelet became healthy
    metrics: Metrics | None = None  # latest scrape; None when /metrics did not answer
    metrics_error: str = ""  # why the latest scrape got no metrics (one line)
    log: LogScan = field(default_factory=LogScan)  # journal since the kubelet restart
    runtime_events: bool | None = None  # the running runtime's drop-in setting (CRI-O: enable_pod_events)
    runtime_source: str = ""  # which command told us


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool | None  # True passed, False failed, None not decided yet / informational
    observed: str
    required: bool = True

    def render(self) -> str:
        words = {True: "ok", False: "FAIL", None: "wait" if self.required else "info"}
        return f"{words[self.ok]}: {self.observed}"


@dataclass(frozen=True)
class VerifyResult:
    outcome: Outcome
    reason: str
    checks: tuple[Check, ...]
    lines: tuple[str, ...] = ()
    kubelet: str = ""
    window_seconds: float = 0.0

    def check(self, name: str) -> Check | None:
        return next((ch for ch in self.checks if ch.name == name), None)

    def evidence(self) -> Evidence:
        return Evidence.verification(
            result=self.outcome.value,
            kubelet=self.kubelet,
            window_seconds=self.window_seconds,
            checks={ch.name: ch.render() for ch in self.checks},
            lines=self.lines,
        )


# --- individual signals ---------------------------------------------------------------------------------


def gate_metric(metrics: Metrics | None) -> tuple[bool | None, str]:
    """`kubernetes_feature_enabled{name="EventedPLEG",stage="ALPHA"} 1` (k8s#112690; stage BETA on the
    1.27.0-1.29.0 builds, §4)."""
    if metrics is None:
        return None, "metrics unavailable"
    found = metrics.find(FEATURE_METRIC, name=c.FEATURE_GATE)
    if not found:
        return None, f'{FEATURE_METRIC}{{name="{c.FEATURE_GATE}"}} absent'
    sample = found[-1]
    stage = sample.label("stage") or "?"
    text = f'{FEATURE_METRIC}{{name="{c.FEATURE_GATE}",stage="{stage}"}} {sample.value:g}'
    return sample.value >= 1, text


def relist_mode(baseline: Metrics | None, latest: Metrics | None, window: float) -> tuple[RelistMode, str]:
    """How often the generic PLEG relisted between two scrapes (§4, relist periods).

    `kubelet_pleg_relist_interval_seconds` observes the time between relists: ~1 s when polling, 300 s while
    the event stream is healthy on <=1.36. Over a window of W seconds, polling adds ~W observations and
    evented mode adds at most one per 300 s.
    """
    if latest is None or baseline is None:
        return RelistMode.UNKNOWN, "metrics unavailable"
    count_now, count_then = latest.value(RELIST_COUNT), baseline.value(RELIST_COUNT)
    sum_now, sum_then = latest.value(RELIST_SUM), baseline.value(RELIST_SUM)
    if count_now is None or count_then is None or sum_now is None or sum_then is None:
        return RelistMode.UNKNOWN, "kubelet_pleg_relist_interval_seconds absent"
    count = count_now - count_then
    total = sum_now - sum_then
    if count > 0:
        mean = total / count
        text = f"{count:.0f} relists in {window:.0f}s, mean interval {mean:.1f}s"
        if mean >= EVENTED_RELIST_SECONDS / 3:
            return RelistMode.EVENTED, text
        if count >= 3 and mean <= 10 * GENERIC_RELIST_SECONDS:
            return RelistMode.GENERIC, text
        if count > max(1.0, window / 100):
            return RelistMode.GENERIC, text
        return RelistMode.UNKNOWN, text
    text = f"0 relists in {window:.0f}s (period >= {EVENTED_RELIST_SECONDS:.0f}s)"
    if window >= 10 * GENERIC_RELIST_SECONDS:
        return RelistMode.EVENTED, text
    return RelistMode.UNKNOWN, text


def _counter(metrics: Metrics | None, name: str) -> float | None:
    return None if metrics is None else metrics.value(name)


def fallen_back(kubelet: Version, metrics: Metrics | None, log: LogScan) -> str | None:
    """Why the kubelet has given up on the event stream, or None (after Done; k8s#129827)."""
    errors = _counter(metrics, CONN_ERROR)
    if errors is not None and errors >= MAX_STREAM_RETRIES:
        return f"{CONN_ERROR} {errors:g} (>= {MAX_STREAM_RETRIES}: the kubelet fell back to generic PLEG)"
    if kubelet.minor_pair >= (1, 37):
        line = log.example(Signal.FAST_PATH_DISABLED)
    else:
        line = log.example(Signal.FALLBACK)
    if line:
        return line
    if log.count(*STREAM_ERRORS) >= MAX_STREAM_RETRIES:
        return f"{log.count(*STREAM_ERRORS)} CRI event-stream errors: {log.example(*STREAM_ERRORS)}"
    return None


# --- the verdict -----------------------------------------------------------------------------------------


def _health_checks(obs: Observation) -> list[Check]:
    detail = obs.healthz_detail or ("/healthz ok" if obs.healthz else "/healthz did not answer")
    checks = [Check("healthz", True if obs.healthz else None, detail)]
    if obs.node_ready is not None:
        ready = "Ready=True" if obs.node_ready else "Ready is not True"
        checks.append(Check("nodeReady", True if obs.node_ready else None, ready))
    return checks


def _gate_checks(expect: Expectation, obs: Observation) -> list[Check]:
    """The gate as the running kubelet has it: the metric, else the V(1) feature-gates line (§4)."""
    gate_on, text = gate_metric(obs.metrics)
    if obs.metrics is None and obs.metrics_error:
        text = f"{text}: {obs.metrics_error}"
    logged = obs.log.feature_gates
    if gate_on is None and logged is not None and c.FEATURE_GATE in logged:
        gate_on = logged[c.FEATURE_GATE]
        text = f"{text}; log: {obs.log.example(Signal.FEATURE_GATES)}"
    if expect.gate is None:
        checks = [Check("gate", None, text, required=False)]
    else:
        if gate_on is None and expect.gate is False and obs.metrics is not None:
            gate_on = False  # a kubelet that does not know the gate (<1.26) has it off
        checks = [Check("gate", None if gate_on is None else gate_on == expect.gate, text)]
    if logged is not None:
        checks.append(Check("gateLog", None, obs.log.example(Signal.FEATURE_GATES) or "", required=False))
    return checks


def _runtime_checks(expect: Expectation, obs: Observation) -> list[Check]:
    profile = expect.runtime_readback
    if profile is None or profile.dropin is None:
        return []
    key, value = profile.dropin.setting[-1], obs.runtime_events
    if value is None:
        source = obs.runtime_source or profile.config_commands[0][0]
        return [Check(profile.check_name, None, f"could not read {key} ({source})")]
    text = f"{key} = {str(value).lower()} ({obs.runtime_source})"
    return [Check(profile.check_name, value is True, text)]


def _stream_check(kubelet: Version, obs: Observation) -> tuple[Check, str | None]:
    """The event stream: fell back (FAIL), erroring but not yet given up (wait), connected (ok)."""
    errors = _counter(obs.metrics, CONN_ERROR)
    successes = _counter(obs.metrics, CONN_SUCCESS)
    error_lines = obs.log.count(*STREAM_ERRORS)
    why_fallen = fallen_back(kubelet, obs.metrics, obs.log)
    if why_fallen:
        line = obs.log.example(Signal.FALLBACK, Signal.FAST_PATH_DISABLED, *STREAM_ERRORS)
        return Check("stream", False, why_fallen), line
    if errors or error_lines:
        text = f"{CONN_ERROR} {errors or 0:g}, {error_lines} stream error lines (< {MAX_STREAM_RETRIES})"
        return Check("stream", None, text), obs.log.example(*STREAM_ERRORS)
    if not kubelet.at_least(1, 27):  # the evented metrics arrived with the 1.27 beta (k8s#115967)
        return Check("stream", True, "no stream errors logged (kubelet 1.26 has no evented metrics)"), None
    if successes is None:
        return Check("stream", None, f"{CONN_SUCCESS} absent"), None
    text = f"{CONN_SUCCESS} {successes:g}, {CONN_ERROR} {errors or 0:g}"
    return Check("stream", True if successes >= 1 else None, text), None


def _relist_check(kubelet: Version, expect: Expectation, obs: Observation) -> Check:
    mode, text = relist_mode(obs.baseline, obs.metrics, obs.window_seconds)
    narrowed = kubelet.minor_pair >= (1, 37)  # k8s#139262: relist stays at 1 s by design
    if expect.in_use is None:
        return Check("relist", None, text, required=False)
    if expect.in_use is False:
        if mode is RelistMode.EVENTED and not narrowed:
            return Check("relist", False, f"{text}: still evented, expected ~1 s")
        return Check("relist", True if mode is RelistMode.GENERIC else None, text)
    if narrowed:
        note = "1.37 relists every 1 s, events only hint relists: no steady-state CPU saving (k8s#139262)"
        return Check("relist", None, f"{text}; {note}", required=False)
    if mode is RelistMode.GENERIC:
        return Check("relist", False, f"{text}: still polling every ~1 s, Evented PLEG is not in use")
    return Check("relist", True if mode is RelistMode.EVENTED else None, text)


def _events_check(obs: Observation) -> tuple[Check, str | None]:
    flowing = obs.log.count(Signal.GENERATED_STATUS, Signal.RELIST_HINT, Signal.CONTAINER_EVENT)
    latency = _counter(obs.metrics, CONN_LATENCY_COUNT)
    text = f"{flowing} event lines" + (f", {CONN_LATENCY_COUNT} {latency:g}" if latency is not None else "")
    return Check("events", None, text, required=False), obs.log.example(
        Signal.GENERATED_STATUS, Signal.RELIST_HINT
    )


def evaluate(kubelet: Version, expect: Expectation, obs: Observation, *, min_window: float) -> VerifyResult:
    """PASS only when every required signal holds over at least `min_window` seconds; FAIL at once when a
    signal contradicts the expectation; PENDING otherwise (the caller retries until its timeout)."""
    checks = _health_checks(obs) + _gate_checks(expect, obs) + _runtime_checks(expect, obs)
    lines: list[str] = []
    if expect.in_use is True:
        stream, line = _stream_check(kubelet, obs)
        checks.append(stream)
        lines += [line] if line else []
    checks.append(_relist_check(kubelet, expect, obs))
    if expect.in_use is True:
        events, line = _events_check(obs)
        checks.append(events)
        lines += [line] if line else []
    start = obs.log.example(Signal.UNKNOWN_GATE, Signal.LOCKED_GATE, Signal.INVALID_DROPIN)
    if start:
        lines.insert(0, start)

    failed = [ch for ch in checks if ch.ok is False]
    undecided = [ch for ch in checks if ch.ok is None and ch.required]
    if failed:
        outcome, reason = Outcome.FAIL, f"{failed[0].name}: {failed[0].observed}"
    elif undecided:
        outcome, reason = Outcome.PENDING, f"waiting for {undecided[0].name}: {undecided[0].observed}"
    elif obs.window_seconds < min_window:
        outcome, reason = Outcome.PENDING, f"observed {obs.window_seconds:.0f}s of {min_window:.0f}s"
    else:
        outcome, reason = Outcome.PASS, _pass_reason(expect, kubelet.minor_pair >= (1, 37))
    return VerifyResult(
        outcome, reason, tuple(checks), tuple(lines[:MAX_LINES]), str(kubelet), obs.window_seconds
    )


def _pass_reason(expect: Expectation, narrowed: bool) -> str:
    if expect.in_use is True and narrowed:
        return "Evented PLEG on (1.37: event stream watched for container stops; relist stays 1 s)"
    if expect.in_use is True:
        return "Evented PLEG in use: event stream connected, generic relist slowed to 300 s"
    if expect.in_use is False:
        return "generic PLEG: gate off, relisting every 1 s"
    return "kubelet healthy"
