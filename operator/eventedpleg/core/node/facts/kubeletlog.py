"""Recognise the kubelet log lines that tell whether Evented PLEG is on, working or has fallen back.

Every pattern is the literal message from the kubelet source as listed in docs/compatibility.md §1 and §4
(evented.go for <=1.36 and for 1.37 after k8s#139262, remote_runtime.go for the CRI client, feature_gate.go),
checked against what real v1.36.4/v1.37.2 kubelets print (§7). Lines are matched by substring so journald
prefixes and klog headers (`E0612 10:00:01.1 1234 log.go:32] ...`) do not matter. Verbosity matters:
V(1)/V(4) lines only appear with --v>=1/--v>=4, error lines always. Bare §N below refer to
docs/compatibility.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

EXAMPLE_LENGTH = 240


class Signal(StrEnum):
    # component-base feature_gate.go, V(1), one line per SetFromMap call. Up to 1.35: "feature gates: %v"
    # -> `feature gates: &{map[EventedPLEG:true]}` (§4). From 1.36 (component-base v0.36, seen on real
    # v1.36.4 and v1.37.2 kubelets): `"Updated" featureGates={"EventedPLEG":true}`, only the gates set there.
    FEATURE_GATES = "featureGates"
    # evented.go <=1.36, V(4): events arrive and become pod statuses (§4).
    GENERATED_STATUS = "generatedStatus"
    CONTAINER_EVENT = "containerEvent"
    # evented.go <=1.36, V(4): one stream failure / the one-way fallback after 5 failures (§4).
    RETRY = "retry"
    FALLBACK = "fallback"
    # evented.go 1.37 (k8s#139262): V(4) retry (lower-case "failed"), error-level give-up, V(4) relist hint.
    RETRY_137 = "retry137"
    FAST_PATH_DISABLED = "fastPathDisabled"
    RELIST_HINT = "relistHint"
    # remote_runtime.go (logged as log.go), error level, any kubelet version (§4).
    CRI_NO_CLIENT = "criNoStreamingClient"
    CRI_STREAM_CLOSED = "criStreamClosed"  # CRI-O with enable_pod_events=false: EOF (§2)
    CRI_RECV_FAILED = "criReceiveFailed"  # containerd 1.6: Unimplemented (§2)
    # kubelet.go <=1.36, error level: the sync loop skips its pass while the evented health check fails on a
    # full PLEG channel, and nothing else drains it: the kubelet stopped syncing pods until it is restarted
    # (docs/compatibility.md "kubelet-pleg-wedge").
    WEDGE = "wedge"
    # evented.go, error level: events lost (§4).
    CHANNEL_FULL = "channelFull"
    # evented.go, error level but harmless: an event without a sandbox status is skipped (§4). Counted,
    # never a failure.
    NIL_SANDBOX = "nilSandboxStatus"
    # The kubelet refused to start (§1, §3).
    UNKNOWN_GATE = "unknownGate"
    LOCKED_GATE = "lockedGate"
    INVALID_DROPIN = "invalidDropIn"
    # component-base cli.Run: klog.ErrorS(err, "command failed") when the kubelet exits during startup.
    COMMAND_FAILED = "commandFailed"


# The exact message of evented.go (v1.36.4 line 231, v1.37.2 line 119): error level, yet harmless (the
# event is skipped and the relist syncs the pod; containerd sends such events on pod deletion, k8s#114351).
NIL_SANDBOX_MESSAGE = (
    "Evented PLEG: received ContainerEventResponse with nil PodSandboxStatus or PodSandboxStatus.Metadata"
)

# Order matters only where one message contains another; each line counts for the first signal matching.
# The harmless nil-sandbox line comes first: it dumps the whole event, whose container statuses carry
# the containers' own exit messages, which may read like any failure line below.
_PATTERNS: tuple[tuple[Signal, re.Pattern[str]], ...] = (
    (Signal.NIL_SANDBOX, re.compile(re.escape(NIL_SANDBOX_MESSAGE))),
    (Signal.FEATURE_GATES, re.compile(r"feature gates: &\{map\[|\"Updated\" featureGates=\{")),
    (Signal.GENERATED_STATUS, re.compile(r"Evented PLEG: Generated pod status from the received event")),
    (Signal.CONTAINER_EVENT, re.compile(r"Received Container (Started|Stopped|Created|Deleted) Event")),
    (Signal.RETRY, re.compile(r"Evented PLEG: Failed to get container events, retrying")),
    (Signal.FALLBACK, re.compile(r"Fall back to Generic PLEG relisting since Evented PLEG is not working")),
    (Signal.RETRY_137, re.compile(r"Evented PLEG: failed to get container events, retrying")),
    (
        Signal.FAST_PATH_DISABLED,
        # v1.37.2 says "container-termination"; the k8s#139262 commit said "unexpected-termination".
        re.compile(
            r"Evented PLEG: disabling (?:unexpected|container)-termination fast path "
            r"after exhausting event stream"
        ),
    ),
    (
        Signal.RELIST_HINT,
        # v1.37.2: "after container termination" (any CONTAINER_STOPPED event); earlier: "unexpected".
        re.compile(r"Evented PLEG: requested pod relist after (?:unexpected )?container termination"),
    ),
    (Signal.CRI_NO_CLIENT, re.compile(r"GetContainerEvents failed to get streaming client")),
    (Signal.CRI_STREAM_CLOSED, re.compile(r"container events stream is closed")),
    (Signal.CRI_RECV_FAILED, re.compile(r"failed to receive streaming container event")),
    (Signal.WEDGE, re.compile(r"Skipping pod synchronization.*EventedPLEG is not healthy")),
    (
        Signal.CHANNEL_FULL,
        re.compile(r"Evented PLEG: Event channel is full|pleg event channel capacity is full"),
    ),
    (Signal.UNKNOWN_GATE, re.compile(r"unrecognized feature gate: ")),
    (Signal.LOCKED_GATE, re.compile(r"cannot set feature gate \S+ to \S+, feature is locked to")),
    (Signal.INVALID_DROPIN, re.compile(r"failed to load kubelet dropin file")),
    (Signal.COMMAND_FAILED, re.compile(r'"command failed"')),
)

_GATES = re.compile(r"feature gates: &\{map\[(?P<body>[^\]]*)\]\}")
_GATES_136 = re.compile(r"\"Updated\" featureGates=(?P<json>\{[^{}]*\})")

# Errors from the CRI event stream: each is one failed attempt of the 5 the kubelet allows (§4).
STREAM_ERRORS = frozenset({Signal.CRI_NO_CLIENT, Signal.CRI_STREAM_CLOSED, Signal.CRI_RECV_FAILED})
# The kubelet did not start because of its configuration.
START_FAILURES = frozenset(
    {Signal.UNKNOWN_GATE, Signal.LOCKED_GATE, Signal.INVALID_DROPIN, Signal.COMMAND_FAILED}
)


@dataclass(frozen=True)
class LogScan:
    counts: Mapping[Signal, int] = field(default_factory=dict)
    examples: Mapping[Signal, str] = field(default_factory=dict)  # the last matching line, trimmed
    feature_gates: Mapping[str, bool] | None = None  # from the last feature-gates line

    def count(self, *signals: Signal) -> int:
        return sum(self.counts.get(s, 0) for s in signals)

    def example(self, *signals: Signal) -> str | None:
        for s in signals:
            if s in self.examples:
                return self.examples[s]
        return None


def parse_feature_gates_line(line: str) -> dict[str, bool] | None:
    """`feature gates: &{map[AllAlpha:false EventedPLEG:true]}` (<=1.35) or
    `"Updated" featureGates={"AllAlpha":false,"EventedPLEG":true}` (>=1.36) -> {"AllAlpha": False, ...}"""
    match = _GATES_136.search(line)
    if match:
        try:
            doc = json.loads(match["json"])
        except ValueError:
            return None
        return {str(k): v for k, v in doc.items() if isinstance(v, bool)} if isinstance(doc, dict) else None
    match = _GATES.search(line)
    if not match:
        return None
    gates: dict[str, bool] = {}
    for item in match["body"].split():
        name, _, value = item.partition(":")
        if value in ("true", "false"):
            gates[name] = value == "true"
    return gates


def classify(line: str) -> Signal | None:
    for signal, pattern in _PATTERNS:
        if pattern.search(line):
            return signal
    return None


_KLOG_HEADER = re.compile(r"^.*?[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d+\s+\d+ (?=\S+:\d+\] )")


def _trim(line: str) -> str:
    """Drop journald/klog prefixes up to `file.go:NN]`, which stays (it tells which code logged it)."""
    line = _KLOG_HEADER.sub("", line.strip())
    return line if len(line) <= EXAMPLE_LENGTH else line[: EXAMPLE_LENGTH - 1] + "…"


def scan(lines: Iterable[str]) -> LogScan:
    counts: dict[Signal, int] = {}
    examples: dict[Signal, str] = {}
    gates: dict[str, bool] | None = None
    for line in lines:
        signal = classify(line)
        if signal is None:
            continue
        counts[signal] = counts.get(signal, 0) + 1
        examples[signal] = _trim(line)
        if signal is Signal.FEATURE_GATES:
            # Each line is one SetFromMap call (flags, then the merged config): later ones override.
            parsed = parse_feature_gates_line(line)
            if parsed is not None:
                gates = {**(gates or {}), **parsed}
    return LogScan(counts, examples, gates)
