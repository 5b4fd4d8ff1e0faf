"""Decide what to change on one host, or refuse with the reason and the exact fix. Pure.

The agent reads the host (kubelet command line and unit, config files, drop-in directories, `kubelet --help`)
into `HostFacts`; `plan_host` returns an `ApplyPlan` (files to write or remove, whether the runtime must
restart, what verification must then see) or a `Refusal`. Every refusal happens before anything is touched.
§N and guardrail N refer to docs/compatibility.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from eventedpleg import constants as c
from eventedpleg.core import runtimes
from eventedpleg.core.node.facts import crioconfig, kubeletconfig
from eventedpleg.core.node.facts.embedded import Embedded
from eventedpleg.core.node.facts.kubeletflags import (
    DROPIN_ALPHA_ENV,
    EXTRA_ARGS_ENV_FILES,
    KUBEADM_CONFIG_ARGS,
    KubeletFlags,
    UnitSettings,
    env_var_holding,
    expand_exec,
    gate_listed_in_help,
    parse_env_file,
    parse_flags,
    unit_environment,
)
from eventedpleg.core.node.facts.platform import Platform
from eventedpleg.core.node.facts.verify import Expectation
from eventedpleg.core.render import RenderedConfig
from eventedpleg.core.versions import RuntimeVersion, Version
from eventedpleg.models.nodeconfig import KubeletConfigMode

# First line of every file we render (templates/*.j2): how we recognise our own files without our state.
MANAGED_MARKER = "Managed by evented-pleg-operator"
RECOMMENDED_CONFIG_DIR = "/etc/kubernetes/kubelet.conf.d"
# Our systemd drop-in for kubelet.service on a kubeadm node without --config-dir (docs/compatibility.md §3):
# /etc is the administrator's place for drop-ins; it sorts after kubeadm's 10-kubeadm.conf.
UNIT_DROPIN_DIR = "/etc/systemd/system/kubelet.service.d"
UNIT_DROPIN = f"{UNIT_DROPIN_DIR}/{c.KUBELET_DROPIN_NAME}"
# The directories the agent may create for it, parents first (and removes again, if it created them).
CREATED_DIRS: tuple[str, ...] = (UNIT_DROPIN_DIR, RECOMMENDED_CONFIG_DIR)


@dataclass(frozen=True)
class ConfigEdit:
    """kubeletConfig: EditConfigFile — what featureGates.EventedPLEG was in --config before we set it."""

    path: str
    previous: bool | None
    written_sha: str = ""  # sha256 of the file as we wrote it: unchanged since -> restore the original bytes


@dataclass(frozen=True)
class ManagedState:
    """What the agent applied and verified last (kept in AGENT_STATE_DIR on the host)."""

    hash: str = ""
    enabled: bool = False
    files: Mapping[str, str] = field(default_factory=dict)  # host path -> sha256 of what we wrote
    config_edit: ConfigEdit | None = None
    created_dirs: tuple[str, ...] = ()  # directories that did not exist before we wrote into them


@dataclass(frozen=True)
class HostFacts:
    """Everything `plan_host` needs, read from the host by the agent (paths are host paths)."""

    kubelet_version: Version | None
    runtime: RuntimeVersion | None
    running_argv: tuple[str, ...] | None  # /proc/<pid>/cmdline of the running kubelet
    running_env: Mapping[str, str] = field(default_factory=dict)
    unit: UnitSettings | None = None  # kubelet.service + drop-ins
    unit_argv: tuple[str, ...] | None = None  # ExecStart expanded with the unit's environment
    env_files: Mapping[str, str] = field(default_factory=dict)  # EnvironmentFile path -> text
    config_text: str | None = None  # the --config file
    kubelet_dropins: tuple[tuple[str, str], ...] = ()  # files in --config-dir, relative paths
    # Files in the runtime profile's drop-in directory (CRI-O: crio.conf.d), relative paths; () without one.
    runtime_dropins: tuple[tuple[str, str | None], ...] = ()
    static_pod_manifests: tuple[str, ...] = ()  # files in staticPodPath / --pod-manifest-path
    kubelet_help: str | None = None  # `kubelet --help`
    config_baseline: str | None = None  # --config exactly as it was before our first edit (agent state)
    embedded: Embedded | None = None  # k3s or RKE2 found on the host (core.node.facts.embedded)
    platform: Platform | None = None  # a platform that builds the kubelet's settings (facts.platform)
    unit_dropin: str | None = None  # UNIT_DROPIN's text, when it exists
    missing_dirs: frozenset[str] = frozenset()  # those of CREATED_DIRS that do not exist
    # Files in RECOMMENDED_CONFIG_DIR while the kubelet runs without --config-dir (it ignores them now).
    idle_config_dir_files: tuple[str, ...] = ()


@dataclass(frozen=True)
class FileChange:
    path: str  # host path
    content: str | None  # None: remove
    purpose: str


@dataclass(frozen=True)
class ApplyPlan:
    changes: tuple[FileChange, ...]
    restart_runtime: bool
    runtime_unit: str
    expect: Expectation
    config_edit: ConfigEdit | None = None
    warnings: tuple[str, ...] = ()
    summary: str = ""
    # EventedPLEG as the files on the host say before any change: what a rollback must come back to (the
    # running kubelet may differ, e.g. after our drop-in was removed by hand and not yet restarted).
    gate_before: bool | None = None
    reload_units: bool = False  # a kubelet.service drop-in changes: `systemctl daemon-reload` first
    created_dirs: tuple[str, ...] = ()  # ours (recorded, so that turning it off removes them again)
    remove_dirs: tuple[str, ...] = ()  # directories to remove after the changes, each only if empty


@dataclass(frozen=True)
class Refusal:
    """The node cannot be changed safely as it is configured; nothing was touched."""

    reason: str
    fix: str

    @property
    def message(self) -> str:
        return f"Unsupported: {self.reason}. Fix: {self.fix}"


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def effective_flags(facts: HostFacts) -> KubeletFlags | None:
    """The flags the kubelet will have after our restart: the unit's when we can read it, else the running."""
    argv = facts.unit_argv or facts.running_argv
    return parse_flags(argv) if argv else None


