"""The agent's bookkeeping on the host, in AGENT_STATE_DIR (never inside a drop-in directory).

- `applied.json`: what we applied and verified last (hash, files with their sha256, a --config edit). Drift
  detection and "turn it off" both start from it.
- `txn.json`: the apply in progress: the mode, owner, xattrs or link target of every file we are about to
  touch, and for each file's bytes the name and sha256 of its backup, so a rollback restores them exactly
  even if the agent was restarted half-way.
- `backup-<n>`: one backup file each, the exact bytes (each at most what a read takes, MAX_READ), written
  before `txn.json` names them, checked against their sha256 when read back, removed after it. `txn.json`
  stays a few KiB whatever the files weigh. A backup written by a `begin` interrupted before `txn.json` is
  named by nothing and never read.
"""

from __future__ import annotations

import base64
import errno
import json
from typing import Any

from eventedpleg import constants as c
from eventedpleg.agent.hostfiles import HostFiles
from eventedpleg.core.node.blocks.transaction import FileCopy, Transaction, sha256
from eventedpleg.core.node.facts.hostplan import ConfigEdit, ManagedState

APPLIED = "applied.json"
CONFIG_BASELINE = "config-baseline"  # the kubelet --config before our first edit (EditConfigFile)
TXN = "txn.json"
BACKUP = "backup-{}"  # one per backed-up file with content, by its place in the transaction


def _managed_to_json(state: ManagedState) -> dict[str, Any]:
    edit = state.config_edit
    return {
        "hash": state.hash,
        "enabled": state.enabled,
        "files": dict(state.files),
        "configEdit": None
        if edit is None
        else {"path": edit.path, "previous": edit.previous, "writtenSha": edit.written_sha},
        "createdDirs": list(state.created_dirs),
    }


def _managed_from_json(doc: dict[str, Any]) -> ManagedState:
    edit = doc.get("configEdit")
    return ManagedState(
        hash=str(doc.get("hash", "")),
        enabled=bool(doc.get("enabled", False)),
        files={str(k): str(v) for k, v in (doc.get("files") or {}).items()},
        config_edit=None
        if not edit
        else ConfigEdit(str(edit["path"]), edit.get("previous"), str(edit.get("writtenSha", ""))),
        created_dirs=tuple(str(d) for d in doc.get("createdDirs") or ()),
    )


