"""Read how the kubelet is started: /proc/<pid>/cmdline, systemd unit files and the env files kubeadm uses.

docs/compatibility.md §3: kubeadm's unit drop-in `10-kubeadm.conf` (in
/etc/systemd/system/kubelet.service.d/ per the docs, /usr/lib/systemd/system/kubelet.service.d/ in
pkgs.k8s.io packages, kubernetes/release#3392) runs
`ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS
$KUBELET_EXTRA_ARGS`
with KUBELET_KUBEADM_ARGS from /var/lib/kubelet/kubeadm-flags.env and KUBELET_EXTRA_ARGS from
/etc/default/kubelet (DEB) or /etc/sysconfig/kubelet (RPM). The running command line is the truth for the
kubelet now; the unit is the truth for the kubelet we are about to restart, so the agent checks both.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

UNIT_FILES: tuple[str, ...] = (
    "/usr/lib/systemd/system/kubelet.service",
    "/lib/systemd/system/kubelet.service",
    "/etc/systemd/system/kubelet.service",
)
UNIT_DROPIN_DIRS: tuple[str, ...] = (
    "/usr/lib/systemd/system/kubelet.service.d",
    "/lib/systemd/system/kubelet.service.d",
    "/etc/systemd/system/kubelet.service.d",
    "/run/systemd/system/kubelet.service.d",
)
# Set by Environment= in 10-kubeadm.conf to `--config=/var/lib/kubelet/config.yaml` (kubernetes/release
# cmd/krel/templates/latest/kubeadm/10-kubeadm.conf); kubeadm never writes it.
KUBEADM_CONFIG_ARGS = "KUBELET_CONFIG_ARGS"
EXTRA_ARGS_ENV_FILES: tuple[str, ...] = ("/etc/default/kubelet", "/etc/sysconfig/kubelet")
# 1.28-1.29 only accept --config-dir when this variable is in the kubelet's environment (KEP-3983,
# docs/compatibility.md §3).
DROPIN_ALPHA_ENV = "KUBELET_CONFIG_DROPIN_DIR_ALPHA"

_VAR = re.compile(r"\$\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)\}|\$(?P<plain>[A-Za-z_][A-Za-z0-9_]*)")
_VALUE_FLAGS = frozenset({"config", "config-dir", "feature-gates", "pod-manifest-path", "v"})


def parse_cmdline(raw: bytes) -> tuple[str, ...]:
    """/proc/<pid>/cmdline: arguments separated (and terminated) by NUL bytes."""
    return tuple(part.decode(errors="replace") for part in raw.split(b"\0") if part)


def parse_environ(raw: bytes) -> dict[str, str]:
    """/proc/<pid>/environ: NUL-separated KEY=value pairs."""
    env: dict[str, str] = {}
    for part in raw.split(b"\0"):
        key, sep, value = part.decode(errors="replace").partition("=")
        if sep and key:
            env[key] = value
    return env


def parse_env_file(text: str) -> dict[str, str]:
    """systemd EnvironmentFile=: `KEY=value` lines, optional quotes, `#`/`;` comments."""
    env: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        line = line.removeprefix("export ").strip()
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        env[key.strip()] = value
    return env


@dataclass(frozen=True)
class EnvironmentFile:
    path: str
    optional: bool  # `EnvironmentFile=-/path`: a missing file is not an error


@dataclass(frozen=True)
class UnitSettings:
    """The [Service] settings of kubelet.service after its drop-ins, in systemd's order."""

    environment: Mapping[str, str] = field(default_factory=dict)
    environment_files: tuple[EnvironmentFile, ...] = ()
    exec_start: tuple[str, ...] = ()  # the last ExecStart= (kubeadm resets it with an empty ExecStart=)


def parse_units(texts: Iterable[str]) -> UnitSettings:
    """Fold kubelet.service and its drop-ins (pass them in systemd's order: unit first, drop-ins by name)."""
    environment: dict[str, str] = {}
    env_files: list[EnvironmentFile] = []
    exec_start: tuple[str, ...] = ()
    for text in texts:
        section = ""
        for raw in _join_continuations(text):
            line = raw.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("[") and line.endswith("]"):
                section = line[1:-1]
                continue
            if section != "Service":
                continue
            key, _, value = line.partition("=")
            key, value = key.strip(), value.strip()
            if key == "Environment":
                for word in _split(value):
                    name, sep, val = word.partition("=")
                    if sep:
                        environment[name] = val
            elif key == "EnvironmentFile":
                if not value:
                    env_files.clear()
                else:
                    optional = value.startswith("-")
                    env_files.append(EnvironmentFile(value.removeprefix("-"), optional))
            elif key == "ExecStart":
                exec_start = tuple(_split(value.lstrip("@-:+!"))) if value else ()
    return UnitSettings(environment, tuple(env_files), exec_start)