def static_pod_dir(facts: HostFacts, flags: KubeletFlags) -> str | None:
    if flags.pod_manifest_path:
        return flags.pod_manifest_path
    config = (flags.config, facts.config_text) if flags.config and facts.config_text is not None else None
    try:
        doc = kubeletconfig.merged(config, facts.kubelet_dropins)
    except kubeletconfig.KubeletConfigError:
        return None
    value = doc.get("staticPodPath")
    return str(value) if value else None


def _is_ours(text: str | None, path: str, managed: ManagedState) -> bool:
    return text is None or path in managed.files or MANAGED_MARKER in text.split("\n", 1)[0]


def _cli_gates(facts: HostFacts) -> tuple[dict[str, bool], list[str]]:
    gates: dict[str, bool] = {}
    texts: list[str] = []
    for argv in (facts.running_argv, facts.unit_argv):
        if not argv:
            continue
        for flag in parse_flags(argv).feature_gates:
            relevant = {k: v for k, v in flag.gates.items() if k in (c.FEATURE_GATE, kubeletconfig.ALL_ALPHA)}
            if relevant:
                gates.update(relevant)
                if flag.text not in texts:
                    texts.append(flag.text)
    return gates, texts


def _where_is(facts: HostFacts, needle: str) -> str:
    if facts.unit is not None:
        where = env_var_holding(facts.env_files, facts.unit, needle)
        if where:
            return where
    return "the kubelet's command line"


# The variables an administrator's environment file passes to the kubelet, as ExecStart names them: kubeadm's
# KUBELET_EXTRA_ARGS, AKS's KUBELET_FLAGS (Azure/AgentBaker kubelet.service), KUBELET_ARGS, KUBELET_OPTS.
EXTRA_ARGS_VARS = ("KUBELET_EXTRA_ARGS", "KUBELET_FLAGS", "KUBELET_ARGS", "KUBELET_OPTS")


