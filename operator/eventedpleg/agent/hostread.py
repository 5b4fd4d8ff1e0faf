"""Read a host into `HostFacts` for the pure decision in eventedpleg.core.node.facts.hostplan.

The kubelet is kubelet.service's main process (Host.kubelet_process); its --config/--config-dir come from
that process's command line and the unit's files, and the only binary run for `--version`/`--help` is the
one that process runs (/proc/<pid>/exe), or, while it is stopped, the unit's ExecStart (root's files).
"""

from __future__ import annotations

import logging
import re
import stat
from dataclasses import replace
from pathlib import PurePosixPath

from eventedpleg.agent.hostfiles import HostFiles
from eventedpleg.core import runtimes
from eventedpleg.core.node.blocks.host import Host
from eventedpleg.core.node.blocks.nodeapi import AgentNode
from eventedpleg.core.node.facts import embedded, hostplan, platform
from eventedpleg.core.node.facts.kubeletflags import (
    UNIT_DROPIN_DIRS,
    UNIT_FILES,
    UnitSettings,
    expand_exec,
    parse_flags,
    parse_units,
    unit_environment,
)
from eventedpleg.core.versions import (
    RuntimeVersion,
    Version,
    VersionError,
    parse_runtime,
    parse_version,
)

log = logging.getLogger(__name__)
_VERSION_LINE = re.compile(r"Kubernetes\s+(v?\d+\.\d+\.\d+\S*)")


def read_unit(files: HostFiles) -> tuple[UnitSettings | None, dict[str, str]]:
    """kubelet.service as systemd resolves it: the highest-precedence unit file, then drop-ins by name
    (a drop-in in /etc replaces one of the same name in /usr/lib); plus the env files it references."""
    main: str | None = None
    for path in UNIT_FILES:  # lowest precedence first; the last existing one wins
        text = files.read_text(path)
        if text is not None:
            main = text
    dropins: dict[str, str] = {}
    for directory in UNIT_DROPIN_DIRS:  # /usr/lib, /lib, /etc, /run: later ones override by name
        for rel, text in _listed(files, directory):
            if rel.endswith(".conf") and "/" not in rel and text is not None:
                dropins[rel] = text
    if main is None and not dropins:
        return None, {}
    texts = ([main] if main else []) + [dropins[name] for name in sorted(dropins)]
    unit = parse_units(texts)
    env_files: dict[str, str] = {}
    for ref in unit.environment_files:
        text = files.read_text(ref.path)
        if text is not None:
            env_files[ref.path] = text
    return unit, env_files


def _listed(files: HostFiles, host_dir: str) -> tuple[tuple[str, str | None], ...]:
    listing = files.list_files(host_dir)
    for rel, why in listing.skipped:
        log.info("not reading %s/%s: %s", host_dir.rstrip("/"), rel, why)
    return listing.files


def kubelet_version(host: Host, exe: str | None, node: AgentNode) -> Version | None:
    """`kubelet --version` on the host (what will run after a restart), else the Node's kubeletVersion."""
    match = None
    if exe is not None:
        result = host.run([exe, "--version"], timeout=30)
        match = _VERSION_LINE.search(result.stdout) if result.ok else None
    for text in ([match.group(1)] if match else []) + [node.kubelet_version]:
        try:
            return parse_version(text)
        except VersionError:
            continue
    return None


def runtime_of(node: AgentNode, argv: tuple[str, ...] | None) -> RuntimeVersion | None:
    try:
        return parse_runtime(node.runtime_version)
    except VersionError:
        pass
    endpoint = next((a for a in argv or () if "container-runtime-endpoint" in a), "")
    found = next(
        (p for p in runtimes.PROFILES.values() if p.endpoint_marker and p.endpoint_marker in endpoint), None
    )
    return None if found is None else RuntimeVersion(found.kind, None, f"{found.kind.value}://unknown")


def read_facts(host: Host, files: HostFiles, node: AgentNode, *, enabling: bool) -> hostplan.HostFacts:
    proc = host.kubelet_process()
    unit, env_files = read_unit(files)
    unit_argv = None
    if unit is not None and unit.exec_start:
        unit_argv = expand_exec(unit.exec_start, unit_environment(unit, env_files))
    running_argv = proc.argv if proc else None
    argv = unit_argv or running_argv
    flags = parse_flags(argv) if argv else None
    # The binary systemd runs as the kubelet; while it is stopped, the unit's ExecStart (what starts next).
    exe = (proc.exe if proc else None) or (unit_argv[0] if unit_argv else None)
    version = kubelet_version(host, exe, node)
    runtime = runtime_of(node, argv)
    config_text = files.read_text(flags.config) if flags and flags.config else None
    dropins: tuple[tuple[str, str], ...] = ()
    if flags and flags.config_dir:
        # A *.conf that is not text is still read by the kubelet (and refused): keep it, as empty text.
        dropins = tuple((rel, text or "") for rel, text in _listed(files, flags.config_dir))
    idle: tuple[str, ...] = ()
    if flags is not None and not flags.config_dir:
        idle = tuple(rel for rel, _ in _listed(files, hostplan.RECOMMENDED_CONFIG_DIR))
    profile = runtimes.profile_of(runtime)
    runtime_dropins = _listed(files, profile.dropin.directory) if profile and profile.dropin else ()
    facts = hostplan.HostFacts(
        kubelet_version=version,
        runtime=runtime,
        running_argv=running_argv,
        running_env=dict(proc.environ) if proc else {},
        unit=unit,
        unit_argv=unit_argv,
        env_files=env_files,
        config_text=config_text,
        kubelet_dropins=dropins,
        runtime_dropins=runtime_dropins,
        embedded=embedded.recognise(m for m in embedded.MARKS if files.kind(m) is not None),
        platform=platform.recognise(
            files.read_text(platform.OS_RELEASE), (m for m in platform.MARKS if files.kind(m) is not None)
        ),
        unit_dropin=files.read_text(hostplan.UNIT_DROPIN),
        missing_dirs=frozenset(d for d in hostplan.CREATED_DIRS if files.kind(d) != stat.S_IFDIR),
        idle_config_dir_files=idle,
    )
    if flags is not None:
        manifests_dir = hostplan.static_pod_dir(facts, flags)
        if manifests_dir:
            manifests = tuple(
                rel for rel, _ in _listed(files, manifests_dir) if not PurePosixPath(rel).name.startswith(".")
            )
            facts = replace(facts, static_pod_manifests=manifests)
    if enabling and exe is not None:
        result = host.run([exe, "--help"], timeout=30)
        # Go's pflag prints help and exits 0 for --help; some builds print to stderr.
        text = (result.stdout + result.stderr) if result.returncode in (0, 2) else None
        facts = replace(facts, kubelet_help=text or None)
    return facts
