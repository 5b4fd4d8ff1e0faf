"""The structured fields of a log line about one node (cli.logformat prints them): `key=value` after the
message in the text format, top-level keys in the JSON one. Passed as `extra=` to a logging call."""

from __future__ import annotations

# In the order the text format prints them.
FIELDS = ("node", "nodeconfig", "hash", "phase")


def fields(*, node: str = "", nodeconfig: str = "", hash: str = "", phase: str = "") -> dict[str, str]:
    """The fields that are known (empty ones are left out)."""
    given = {"node": node, "nodeconfig": nodeconfig, "hash": hash, "phase": phase}
    return {key: value for key, value in given.items() if value}