def _extra_args_target(facts: HostFacts) -> str:
    """Where to add a kubelet flag: `KUBELET_FLAGS in /etc/default/kubelet`, as this unit expands it."""
    unit = facts.unit
    if unit is not None:
        words = " ".join(unit.exec_start)
        for ref in unit.environment_files:
            if ref.path not in EXTRA_ARGS_ENV_FILES:
                continue
            defined = parse_env_file(facts.env_files.get(ref.path, ""))
            for var in EXTRA_ARGS_VARS:
                expanded = f"${var}" in words or f"${{{var}}}" in words
                if expanded and (var in defined or var == EXTRA_ARGS_VARS[0]):
                    return f"{var} in {ref.path}"
            return f"KUBELET_EXTRA_ARGS in {ref.path}"
    return "KUBELET_EXTRA_ARGS in /etc/default/kubelet (DEB) or /etc/sysconfig/kubelet (RPM)"


def _config_dir_usable(facts: HostFacts, flags: KubeletFlags) -> tuple[str | None, str]:
    if not flags.config_dir:
        return None, "the kubelet is started without --config-dir"
    version = facts.kubelet_version
    if version is not None and version.minor_pair < (1, 28):
        return None, f"kubelet {version} has no --config-dir (KEP-3983 arrived in 1.28)"
    if version is not None and version.minor_pair < (1, 30):
        env = dict(facts.unit.environment) if facts.unit is not None else {}
        if DROPIN_ALPHA_ENV not in facts.running_env and DROPIN_ALPHA_ENV not in env:
            return (
                None,
                f"kubelet {version} ignores --config-dir without {DROPIN_ALPHA_ENV} in its environment",
            )
    return flags.config_dir, ""


def _no_dropin_fix(facts: HostFacts, flags: KubeletFlags) -> str:
    version = facts.kubelet_version
    parts = []
    if version is None or version.minor_pair >= (1, 28):
        env_note = (
            f" and {DROPIN_ALPHA_ENV}=1 in the kubelet's environment"
            if version is not None and version.minor_pair < (1, 30)
            else ""
        )
        if facts.platform is not None and facts.platform.fix:  # the platform's bootstrap gives --config-dir
            parts.append(facts.platform.fix)
        else:
            parts.append(
                f"add --config-dir={RECOMMENDED_CONFIG_DIR} to {_extra_args_target(facts)}{env_note}, create "
                "that directory and restart the kubelet"
            )
    target = flags.config or "the kubelet's --config file"
    parts.append(
        f"or set spec.kubeletConfig: EditConfigFile to let the agent edit {target} (backed up, restored)"
    )
    return ", ".join(parts) if len(parts) > 1 else parts[0].removeprefix("or ")


def _refuse_embedded(found: Embedded) -> Refusal:
    """k3s and RKE2 start the kubelet themselves: no kubelet.service, flags rebuilt on every start."""
    name = found.distribution.name
    return Refusal(
        f"{name}: the kubelet is embedded in {name} ({', '.join(found.found)}); there is no kubelet.service "
        f"to configure or restart, and {name} sets the kubelet's flags itself on every start, so the "
        "operator does not manage this node (docs/compatibility.md §3)",
        found.distribution.fix(),
    )


def _refuse_platform(platform: Platform) -> Refusal:
    """A platform that builds the kubelet's settings itself: what the agent wrote would not last."""
    return Refusal(
        f"{platform.name}: {platform.owns_kubelet}; the operator does not manage this node "
        "(docs/platforms.md)",
        platform.fix,
    )


