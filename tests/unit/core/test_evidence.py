"""The evidence document (core.evidence): bounded fields, and JSON that stays valid within its limit --
in the agent's annotation and in the NodeConfig status."""

from __future__ import annotations

import json

from eventedpleg.core.evidence import MAX_LINES, MAX_TEXT, STATUS_LIMIT, Evidence, compact_json, for_status


def _verification(result: str, line: str) -> Evidence:
    return Evidence.verification(
        result=result,
        kubelet="v1.34.2",
        window_seconds=30.4,
        checks={"healthz": "ok: /healthz ok", "stream": f"FAIL: {line}"},
        lines=[line] * 6,
    )


def test_fields_are_bounded_when_built() -> None:
    doc = _verification("fail", "x" * 5000)
    assert doc.lines is not None and len(doc.lines) == MAX_LINES
    assert all(len(line) == MAX_TEXT for line in doc.lines)
    assert doc.window == "30s"
    assert Evidence(result="r" * 2000).result == "r" * (MAX_TEXT - 1) + "…"


def test_annotation_round_trips_and_leaves_out_what_is_absent() -> None:
    doc = Evidence(result="refused", reason="no --config", fix="add one", changed="nothing")
    text = doc.to_json()
    assert text == '{"result":"refused","reason":"no --config","fix":"add one","changed":"nothing"}'
    assert Evidence.parse(text) == doc


def test_a_failed_apply_fits_the_status_as_valid_json_keeping_the_verdicts() -> None:
    line = 'E1102 evented.go:120] "container events stream is closed" err="' + "é" * 3000 + '"'
    doc = Evidence(
        failure=_verification("fail", line), warnings=("w" * 900,), rollback=_verification("pass", line)
    )
    annotation = doc.to_json()
    assert len(annotation) <= 2048
    shown = for_status(annotation)
    assert len(shown) <= STATUS_LIMIT
    parsed = json.loads(shown)  # a plain cut at 600 characters would not parse
    assert parsed["failure"]["result"] == "fail"
    assert parsed["rollback"]["result"] == "pass"
    assert json.dumps(parsed, separators=(",", ":"), ensure_ascii=False) == shown  # compact


def test_status_keeps_what_other_writers_put_there_and_quotes_what_is_not_evidence() -> None:
    stand_in = '{"result":"pass","agent":"protocol"}'
    assert json.loads(for_status(stand_in)) == {"result": "pass", "agent": "protocol"}
    assert for_status("") == ""
    garbled = for_status("not json " * 200)
    assert len(garbled) <= STATUS_LIMIT
    assert json.loads(garbled)["unparsed"].startswith("not json")


def test_compact_json_always_fits_and_always_parses() -> None:
    for limit in (40, 100, 600):
        for value in ("b" * 10_000, '"' * 10_000, "é" * 10_000):
            text = compact_json({"a": value, "lines": ["l" * 500] * 3}, limit)
            assert len(text) <= limit, (limit, value[:1])
            json.loads(text)
