"""Maintenance windows (the kured/system-upgrade-controller `window`: days, start, end, time zone), pure.

Only the start of new nodes is gated; a node already in progress always finishes, so a window never
leaves a node cordoned.
"""

from __future__ import annotations

from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

from eventedpleg.models.nodeconfig import Rollout, Window

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


def _hhmm(text: str) -> time:
    hours, minutes = text.split(":")
    return time(int(hours), int(minutes))


def is_open(window: Window, now: datetime) -> bool:
    """True when `now` (timezone-aware) is inside the window; a window with no start/end is always open.

    An `end` earlier than `start` wraps past midnight, and the day that counts is the day it opened.
    """
    if not window.enabled:
        return True
    local = now.astimezone(ZoneInfo(window.time_zone))
    start, end = _hhmm(window.start), _hhmm(window.end)
    days = {day.value for day in window.days} or set(WEEKDAYS)
    today = WEEKDAYS[local.weekday()]
    yesterday = WEEKDAYS[(local - timedelta(days=1)).weekday()]
    clock = local.time().replace(second=0, microsecond=0)
    if start <= end:
        return today in days and start <= clock < end
    # Wraps midnight: the evening part belongs to today, the morning part to yesterday's window.
    return (today in days and clock >= start) or (yesterday in days and clock < end)


def windows_of(rollout: Rollout) -> tuple[Window, ...]:
    """The windows in force: rollout.windows, or the single rollout.window (the model allows one form)."""
    return tuple(rollout.windows) or (rollout.window,)


def any_open(rollout: Rollout, now: datetime) -> bool:
    """True while one of the rollout's windows is open (always, with none set)."""
    return any(is_open(w, now) for w in windows_of(rollout))


def describe_all(rollout: Rollout) -> str:
    return "; ".join(describe(w) for w in windows_of(rollout))


def describe(window: Window) -> str:
    if not window.enabled:
        return "always"
    days = ",".join(d.value for d in window.days) if window.days else "every day"
    return f"{days} {window.start}-{window.end} {window.time_zone}"