def _refuse_command_line(facts: HostFacts, enabling: bool) -> Refusal | None:
    """Command-line gates override every file (kubeletConfigFlagPrecedence, k8s#119390; guardrails 6, 9)."""
    cli_gates, cli_texts = _cli_gates(facts)
    turns_on = kubeletconfig.effective_gate(
        kubeletconfig.GateSource("--feature-gates", k, v) for k, v in cli_gates.items()
    )
    if cli_gates and (enabling or turns_on):
        names = " and ".join(sorted(cli_gates))
        return Refusal(
            f"the kubelet command line sets {' '.join(cli_texts)}; command-line feature gates override "
            "the config file and every drop-in (k8s#119390; docs/compatibility.md §3), so the operator "
            "cannot manage EventedPLEG on this node",
            f"remove {names} from {_where_is(facts, cli_texts[0].split('=', 1)[1])} and restart the kubelet",
        )
    if facts.running_argv and facts.unit_argv:
        running, unit = parse_flags(facts.running_argv), parse_flags(facts.unit_argv)
        if (running.config, running.config_dir) != (unit.config, unit.config_dir):
            return Refusal(
                f"the running kubelet (--config={running.config}, --config-dir={running.config_dir}) differs "
                f"from its unit (--config={unit.config}, --config-dir={unit.config_dir})",
                "restart the kubelet once so that it runs what its unit says, then retry",
            )
    return None


def _refuse_enabling(
    facts: HostFacts, rendered: RenderedConfig, flags: KubeletFlags, *, allow_static_pods: bool
) -> Refusal | None:
    """Never write a gate the kubelet does not know: it exits with `unrecognized feature gate` (§1).

    Guardrails 1-3: gate known (version and `kubelet --help`), a runtime with events, no static pods."""
    version = facts.kubelet_version
    if version is not None and version.minor_pair < (1, 26):
        return Refusal(
            f"kubelet {version} does not know the {c.FEATURE_GATE} gate (added in 1.26, k8s#111384); writing "
            "it would stop the kubelet with 'unrecognized feature gate: EventedPLEG'",
            "upgrade the kubelet (1.32 or later recommended) or exclude this node",
        )
    if facts.kubelet_help is None:
        return Refusal(
            "could not run `kubelet --help` to check that the kubelet knows the EventedPLEG gate",
            "make the kubelet binary runnable on the host",
        )
    if not gate_listed_in_help(facts.kubelet_help, c.FEATURE_GATE):
        return Refusal(
            f"`kubelet --help` does not list {c.FEATURE_GATE}=true|false; writing the gate would stop the "
            "kubelet with 'unrecognized feature gate: EventedPLEG' (docs/compatibility.md §1)",
            "use a kubelet that still has the gate (1.26-1.37) or exclude this node",
        )
    profile = runtimes.profile_of(facts.runtime)
    if profile is None:
        raw = facts.runtime.raw if facts.runtime else "unknown"
        return Refusal(
            f"container runtime {raw!r}: only {runtimes.names()} implement GetContainerEvents",
            "use containerd >= 2.0.9 or CRI-O >= 1.35",
        )
    if profile.dropin is not None and rendered.file(profile.dropin.configmap_key) is None:
        return Refusal(
            f"the rendered config has no {profile.dropin.purpose} for a {profile.name} node",
            "re-render the NodeConfig",
        )
    if facts.static_pod_manifests and not allow_static_pods:  # k8s#121349, #123087; guardrail 2
        shown = ", ".join(facts.static_pod_manifests[:3])
        return Refusal(
            f"the node runs static pods ({static_pod_dir(facts, flags)}: {shown}); Evented PLEG starts "
            "duplicate containers for static pods (k8s#121349, #123087)",
            "set spec.includeControlPlane: true to opt in, or label the node eventedpleg.io/skip=true",
        )
    return None


@dataclass(frozen=True)
class _Side:
    """The changes for one side (kubelet or runtime)."""

    changes: tuple[FileChange, ...] = ()
    warnings: tuple[str, ...] = ()
    config_edit: ConfigEdit | None = None
    created_dirs: tuple[str, ...] = ()
    remove_dirs: tuple[str, ...] = ()


def _config_pair(facts: HostFacts, flags: KubeletFlags) -> tuple[str, str] | None:
    return (flags.config, facts.config_text) if flags.config and facts.config_text is not None else None


