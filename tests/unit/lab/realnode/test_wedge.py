"""The wedge trigger's readings on real kubelet output: which skip lines are the wedge; the two metrics."""

from __future__ import annotations

from pathlib import Path

import pytest

from eventedpleg_lab.realnode.rig import RigError
from eventedpleg_lab.realnode.wedge import PlegMetrics, is_wedge_line

FIXTURES = Path(__file__).resolve().parents[3] / "realnode" / "fixtures"
# Printed by kubelet v1.36.4 on the rig (bench/results/podstart.json, the wedged gate-on arm).
WEDGED = (
    'E1127 19:14:31.288370   18892 kubelet.go:2646] "Skipping pod synchronization" err="EventedPLEG is not '
    'healthy: EventedPLEG: pleg event channel capacity is full with 1000 events"'
)
# What every kubelet prints for its first passes (runtime.go:127, pleg/generic.go:241); v1.36.4 on the rig,
# 2026-11-28.
STARTING = (
    'E1128 13:15:19.056512    7355 kubelet.go:2646] "Skipping pod synchronization" err="[container runtime '
    'status check may not have completed yet, PLEG is not healthy: pleg has yet to be successful]"'
)
DISCARDED = (  # the same run, the line before it
    'E1128 13:16:16.207937    7914 evented.go:329] "Evented PLEG: Event channel is full, discarded pod '
    'lifecycle event"'
)


def test_only_the_full_channel_skip_is_the_wedge() -> None:
    assert is_wedge_line(WEDGED)
    assert not is_wedge_line(STARTING)
    assert not is_wedge_line(DISCARDED)


def test_metrics_of_a_real_kubelet_give_the_discards_and_the_age_of_the_last_healthy_check() -> None:
    body = (FIXTURES / "kubelet-metrics-v1.36.4.txt").read_text()
    pleg = PlegMetrics.parse(body, now=1.795429944e09 + 42)
    assert pleg == PlegMetrics(discards=0.0, last_seen_age_s=42.0, events_seen=0.0)


def test_a_kubelet_without_the_gauge_is_an_error_not_a_fresh_reading() -> None:
    with pytest.raises(RigError):
        PlegMetrics.parse("kubelet_pleg_discard_events 3\n", now=0.0)
