"""--log-format for the long-running commands (operator, agent): text for people, json (one object per
line, python-json-logger's formatter) for log pipelines that parse fields (Loki, Elasticsearch, Cloud
Logging)."""

from __future__ import annotations

import logging

import click

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

log_format_option = click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    envvar="EVENTEDPLEG_LOG_FORMAT",
    default="text",
    show_default=True,
    help="json: one JSON object per line (time, level, logger, message, and exc_info when there is one).",
)


def configure(log_format: str, verbose: bool) -> None:
    """Set up the root logger once, for the process."""
    handler = logging.StreamHandler()
    if log_format == "json":
        from pythonjsonlogger.json import JsonFormatter  # noqa: PLC0415 - only when asked for

        handler.setFormatter(
            JsonFormatter(
                "%(asctime)s %(levelname)s %(name)s %(message)s",
                rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
            )
        )
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler])