def _join_continuations(text: str) -> list[str]:
    out: list[str] = []
    buf = ""
    for line in text.splitlines():
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        out.append(buf + line)
        buf = ""
    if buf:
        out.append(buf)
    return out


def _split(value: str) -> list[str]:
    try:
        return shlex.split(value, posix=True)
    except ValueError:
        return value.split()


def unit_environment(unit: UnitSettings, env_files: Mapping[str, str]) -> dict[str, str]:
    """Environment= then EnvironmentFile= contents (files override, as in systemd.exec(5))."""
    env = dict(unit.environment)
    for ref in unit.environment_files:
        if ref.path in env_files:
            env.update(parse_env_file(env_files[ref.path]))
    return env


def expand_exec(exec_start: Sequence[str], env: Mapping[str, str]) -> tuple[str, ...]:
    """systemd expansion: a bare `$VAR` word splits on whitespace, `${VAR}` stays one word."""
    argv: list[str] = []
    for word in exec_start:
        whole = _VAR.fullmatch(word)
        if whole and whole["plain"]:
            argv.extend(env.get(whole["plain"], "").split())
            continue
        argv.append(_VAR.sub(lambda m: env.get(m["braced"] or m["plain"], ""), word))
    return tuple(argv)


@dataclass(frozen=True)
class FeatureGateFlag:
    """One `--feature-gates` occurrence and where it came from (for the fix message)."""

    gates: Mapping[str, bool]
    text: str


@dataclass(frozen=True)
class KubeletFlags:
    config: str | None = None
    config_dir: str | None = None
    pod_manifest_path: str | None = None
    verbosity: int | None = None
    feature_gates: tuple[FeatureGateFlag, ...] = ()

    @property
    def gates(self) -> dict[str, bool]:
        """All --feature-gates occurrences merged (pflag's mapStringBool keeps adding keys)."""
        merged: dict[str, bool] = {}
        for flag in self.feature_gates:
            merged.update(flag.gates)
        return merged


def parse_gate_list(text: str) -> dict[str, bool]:
    """`EventedPLEG=true,AllAlpha=false` -> dict; values other than true/false are kept out."""
    gates: dict[str, bool] = {}
    for item in text.split(","):
        name, sep, value = item.strip().partition("=")
        if sep and name and value.strip().lower() in ("true", "false"):
            gates[name.strip()] = value.strip().lower() == "true"
    return gates


def parse_flags(argv: Sequence[str]) -> KubeletFlags:
    """--config, --config-dir, --feature-gates (repeatable), --pod-manifest-path and --v from a kubelet argv.

    pflag accepts `--name=value` and `--name value`, and underscores in names.
    """
    values: dict[str, str] = {}
    gates: list[FeatureGateFlag] = []
    args = list(argv[1:])
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if not arg.startswith("-") or arg in ("-", "--"):
            continue
        name, sep, value = arg.lstrip("-").partition("=")
        name = name.replace("_", "-")
        if name not in _VALUE_FLAGS:
            continue
        if not sep:
            if i >= len(args):
                continue
            value = args[i]
            i += 1
        if name == "feature-gates":
            gates.append(FeatureGateFlag(parse_gate_list(value), f"--feature-gates={value}"))
        else:
            values[name] = value
    verbosity: int | None = None
    if "v" in values:
        try:
            verbosity = int(values["v"])
        except ValueError:
            verbosity = None
    return KubeletFlags(
        config=values.get("config") or None,
        config_dir=values.get("config-dir") or None,
        pod_manifest_path=values.get("pod-manifest-path") or None,
        verbosity=verbosity,
        feature_gates=tuple(gates),
    )


def env_var_holding(env_files: Mapping[str, str], unit: UnitSettings, needle: str) -> str | None:
    """Which file/variable holds `needle`, for a precise fix: "/etc/default/kubelet (KUBELET_EXTRA_ARGS)"."""
    for ref in unit.environment_files:
        text = env_files.get(ref.path)
        if text is None:
            continue
        for key, value in parse_env_file(text).items():
            if needle in value:
                return f"{ref.path} ({key})"
    for key, value in unit.environment.items():
        if needle in value:
            return f"the kubelet unit's Environment= ({key})"
    if any(needle in word for word in unit.exec_start):
        return "the kubelet unit's ExecStart="
    return None


def gate_listed_in_help(help_text: str, gate: str) -> bool:
    """`kubelet --help` lists known gates as `EventedPLEG=true|false (ALPHA - default=false)` (feature_gate.go
    format "%s=true|false (%s - default=%t)", docs/compatibility.md §1)."""
    return re.search(rf"(^|\s){re.escape(gate)}=true\|false \(", help_text, re.MULTILINE) is not None
