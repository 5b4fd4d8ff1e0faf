"""How systemd turns kubelet.service and its drop-ins into the kubelet's command line and environment.

The simulated host re-reads the unit files only on `systemctl daemon-reload`, as systemd does: a restart
alone keeps the definition loaded before. The rules (systemd.unit(5), systemd.service(5), systemd.exec(5)):
- the unit file: the first of /etc/systemd/system, /run/systemd/system, /usr/lib/systemd/system,
  /lib/systemd/system that has it;
- drop-ins `kubelet.service.d/*.conf` from all of those directories, applied in file-name order; a file in
  a higher-priority directory hides one of the same name in a lower one;
- `Environment=` assignments accumulate (a later one wins); `EnvironmentFile=` files are read at start and
  override `Environment=`; `-` before the path makes a missing file fine; an empty `ExecStart=` clears it;
- in `ExecStart=`, `$VAR` alone as a word splits into words on whitespace, `${VAR}` stays one word.

Independent of eventedpleg.core on purpose: the simulator is the reference the agent is tested against.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

# Highest priority first.
UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True)
class Loaded:
    argv: tuple[str, ...]
    environment: dict[str, str]


def _read(root: Path, host_path: str) -> str | None:
    path = root / host_path.lstrip("/")
    return path.read_text() if path.is_file() else None


def _lines(text: str) -> list[str]:
    return text.replace("\\\n", " ").splitlines()


def _env_file(text: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;" or "=" not in line:
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        env[key.strip()] = value
    return env


def load(root: Path, unit: str) -> Loaded | None:
    """The unit as `systemctl daemon-reload` would load it, or None when there is no such unit."""
    main = next((t for d in UNIT_DIRS if (t := _read(root, f"{d}/{unit}.service")) is not None), None)
    dropins: dict[str, str] = {}
    for directory in reversed(UNIT_DIRS):  # lowest priority first: higher ones replace by name
        base = root / directory.lstrip("/") / f"{unit}.service.d"
        if base.is_dir():
            for entry in base.iterdir():
                if entry.is_file() and entry.name.endswith(".conf"):
                    dropins[entry.name] = entry.read_text()
    if main is None:
        return None
    environment: dict[str, str] = {}
    env_files: list[tuple[str, bool]] = []
    exec_start: list[str] = []
    for text in [main] + [dropins[name] for name in sorted(dropins)]:
        section = ""
        for raw in _lines(text):
            line = raw.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("["):
                section = line.strip("[]")
                continue
            if section != "Service" or "=" not in line:
                continue
            key, _, value = (part.strip() for part in line.partition("="))
            if key == "Environment":
                for word in shlex.split(value):
                    name, _, val = word.partition("=")
                    environment[name] = val
            elif key == "EnvironmentFile":
                env_files.append((value.removeprefix("-"), value.startswith("-")))
            elif key == "ExecStart":
                exec_start = shlex.split(value) if value else []
    for env_path, _optional in env_files:
        env_text = _read(root, env_path)
        if env_text is not None:
            environment.update(_env_file(env_text))
    argv: list[str] = []
    for word in exec_start:
        alone = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if alone:
            argv.extend(environment.get(alone.group(1), "").split())
        else:
            argv.append(_VAR.sub(lambda m: environment.get(m.group(1) or m.group(2), ""), word))
    return Loaded(tuple(argv), environment)