def _kubelet_enable(
    facts: HostFacts, rendered: RenderedConfig, managed: ManagedState, flags: KubeletFlags
) -> _Side | Refusal:
    """Our `*.conf` drop-in sorting last in --config-dir, or (opt-in) an edit of --config (§3)."""
    kubelet_text = rendered.file(c.CM_KEY_KUBELET)
    if kubelet_text is None:
        return Refusal("the rendered config has no kubelet drop-in", "re-render the NodeConfig")
    config_dir, no_dir_reason = _config_dir_usable(facts, flags)
    if config_dir:
        return _dropin_enable(facts, managed, config_dir, kubelet_text)
    if rendered.kubelet_config_mode != KubeletConfigMode.EDIT_CONFIG_FILE.value:
        via_unit = _unit_dropin_enable(facts, managed, flags, kubelet_text)
        if via_unit is not None:
            return via_unit
        return Refusal(
            f"{no_dir_reason}, and kubeletConfig is DropInOnly: the agent does not edit the main kubelet "
            "config",
            _no_dropin_fix(facts, flags),
        )
    if not flags.config or facts.config_text is None:
        return Refusal(
            f"{no_dir_reason} and without a readable --config file there is nothing to edit",
            f"start the kubelet with --config-dir={RECOMMENDED_CONFIG_DIR}",
        )
    return _config_file_edit(managed, flags.config, facts.config_text)


def _dropin_enable(
    facts: HostFacts, managed: ManagedState, config_dir: str, kubelet_text: str
) -> _Side | Refusal:
    """Our drop-in in --config-dir, unless a file there is in its way or would override it."""
    ours = c.KUBELET_DROPIN_NAME
    target = str(PurePosixPath(config_dir) / ours)
    if not _is_ours(dict(facts.kubelet_dropins).get(ours), target, managed):
        return Refusal(
            f"{target} exists and was not written by the operator; it is left untouched",
            f"move or rename {target} (the operator's drop-in must be named {ours})",
        )
    for rel, text in kubeletconfig.ordered_dropins(facts.kubelet_dropins):
        if rel == ours:
            continue
        try:
            kubeletconfig.load_dropin(text, where=str(PurePosixPath(config_dir) / rel))
        except kubeletconfig.KubeletConfigError as exc:
            return Refusal(f"{exc}: the kubelet would not start after the restart", "fix or remove that file")
    later = [
        s
        for s in kubeletconfig.gate_sources(None, facts.kubelet_dropins, {}, skip=ours)
        if kubeletconfig.dropin_sort_key(s.where) > kubeletconfig.dropin_sort_key(ours)
        and s.gate == c.FEATURE_GATE
        and s.value is False
    ]
    if later:
        where = f"{config_dir}/{later[0].where}"
        return Refusal(
            f"{where} sorts after {ours} and sets EventedPLEG: false; it would override ours "
            "(drop-ins merge in lexical order)",
            f"remove EventedPLEG from {where}",
        )
    return _Side((FileChange(target, kubelet_text, "kubelet drop-in"),))


def _config_file_edit(managed: ManagedState, path: str, text: str) -> _Side | Refusal:
    """kubeletConfig: EditConfigFile: the gate set in --config itself, its value before ours recorded."""
    try:
        previous = kubeletconfig.config_gate(text, where=path)
        if managed.config_edit is not None and managed.config_edit.path == path:
            previous = managed.config_edit.previous  # we edited it before: keep the original value
        edited = kubeletconfig.edit_config_gate(text, True, where=path)
    except kubeletconfig.KubeletConfigError as exc:
        return Refusal(str(exc), "fix the kubelet config file")
    warning = (
        f"edited {path} (kubeletConfig: EditConfigFile); kubeadm upgrade rewrites this file from "
        "kube-system/kubelet-config and would drop the gate (docs/compatibility.md §3)"
    )
    return _Side(
        (FileChange(path, edited, "kubelet --config edit (EditConfigFile)"),),
        (warning,),
        ConfigEdit(path, previous, _sha256(edited)),
    )


