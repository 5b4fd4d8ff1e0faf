"""What each container runtime needs for Evented PLEG, as data: one frozen profile per runtime kind.

The renderer, the host plan, verification and the agent's phases read these fields instead of asking which
runtime a node runs; a new runtime is one more profile (and its tests). Sources: docs/compatibility.md
(§2 for CRI-O's drop-in and restart, §1 and containerd#7318 for containerd's single event subscriber).
What a runtime version does wrong is the compatibility matrix's business (core.compat), not a profile's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from types import MappingProxyType
from typing import Final

from eventedpleg import constants as c
from eventedpleg.core.versions import RuntimeKind, RuntimeVersion

CRIO_TEMPLATE: Final = "crio-dropin.conf.j2"


@dataclass(frozen=True)
class DropIn:
    """A TOML file the runtime reads from a directory of drop-ins, turning container events on."""

    directory: str  # host path; the runtime parses every file in it, in lexical order, last one wins
    name: str  # our file's name in `directory`
    configmap_key: str  # its key in the rendered-config ConfigMap
    template: str  # templates/<template>, rendered with `enabled` and `owner`
    setting: tuple[str, ...]  # the TOML key path the file sets to `enabled`
    purpose: str  # how plans and logs name the file

    @property
    def path(self) -> str:
        return f"{self.directory}/{self.name}"

    @property
    def short_dir(self) -> str:
        """How messages name the directory (`crio.conf.d`)."""
        return PurePosixPath(self.directory).name

    def holds(self, path: str) -> bool:
        return path.startswith(self.directory + "/")


@dataclass(frozen=True)
class RuntimeProfile:
    kind: RuntimeKind
    name: str  # as people write it in messages
    unit: str  # the systemd unit to restart
    dropin: DropIn | None  # None: the runtime always emits container events, nothing to write
    # The setting is read only at start (not hot-reloadable): restart the runtime when the drop-in changes.
    restart_on_dropin_change: bool
    # Verification reads the running daemon's setting back with the first of these commands that prints a
    # config; empty: nothing to read back.
    config_commands: tuple[tuple[str, ...], ...]
    # That check's name in the verification evidence the agent writes (a wire name: never rename it).
    check_name: str
    # Seen in --container-runtime-endpoint when containerRuntimeVersion does not parse (a runtime whose
    # drop-in must not be missed); "" for none.
    endpoint_marker: str
    # The agent can count the open event streams (a goroutine dump, core.node.blocks.eventconsumers) when the
    # matrix says each event goes to one subscriber only.
    counts_subscribers: bool
    note: str  # what a node of this kind gets written, for preflight and inspect (compat.RenderTargets)

    @property
    def reads_back_config(self) -> bool:
        return bool(self.config_commands)


CONTAINERD: Final = RuntimeProfile(
    kind=RuntimeKind.CONTAINERD,
    name="containerd",
    unit="containerd",
    dropin=None,
    restart_on_dropin_change=False,
    config_commands=(),
    check_name="",
    endpoint_marker="",
    counts_subscribers=True,
    note="containerd >= 1.7 always emits container events: nothing to write",
)

# docs/compatibility.md §2: `enable_pod_events` in [crio.runtime], default false; crio.conf.d(5): every
# file in the directory, lexical order, last one wins; the docs' YAML-style example is invalid TOML.
CRIO_DROPIN: Final = DropIn(
    directory="/" + c.CRIO_DROPIN_DIR,
    name=c.CRIO_DROPIN_NAME,
    configmap_key=c.CM_KEY_CRIO,
    template=CRIO_TEMPLATE,
    setting=("crio", "runtime", "enable_pod_events"),
    purpose="CRI-O drop-in",
)

CRIO: Final = RuntimeProfile(
    kind=RuntimeKind.CRIO,
    name="CRI-O",
    unit="crio",
    dropin=CRIO_DROPIN,
    restart_on_dropin_change=True,
    config_commands=(("crio", "status", "config"), ("crio-status", "config"), ("crio", "config")),
    check_name="crioPodEvents",
    endpoint_marker="crio",
    # CRI-O 1.26-1.27 has one subscriber too (cri-o#6838), but its dump was never taken on a real node here.
    counts_subscribers=False,
    note="CRI-O: enable_pod_events = true in /etc/crio/crio.conf.d",
)

# Read at call time everywhere (never copied), so that a test can put a further profile in.
PROFILES: Mapping[RuntimeKind, RuntimeProfile] = MappingProxyType({p.kind: p for p in (CONTAINERD, CRIO)})


def profile(kind: RuntimeKind) -> RuntimeProfile | None:
    """None for a runtime without the events API (RuntimeKind.OTHER)."""
    return PROFILES.get(kind)


def profile_of(runtime: RuntimeVersion | None) -> RuntimeProfile | None:
    return None if runtime is None else PROFILES.get(runtime.kind)


def names() -> str:
    """`containerd and CRI-O`: the runtimes that can run Evented PLEG."""
    return " and ".join(p.name for p in PROFILES.values())


def dropins() -> tuple[DropIn, ...]:
    """Every runtime's drop-in: the rendered config carries them all, each agent writes its runtime's."""
    return tuple(p.dropin for p in PROFILES.values() if p.dropin is not None)