class StateStore:
    def __init__(self, files: HostFiles) -> None:
        self.files = files
        self.dir = "/" + c.AGENT_STATE_DIR

    def _path(self, name: str) -> str:
        return f"{self.dir}/{name}"

    def _write_json(self, name: str, doc: dict[str, Any]) -> None:
        data = json.dumps(doc, indent=1, sort_keys=True).encode()
        self.files.write_atomic(self._path(name), data, mode=0o600)

    def _read_json(self, name: str) -> dict[str, Any] | None:
        text = self.files.read_text(self._path(name))
        if text is None:
            return None
        try:
            doc = json.loads(text)
        except ValueError:
            return None
        return doc if isinstance(doc, dict) else None

    # --- applied ------------------------------------------------------------------------------------------

    def applied(self) -> ManagedState:
        doc = self._read_json(APPLIED)
        return ManagedState() if doc is None else _managed_from_json(doc)

    def save_applied(self, state: ManagedState) -> None:
        self._write_json(APPLIED, _managed_to_json(state))

    def config_baseline(self) -> str | None:
        return self.files.read_text(self._path(CONFIG_BASELINE))

    def save_config_baseline(self, content: bytes) -> None:
        self.files.write_atomic(self._path(CONFIG_BASELINE), content, mode=0o600)

    def drop_config_baseline(self) -> None:
        self.files.remove(self._path(CONFIG_BASELINE))

    # --- transaction --------------------------------------------------------------------------------------

    def transaction(self) -> Transaction | None:
        doc = self._read_json(TXN)
        if doc is None:
            return None
        backups = tuple(
            (
                str(b["path"]),
                FileCopy(
                    self._backup_content(b.get("content")),
                    int(b.get("mode", 0o644)),
                    None if b.get("uid") is None else int(b["uid"]),
                    None if b.get("gid") is None else int(b["gid"]),
                    tuple((str(k), base64.b64decode(v)) for k, v in sorted((b.get("xattrs") or {}).items())),
                    None if b.get("link") is None else str(b["link"]),
                ),
            )
            for b in doc.get("backups", [])
        )
        return Transaction(
            target_hash=str(doc["targetHash"]),
            enabled=bool(doc["enabled"]),
            started=str(doc.get("started", "")),
            backups=backups,
            restart_runtime=bool(doc.get("restartRuntime", False)),
            runtime_unit=str(doc.get("runtimeUnit", "")),
            previous=_managed_from_json(doc.get("previous") or {}),
            pre_gate=doc.get("preGate"),
            halted=bool(doc.get("halted", False)),
            reload_units=bool(doc.get("reloadUnits", False)),
            created_dirs=tuple(str(d) for d in doc.get("createdDirs") or ()),
        )

    def _backup_content(self, ref: object) -> bytes | None:
        """A backup's bytes from its own file, checked against the sha256 recorded with its name (a bare
        base64 string: a transaction recorded with the bytes inline)."""
        if ref is None:
            return None
        if isinstance(ref, str):
            return base64.b64decode(ref)
        if not isinstance(ref, dict):
            raise OSError(errno.EINVAL, "a backup entry that is neither a file nor bytes", self._path(TXN))
        path = self._path(str(ref["file"]))
        data = self.files.read_bytes(path)
        if data is None:
            raise FileNotFoundError(errno.ENOENT, "the backup named by txn.json is missing", path)
        if sha256(data) != ref.get("sha256"):
            raise OSError(errno.EIO, "the backup does not match the sha256 txn.json recorded", path)
        return data

    def begin(self, txn: Transaction) -> None:
        """Record the exact previous state of every file before the first write: each file's bytes in a
        backup file of its own first, then `txn.json` naming them (the one atomic step that starts it)."""
        backups = []
        for index, (path, copy) in enumerate(txn.backups):
            content: dict[str, str] | None = None
            if copy.content is not None:
                name = BACKUP.format(index)
                self.files.write_atomic(self._path(name), copy.content, mode=0o600)
                content = {"file": name, "sha256": sha256(copy.content)}
            backups.append(
                {
                    "path": path,
                    "content": content,
                    "mode": copy.mode,
                    "uid": copy.uid,
                    "gid": copy.gid,
                    "xattrs": {k: base64.b64encode(v).decode() for k, v in copy.xattrs},
                    "link": copy.link,
                }
            )
        self._write_json(
            TXN,
            {
                "targetHash": txn.target_hash,
                "enabled": txn.enabled,
                "started": txn.started,
                "backups": backups,
                "restartRuntime": txn.restart_runtime,
                "runtimeUnit": txn.runtime_unit,
                "previous": _managed_to_json(txn.previous),
                "preGate": txn.pre_gate,
                "halted": txn.halted,
                "reloadUnits": txn.reload_units,
                "createdDirs": list(txn.created_dirs),
            },
        )

    def mark_halted(self) -> None:
        doc = self._read_json(TXN)
        if doc is not None:
            doc["halted"] = True
            self._write_json(TXN, doc)

    def end(self) -> None:
        """Drop `txn.json` first (the transaction is over once it is gone), then the backups it named."""
        try:
            doc = self._read_json(TXN) or {}
        except OSError:  # a record that cannot be read names no backup we could remove
            doc = {}
        self.files.remove(self._path(TXN))
        for entry in doc.get("backups") or ():
            ref = entry.get("content") if isinstance(entry, dict) else None
            if isinstance(ref, dict) and isinstance(ref.get("file"), str) and "/" not in ref["file"]:
                self.files.remove(self._path(ref["file"]))
