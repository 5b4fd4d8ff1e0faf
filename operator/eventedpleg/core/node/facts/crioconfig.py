"""CRI-O configuration as CRI-O reads it (docs/compatibility.md §2, crio.conf.d(5)).

- /etc/crio/crio.conf first (lowest precedence), then EVERY regular file under /etc/crio/crio.conf.d,
  recursively, in lexical order, with no suffix filter (`UpdateFromPath` -> `filepath.Walk`); the last file
  setting a key wins. A file that does not parse stops crio from starting.
- `enable_pod_events` lives in `[crio.runtime]`, default false; not hot-reloadable.
- The drop-in's directory, file name and key come from the caller's runtime profile (core.runtimes; CRI-O's
  is CRIO_DROPIN): a runtime whose drop-ins are read the same way is one more profile, not more code here.
- `crio status config` prints the running daemon's config (1.28+); `crio config` prints what a fresh start
  would load, with options at their default commented out (`# enable_pod_events = false`).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from eventedpleg.core.runtimes import DropIn

# Editor, package-manager and tool leftovers: CRI-O parses them like any other file.
_BACKUP = re.compile(
    r"(~|\.bak|\.orig|\.old|\.save|\.swp|\.tmp|\.rpmnew|\.rpmsave|\.dpkg-[a-z]+|\.ucf-[a-z]+)$|^\."
)


class CrioConfigError(ValueError):
    """A file CRI-O would refuse to start with."""


def load(text: str, *, where: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CrioConfigError(f"{where}: invalid TOML: {exc}") from exc


def pod_events_in(doc: Mapping[str, Any], setting: tuple[str, ...]) -> bool | None:
    value: Any = doc
    for key in setting:
        value = value.get(key) if isinstance(value, dict) else None
    return value if isinstance(value, bool) else None


def walk_order(relpath: str) -> tuple[str, ...]:
    return PurePosixPath(relpath).parts


def looks_like_backup(relpath: str) -> bool:
    return _BACKUP.search(PurePosixPath(relpath).name) is not None


def running_pod_events(output: str, setting: tuple[str, ...]) -> bool | None:
    """enable_pod_events from `crio status config` / `crio config` output; the default (false) when the
    [crio.runtime] table is there but the key is commented out; None when the output is not a config."""
    *tables, key = setting
    try:
        doc = tomllib.loads(output)
    except tomllib.TOMLDecodeError:
        match = re.search(rf"^\s*{re.escape(key)}\s*=\s*(true|false)\s*$", output, re.MULTILINE)
        return None if match is None else match.group(1) == "true"
    value = pod_events_in(doc, setting)
    if value is not None:
        return value
    table: Any = doc
    for name in tables:
        table = table.get(name) if isinstance(table, dict) else None
    return False if isinstance(table, dict) else None


@dataclass(frozen=True)
class CrioDirReport:
    """What is in crio.conf.d besides our file, from CRI-O's point of view."""

    blocking: tuple[str, ...]  # problems that make applying unsafe or pointless
    warnings: tuple[str, ...]  # worth reporting, not worth refusing

    @property
    def ok(self) -> bool:
        return not self.blocking


def analyze_dropins(
    files: Iterable[tuple[str, str | None]],
    dropin: DropIn,
    *,
    enabling: bool,
    runtime: str,
) -> CrioDirReport:
    """`files`: (path relative to `dropin.directory`, text or None when unreadable); ours is `dropin.name`.
    `runtime`: the runtime's name in messages."""
    ours = dropin.name
    blocking: list[str] = []
    warnings: list[str] = []
    where = dropin.short_dir
    ordered = sorted(files, key=lambda f: walk_order(f[0]))
    for rel, text in ordered:
        if rel == ours:
            continue
        if text is None:
            blocking.append(f"{where}/{rel} is not readable text: {runtime} parses every file there")
            continue
        try:
            doc = load(text, where=f"{where}/{rel}")
        except CrioConfigError as exc:
            blocking.append(f"{exc}: {runtime} would not start after the restart")
            continue
        value = pod_events_in(doc, dropin.setting)
        after_ours = walk_order(rel) > walk_order(ours)
        if enabling and value is False and after_ours:
            blocking.append(
                f"{where}/{rel} sorts after {ours} and sets {dropin.setting[-1]} = false: "
                "it would override ours (last file wins)"
            )
        if looks_like_backup(rel):
            warnings.append(
                f"{where}/{rel} looks like a backup/temp file; {runtime} parses it too (left untouched)"
            )
    return CrioDirReport(tuple(blocking), tuple(warnings))