def kubeadm_config_args(facts: HostFacts) -> str | None:
    """KUBELET_CONFIG_ARGS as kubeadm's 10-kubeadm.conf sets it, when a drop-in of ours can extend it: set by
    Environment= and expanded by ExecStart=, and not by an EnvironmentFile= (those override Environment=,
    systemd.exec(5)). None on any other layout."""
    unit = facts.unit
    if unit is None or KUBEADM_CONFIG_ARGS not in unit.environment:
        return None
    if not any(w in (f"${KUBEADM_CONFIG_ARGS}", f"${{{KUBEADM_CONFIG_ARGS}}}") for w in unit.exec_start):
        return None
    for ref in unit.environment_files:
        if KUBEADM_CONFIG_ARGS in parse_env_file(facts.env_files.get(ref.path, "")):
            return None
    value = unit.environment[KUBEADM_CONFIG_ARGS]
    if facts.unit_dropin is not None and MANAGED_MARKER in facts.unit_dropin.split("\n", 1)[0]:
        value = value.replace(f" --config-dir={RECOMMENDED_CONFIG_DIR}", "")  # ours is in effect: its base
    return value


def unit_dropin_text(base: str, *, alpha_env: bool) -> str:
    """Our kubelet.service drop-in: kubeadm's KUBELET_CONFIG_ARGS plus --config-dir (compatibility §3)."""
    lines = [
        f"# {MANAGED_MARKER}: adds --config-dir to kubeadm's KUBELET_CONFIG_ARGS (docs/compatibility.md §3).",
        "# Removed again when EventedPLEG is turned off; kubeadm upgrade does not touch this file.",
        "[Service]",
        f'Environment="{KUBEADM_CONFIG_ARGS}={base} --config-dir={RECOMMENDED_CONFIG_DIR}"',
    ]
    if alpha_env:  # kubelet 1.28-1.29 (KEP-3983 alpha)
        lines.append(f'Environment="{DROPIN_ALPHA_ENV}=on"')
    return "\n".join(lines) + "\n"


def _unit_dropin_enable(
    facts: HostFacts, managed: ManagedState, flags: KubeletFlags, kubelet_text: str
) -> _Side | Refusal | None:
    """A kubeadm node started without --config-dir: add it with a kubelet.service drop-in of ours, and our
    kubelet drop-in in RECOMMENDED_CONFIG_DIR. None when the node is not laid out as kubeadm lays it out."""
    version = facts.kubelet_version
    base = kubeadm_config_args(facts)
    if base is None or version is None or version.minor_pair < (1, 28) or facts.unit is None:
        return None
    if not _is_ours(facts.unit_dropin, UNIT_DROPIN, managed):
        return Refusal(
            f"{UNIT_DROPIN} exists and was not written by the operator; it is left untouched",
            f"move or rename {UNIT_DROPIN}, or start the kubelet with --config-dir yourself",
        )
    idle = [f for f in facts.idle_config_dir_files if f != c.KUBELET_DROPIN_NAME]
    if idle:
        return Refusal(
            f"{RECOMMENDED_CONFIG_DIR} already holds {', '.join(idle[:3])}, which the kubelet does not read "
            "today (it runs without --config-dir); turning --config-dir on would apply them too",
            f"move those files out of {RECOMMENDED_CONFIG_DIR}, or start the kubelet with --config-dir "
            "yourself once you have checked them",
        )
    text = unit_dropin_text(base, alpha_env=version.minor_pair < (1, 30))
    env = unit_environment(facts.unit, facts.env_files)
    env[KUBEADM_CONFIG_ARGS] = f"{base} --config-dir={RECOMMENDED_CONFIG_DIR}"
    after = parse_flags(expand_exec(facts.unit.exec_start, env))
    if after.config_dir != RECOMMENDED_CONFIG_DIR or after.config != flags.config:
        return Refusal(
            f"adding --config-dir through {KUBEADM_CONFIG_ARGS} would not give the kubelet "
            f"--config-dir={RECOMMENDED_CONFIG_DIR} (it would run with --config-dir={after.config_dir})",
            _no_dropin_fix(facts, flags),
        )
    target = f"{RECOMMENDED_CONFIG_DIR}/{c.KUBELET_DROPIN_NAME}"
    created = tuple(d for d in CREATED_DIRS if d in facts.missing_dirs)
    return _Side(
        (
            FileChange(UNIT_DROPIN, text, "kubelet.service drop-in adding --config-dir"),
            FileChange(target, kubelet_text, "kubelet drop-in"),
        ),
        created_dirs=created,
    )


