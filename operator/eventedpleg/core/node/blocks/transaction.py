"""The agent's record of an apply in progress: the exact bytes, mode, owner and extended attributes of every
file it is about to touch,
so a rollback restores them exactly even after the agent was restarted half-way. Pure data; the agent keeps
it in AGENT_STATE_DIR (eventedpleg.agent.statestore)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from eventedpleg.core.node.facts.hostplan import ManagedState


def sha256(text: str | bytes) -> str:
    data = text.encode() if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class FileCopy:
    """A file's exact content, mode, owner and extended attributes (SELinux label, ACLs, user.*), or its
    absence. uid/gid None: not recorded (a transaction written before owners were kept). `link`: the path
    was a symbolic link to this target (content and the rest are what it led to, None when dangling); a
    restore puts the link back."""

    content: bytes | None
    mode: int = 0o644
    uid: int | None = None
    gid: int | None = None
    xattrs: tuple[tuple[str, bytes], ...] = ()
    link: str | None = None


@dataclass(frozen=True)
class Transaction:
    target_hash: str
    enabled: bool
    started: str  # RFC 3339
    backups: tuple[tuple[str, FileCopy], ...]  # host path -> what was there before
    restart_runtime: bool
    runtime_unit: str
    previous: ManagedState
    pre_gate: bool | None = None  # EventedPLEG as the files said before we touched anything
    halted: bool = False  # onFailure=Halt left the node as it failed; roll back before anything else
    reload_units: bool = False  # a kubelet.service drop-in is among the files: daemon-reload before restarts
    created_dirs: tuple[str, ...] = ()  # directories this apply creates: a restore removes them if empty

    @property
    def paths(self) -> list[str]:
        return [p for p, _ in self.backups]
