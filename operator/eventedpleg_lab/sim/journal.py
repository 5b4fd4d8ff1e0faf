"""The simulated journal: klog-formatted lines per unit, bounded so a thousand hosts stay cheap."""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from datetime import datetime

MAX_LINES_PER_UNIT = 400


@dataclass(frozen=True)
class Entry:
    at: datetime
    message: str


def klog(severity: str, at: datetime, pid: int, source: str, message: str) -> str:
    """`E0612 10:00:01.123456    1234 log.go:32] "container events stream is closed" err="EOF"`."""
    stamp = at.strftime("%m%d %H:%M:%S.%f")
    return f"{severity}{stamp} {pid:>7} {source}] {message}"


class Journal:
    def __init__(self, limit: int = MAX_LINES_PER_UNIT) -> None:
        self._units: dict[str, deque[Entry]] = {}
        self._written: dict[str, int] = {}  # entries ever written per unit: the cursor of journal_after
        self._limit = limit

    def write(self, unit: str, at: datetime, message: str) -> None:
        self._units.setdefault(unit, deque(maxlen=self._limit)).append(Entry(at, message))
        self._written[unit] = self._written.get(unit, 0) + 1

    def read(self, unit: str, since: datetime) -> list[str]:
        return [e.message for e in self._units.get(unit, ()) if e.at >= since]

    def read_after(self, unit: str, cursor: str, since: datetime, match: str) -> tuple[list[str], str]:
        """Messages matching `match` (a regular expression, as journalctl --grep takes it) after `cursor`
        (the count of entries written then; "" reads since `since`), and the new cursor."""
        entries = list(self._units.get(unit, ()))
        written = self._written.get(unit, 0)
        if cursor:
            skip = max(0, int(cursor) - (written - len(entries)))
            new = entries[skip:]
        else:
            new = [e for e in entries if e.at >= since]
        wanted = re.compile(match)
        return [e.message for e in new if wanted.search(e.message)], str(written)
