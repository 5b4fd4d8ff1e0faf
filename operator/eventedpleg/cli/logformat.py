"""--log-format for the long-running commands (operator, agent): text for people, json (one object per
line, python-json-logger's formatter) for log pipelines that parse fields (Loki, Elasticsearch, Cloud
Logging)."""

from __future__ import annotations

import json
import logging

import click

from eventedpleg.logfields import FIELDS

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

log_format_option = click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    envvar="EVENTEDPLEG_LOG_FORMAT",
    default="text",
    show_default=True,
    help="json: one JSON object per line (time, level, logger, message, the node's fields, and exc_info "
    "when there is one).",
)


class TextFormatter(logging.Formatter):
    """TEXT_FORMAT, then the line's node fields (eventedpleg.logfields) as `key=value`."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        said = [f"{key}={_value(getattr(record, key))}" for key in FIELDS if getattr(record, key, "")]
        return " ".join([super().formatMessage(record), *said])


def _value(value: object) -> str:
    """A value as one token: quoted when it has a space, a quote or an equals sign."""
    text = str(value)
    return json.dumps(text) if not text or any(ch in text for ch in ' "=') else text


def formatter(log_format: str) -> logging.Formatter:
    """The formatter of `log_format` (text or json); json puts the node fields at the top level."""
    if log_format == "json":
        from pythonjsonlogger.json import JsonFormatter  # noqa: PLC0415 - only when asked for

        return JsonFormatter(
            "%(asctime)s %(levelname)s %(name)s %(message)s",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
        )
    return TextFormatter()


def configure(log_format: str, verbose: bool) -> None:
    """Set up the root logger once, for the process."""
    handler = logging.StreamHandler()
    handler.setFormatter(formatter(log_format))
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler])
