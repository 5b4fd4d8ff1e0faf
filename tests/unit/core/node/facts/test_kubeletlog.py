# ruff: noqa: E501 - verbatim kubelet log lines
"""Kubelet log lines -> signals (literal messages from docs/compatibility.md §1, §4)."""

from __future__ import annotations

import pytest

from eventedpleg.core.node.facts.kubeletlog import Signal, classify, parse_feature_gates_line, scan

JOURNAL_PREFIX = "Jan 01 12:00:01 node-a kubelet[4321]: "

CASES = [
    (
        "I0101 12:00:00.1 4321 feature_gate.go:387] feature gates: &{map[EventedPLEG:true]}",
        Signal.FEATURE_GATES,
    ),
    (
        'I0101 12:00:00.1 4321 evented.go:272] "Evented PLEG: Generated pod status from the received event" podUID=x',
        Signal.GENERATED_STATUS,
    ),
    ('I0101 evented.go:360] "Received Container Started Event" containerID=x', Signal.CONTAINER_EVENT),
    (
        'I0101 evented.go:206] "Evented PLEG: Failed to get container events, retrying: " err="rpc error: code = '
        'Unavailable desc = error reading from server: EOF"',
        Signal.RETRY,
    ),
    (
        'I0101 evented.go:181] "Fall back to Generic PLEG relisting since Evented PLEG is not working"',
        Signal.FALLBACK,
    ),
    (
        'I0101 evented.go:190] "Evented PLEG: failed to get container events, retrying" err="EOF"',
        Signal.RETRY_137,
    ),
    (
        'E0101 evented.go:176] "Evented PLEG: disabling unexpected-termination fast path after exhausting event '
        'stream retries"',
        Signal.FAST_PATH_DISABLED,
    ),
    (
        'I0101 evented.go:1] "Evented PLEG: requested pod relist after unexpected container termination"',
        Signal.RELIST_HINT,
    ),
    ('E0101 log.go:32] "GetContainerEvents failed to get streaming client" err="x"', Signal.CRI_NO_CLIENT),
    ('E0101 log.go:32] "container events stream is closed" err="EOF"', Signal.CRI_STREAM_CLOSED),
    (
        'E0101 log.go:32] "failed to receive streaming container event" err="Unimplemented"',
        Signal.CRI_RECV_FAILED,
    ),
    (
        'E0101 evented.go:1] "Evented PLEG: Event channel is full, discarded pod lifecycle event"',
        Signal.CHANNEL_FULL,
    ),
    (
        "E0101 generic.go:1] EventedPLEG: pleg event channel capacity is full with 1000 events",
        Signal.CHANNEL_FULL,
    ),
    (
        'E0101 evented.go:1] "Evented PLEG: received ContainerEventResponse with nil PodSandboxStatus or '
        'PodSandboxStatus.Metadata"',
        Signal.NIL_SANDBOX,
    ),
    (
        'E0101 run.go:72] "command failed" err="failed to set feature gates from initial flags-based config: '
        'unrecognized feature gate: EventedPLEG"',
        Signal.UNKNOWN_GATE,
    ),
    (
        "E0101 run.go:72] cannot set feature gate EventedPLEG to true, feature is locked to false",
        Signal.LOCKED_GATE,
    ),
    (
        'E0101 run.go:72] "command failed" err="failed to load kubelet dropin file, path: /x.conf, no apiVersion/kind"',
        Signal.INVALID_DROPIN,
    ),
    ('E0101 run.go:72] "command failed" err="failed to run Kubelet: boom"', Signal.COMMAND_FAILED),
    ('I0101 kubelet.go:1] "Syncing pod" pod="x"', None),
]


@pytest.mark.parametrize(("line", "signal"), CASES)
def test_classify(line: str, signal: Signal | None) -> None:
    assert classify(line) is signal
    assert classify(JOURNAL_PREFIX + line) is signal  # journald prefixes do not matter


def test_136_and_137_retry_lines_are_told_apart() -> None:
    assert classify('"Evented PLEG: Failed to get container events, retrying: "') is Signal.RETRY
    assert classify('"Evented PLEG: failed to get container events, retrying"') is Signal.RETRY_137


def test_feature_gates_line() -> None:
    assert parse_feature_gates_line("feature gates: &{map[AllAlpha:false EventedPLEG:true]}") == {
        "AllAlpha": False,
        "EventedPLEG": True,
    }
    assert parse_feature_gates_line("feature gates: &{map[]}") == {}
    assert parse_feature_gates_line("no gates here") is None


def test_137_lines_as_v1_37_2_prints_them() -> None:
    # pkg/kubelet/pleg/evented.go at v1.37.2 (the released wording differs from the k8s#139262 commit's).
    given_up = (
        'E1123 01:20:01.1 5928 evented.go:81] "Evented PLEG: disabling container-termination fast path after '
        'exhausting event stream retries" err="rpc error: code = Unimplemented" retries=5'
    )
    hint = 'I1123 01:22:01.1 5928 evented.go:132] "Evented PLEG: requested pod relist after container termination"'
    assert classify(given_up) is Signal.FAST_PATH_DISABLED
    assert classify(hint) is Signal.RELIST_HINT


def test_feature_gates_line_of_136_and_later() -> None:
    # Exactly as real v1.36.4 / v1.37.2 kubelets print it (component-base v0.36: logger.V(1).Info("Updated")).
    line = 'I1123 01:07:39.524405    1802 feature_gate.go:477] "Updated" featureGates={"EventedPLEG":true}'
    assert classify(line) is Signal.FEATURE_GATES
    assert parse_feature_gates_line(line) == {"EventedPLEG": True}
    assert parse_feature_gates_line('"Updated" featureGates={}') == {}
    assert parse_feature_gates_line('"Updated" featureGates={"A":true,"EventedPLEG":false}') == {
        "A": True,
        "EventedPLEG": False,
    }


def test_partial_gate_updates_merge_and_the_later_one_wins() -> None:
    # The kubelet calls SetFromMap more than once per start (flags, then the merged configuration).
    result = scan(
        [
            '"Updated" featureGates={}',
            '"Updated" featureGates={"KubeletTracing":false}',
            '"Updated" featureGates={"EventedPLEG":true}',
        ]
    )
    assert result.feature_gates == {"KubeletTracing": False, "EventedPLEG": True}
    assert result.count(Signal.FEATURE_GATES) == 3


def test_scan_counts_and_keeps_the_last_example_without_the_klog_header() -> None:
    lines = [JOURNAL_PREFIX + line for line, _ in CASES] + [
        'E0101 12:00:03.000000    4321 log.go:32] "container events stream is closed" err="EOF"'
    ]
    result = scan(lines)
    assert result.count(Signal.CRI_STREAM_CLOSED) == 2
    assert (
        result.example(Signal.CRI_STREAM_CLOSED) == 'log.go:32] "container events stream is closed" err="EOF"'
    )
    assert result.feature_gates == {"EventedPLEG": True}
    assert result.count(Signal.FALLBACK, Signal.RETRY) == 2