def _kubelet_disable(facts: HostFacts, managed: ManagedState, flags: KubeletFlags) -> _Side | Refusal:
    """Remove what we wrote, restore a --config edit, and refuse if the gate would stay on anyway."""
    changes = [
        FileChange(path, None, "remove our kubelet drop-in")
        for path in sorted(managed.files)
        if not any(d.holds(path) for d in runtimes.dropins())
    ]
    config_dir, _ = _config_dir_usable(facts, flags)
    ours = c.KUBELET_DROPIN_NAME
    ours_text = dict(facts.kubelet_dropins).get(ours)
    if config_dir and ours_text is not None and MANAGED_MARKER in ours_text.split("\n", 1)[0]:
        changes.append(FileChange(str(PurePosixPath(config_dir) / ours), None, "remove our kubelet drop-in"))
    unit_ours = facts.unit_dropin is not None and MANAGED_MARKER in facts.unit_dropin.split("\n", 1)[0]
    if unit_ours and UNIT_DROPIN not in managed.files:
        changes.append(FileChange(UNIT_DROPIN, None, "remove our kubelet.service drop-in"))
    config = _config_pair(facts, flags)
    if managed.config_edit is not None and facts.config_text is not None:
        edit = managed.config_edit
        untouched = edit.written_sha and _sha256(facts.config_text) == edit.written_sha
        if untouched and facts.config_baseline is not None:
            # Nobody changed the file since our edit: put back the original bytes exactly.
            restored = facts.config_baseline
        else:
            try:
                restored = kubeletconfig.edit_config_gate(facts.config_text, edit.previous, where=edit.path)
            except kubeletconfig.KubeletConfigError as exc:
                return Refusal(str(exc), "fix the kubelet config file")
        changes.append(FileChange(edit.path, restored, "restore featureGates in --config"))
        if config is not None and config[0] == edit.path:
            config = (edit.path, restored)
    # Without our kubelet.service drop-in the kubelet no longer reads --config-dir at all.
    removes_unit = unit_ours or UNIT_DROPIN in managed.files
    remaining = [(rel, text) for rel, text in facts.kubelet_dropins if rel != ours and not removes_unit]
    others = kubeletconfig.gate_sources(config, remaining, _cli_gates(facts)[0])
    if kubeletconfig.effective_gate(others):
        where = next(s.where for s in reversed(others) if s.value)
        return Refusal(
            f"EventedPLEG would stay on after removing the operator's files: {where} turns it on",
            f"remove EventedPLEG/AllAlpha from {where}",
        )
    return _Side(tuple(changes), remove_dirs=tuple(reversed(managed.created_dirs)))


def _runtime_side(facts: HostFacts, rendered: RenderedConfig, managed: ManagedState) -> _Side | Refusal:
    """The drop-in the node's runtime profile names (CRI-O: enable_pod_events in crio.conf.d, §2; containerd
    >= 1.7 needs none), and removing a drop-in of ours for another runtime (the node changed runtime)."""
    profile = runtimes.profile_of(facts.runtime)
    dropin = profile.dropin if profile is not None else None
    stale = tuple(
        FileChange(d.path, None, f"remove our {d.purpose}")
        for d in runtimes.dropins()
        if d != dropin and d.path in managed.files
    )
    if profile is None or dropin is None:
        return _Side(stale)
    report = crioconfig.analyze_dropins(
        facts.runtime_dropins, dropin, enabling=rendered.enabled, runtime=profile.name
    )
    if not report.ok:
        return Refusal(
            "; ".join(report.blocking), f"fix or remove those files in {dropin.directory}, then retry"
        )
    target = dropin.path
    files = dict(facts.runtime_dropins)
    existing = files.get(dropin.name)
    present = dropin.name in files
    if rendered.enabled:
        if present and not _is_ours(existing, target, managed):
            return Refusal(
                f"{target} exists and was not written by the operator; it is left untouched",
                f"move or rename {target}",
            )
        write = FileChange(target, rendered.file(dropin.configmap_key), dropin.purpose)
        return _Side((*stale, write), report.warnings)
    if present and _is_ours(existing, target, managed):
        return _Side((*stale, FileChange(target, None, f"remove our {dropin.purpose}")), report.warnings)
    return _Side(stale, report.warnings)


