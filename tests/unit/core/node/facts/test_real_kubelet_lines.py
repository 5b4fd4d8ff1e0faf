"""Lines printed by REAL kubelets (v1.36.4, v1.37.2) on the real node rig, replayed through the agent's
parsers on every machine. Recorded by `EVENTEDPLEG_RECORD_FIXTURES=1 pytest -m realnode` (see
docs/realnode.md); a pattern change that stops matching what a real kubelet prints fails here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eventedpleg.core.node.facts.kubeletlog import (
    STREAM_ERRORS,
    Signal,
    classify,
    parse_feature_gates_line,
    scan,
)
from eventedpleg.core.node.facts.verify import fallen_back
from eventedpleg.core.versions import parse_version

FIXTURE = Path(__file__).parents[4] / "realnode" / "fixtures" / "kubelet-lines.json"
RECORDED = json.loads(FIXTURE.read_text())
SIGNALS: dict[str, str] = RECORDED["signals"]


@pytest.mark.parametrize("signal", sorted(SIGNALS))
def test_each_real_line_is_recognised_as_what_it_is(signal: str) -> None:
    assert classify(SIGNALS[signal]) is Signal(signal)


def test_the_real_signals_the_agent_decides_on_were_all_recorded() -> None:
    wanted = {
        Signal.FEATURE_GATES,
        Signal.FALLBACK,
        Signal.RETRY,
        Signal.CRI_RECV_FAILED,
        Signal.RELIST_HINT,
        Signal.FAST_PATH_DISABLED,
    }
    assert wanted <= {Signal(s) for s in SIGNALS}


def test_the_real_gate_line_says_the_gate_is_on() -> None:
    assert parse_feature_gates_line(SIGNALS[Signal.FEATURE_GATES]) == {"EventedPLEG": True}


def test_real_fallback_lines_make_the_agent_call_it_a_fallback_on_both_versions() -> None:
    v136, v137 = parse_version("v1.36.4"), parse_version("v1.37.2")
    assert fallen_back(v136, None, scan([SIGNALS[Signal.FALLBACK]])) is not None
    assert fallen_back(v137, None, scan([SIGNALS[Signal.FAST_PATH_DISABLED]])) is not None
    stream_errors = [SIGNALS[s] for s in STREAM_ERRORS if s in SIGNALS] * 5
    assert fallen_back(v136, None, scan(stream_errors)) is not None
