"""The node fields (eventedpleg.logfields) in both --log-format outputs (cli.logformat)."""

from __future__ import annotations

import json
import logging

from eventedpleg.cli.logformat import formatter
from eventedpleg.logfields import fields


def _record(message: str, extra: dict[str, str]) -> logging.LogRecord:
    record = logging.LogRecord("eventedpleg.test", logging.INFO, __file__, 1, message, (), None)
    record.__dict__.update(extra)
    return record


def test_text_puts_the_known_fields_after_the_message_in_order() -> None:
    extra = fields(phase="apply", node="node-1", hash="abc123")
    line = formatter("text").format(_record("restarted kubelet", extra))
    assert line.endswith(" INFO eventedpleg.test: restarted kubelet node=node-1 hash=abc123 phase=apply")


def test_text_quotes_a_value_that_would_not_be_one_token() -> None:
    line = formatter("text").format(_record("step", {"nodeconfig": 'a b="c"'}))
    assert line.endswith(r'step nodeconfig="a b=\"c\""')


def test_text_without_fields_is_the_message_alone() -> None:
    assert formatter("text").format(_record("became leader", {})).endswith(": became leader")


def test_json_has_the_fields_as_top_level_keys() -> None:
    extra = fields(node="node-1", nodeconfig="cluster", hash="abc123", phase="apply")
    doc = json.loads(formatter("json").format(_record("wrote /etc/x (kubelet drop-in)", extra)))
    assert doc["message"] == "wrote /etc/x (kubelet drop-in)"
    assert {key: doc[key] for key in extra} == extra
    assert "hash" not in json.loads(formatter("json").format(_record("x", fields(node="n"))))