def _restarts_runtime(profile: runtimes.RuntimeProfile | None, changes: tuple[FileChange, ...]) -> bool:
    dropin = profile.dropin if profile is not None else None
    if profile is None or dropin is None or not profile.restart_on_dropin_change:
        return False
    return any(dropin.holds(ch.path) for ch in changes)


def _managed_kubelet(
    facts: HostFacts, rendered: RenderedConfig, *, allow_static_pods: bool
) -> KubeletFlags | Refusal:
    """The kubelet's effective flags, or why the agent may not change this kubelet at all."""
    if facts.unit is None and facts.embedded is not None:
        return _refuse_embedded(facts.embedded)
    if facts.platform is not None and facts.platform.owns_kubelet:
        return _refuse_platform(facts.platform)
    flags = effective_flags(facts)
    if flags is None:
        return Refusal(
            "no running kubelet (kubelet.service has no main process) and no readable kubelet unit; the "
            "agent manages only a kubelet that systemd runs as kubelet.service",
            "start kubelet.service (or run the kubelet as that unit), then retry",
        )
    refusal = _refuse_command_line(facts, rendered.enabled)
    if refusal is None and rendered.enabled:
        refusal = _refuse_enabling(facts, rendered, flags, allow_static_pods=allow_static_pods)
    return flags if refusal is None else refusal


def plan_host(
    facts: HostFacts,
    rendered: RenderedConfig,
    managed: ManagedState,
    *,
    allow_static_pods: bool,
) -> ApplyPlan | Refusal:
    enabling = rendered.enabled
    flags = _managed_kubelet(facts, rendered, allow_static_pods=allow_static_pods)
    if isinstance(flags, Refusal):
        return flags
    kubelet = (
        _kubelet_enable(facts, rendered, managed, flags)
        if enabling
        else _kubelet_disable(facts, managed, flags)
    )
    if isinstance(kubelet, Refusal):
        return kubelet
    runtime = _runtime_side(facts, rendered, managed)
    if isinstance(runtime, Refusal):
        return runtime

    config_dir, _ = _config_dir_usable(facts, flags)
    dropins = facts.kubelet_dropins if config_dir else ()
    before = kubeletconfig.gate_sources(_config_pair(facts, flags), dropins, _cli_gates(facts)[0])
    keep: tuple[FileChange, ...] = ()
    if enabling and facts.unit_dropin is not None and UNIT_DROPIN in managed.files:
        # Our kubelet.service drop-in already gives --config-dir: keep it (and its record) as it is.
        keep = (FileChange(UNIT_DROPIN, facts.unit_dropin, "kubelet.service drop-in adding --config-dir"),)
    unique = {ch.path: ch for ch in keep + kubelet.changes + runtime.changes}  # one change per path
    changes = tuple(unique.values())
    reload_units = any(ch.path == UNIT_DROPIN and ch.content != facts.unit_dropin for ch in changes)
    created = tuple(dict.fromkeys(managed.created_dirs + kubelet.created_dirs)) if enabling else ()
    profile = runtimes.profile_of(facts.runtime)
    verb = "enable" if enabling else "disable"
    done = ", ".join(f"{'write' if ch.content is not None else 'remove'} {ch.path}" for ch in changes)
    return ApplyPlan(
        changes=changes,
        # crio reads enable_pod_events only at start (not hot-reloadable, §2); containerd needs no restart.
        restart_runtime=_restarts_runtime(profile, changes),
        # No profile: nothing restarts it; the record keeps the name it always had.
        runtime_unit=(profile or runtimes.CONTAINERD).unit,
        expect=Expectation.enabled(profile) if enabling else Expectation.disabled(),
        config_edit=kubelet.config_edit,
        warnings=kubelet.warnings + runtime.warnings,
        summary=f"{verb} EventedPLEG: {done or 'nothing to change'}",
        gate_before=kubeletconfig.effective_gate(before),
        reload_units=reload_units,
        created_dirs=created,
        remove_dirs=kubelet.remove_dirs,
    )
