"""File work on the host root: reads, directory listings, and atomic writes that never litter drop-in dirs.

CRI-O parses every regular file in crio.conf.d and the kubelet every `*.conf` in its --config-dir
(docs/compatibility.md §2, §3), so a temp file or a backup inside them would be applied — or stop the
daemon. Temp files go to the nearest directory outside every protected directory (same filesystem in
practice, so the rename stays atomic); backups live in AGENT_STATE_DIR.

Writes never leave the host root through a symlink: a directory between the host root and a file we write
or remove may be a symlink only when it resolves, here, to a place inside the host root (a relative link
within the host's own tree; the daemons follow it to the same place). One that leads outside (a link to
elsewhere, or an absolute link, which inside the agent's container would resolve against the container's /
and not the host's) is refused before any directory is created. Temp files are opened with O_NOFOLLOW, and
the target itself is replaced by rename, which replaces a symlink rather than following it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path, PurePosixPath

from eventedpleg.core.node.phases.transaction import FileCopy

TEMP_PREFIX = ".eventedpleg-"
TEMP_SUFFIX = ".tmp"
MAX_READ = 1 << 20  # a config file bigger than 1 MiB is not one we should be parsing


class HostPathError(OSError):
    """A write was refused because its path leaves the host root through a symlink."""


def _within(path: PurePosixPath, directory: PurePosixPath) -> bool:
    return path == directory or directory in path.parents


class HostFiles:
    def __init__(self, root: Path) -> None:
        self.root = root

    def on_host(self, host_path: str) -> Path:
        return self.root / host_path.lstrip("/")

    def _checked_dir(self, host_dir: str) -> Path:
        """The directory under the host root, refusing any symlink on the way (checked before mkdir, so
        a symlinked component cannot make us create directories elsewhere)."""
        root = self.root.resolve()
        path, shown = root, PurePosixPath("/")
        parts = PurePosixPath("/", host_dir).parts[1:]
        for i, part in enumerate(parts):
            path, shown = path / part, shown / part
            if path.is_symlink():
                resolved = path.resolve()
                if not (resolved == root or resolved.is_relative_to(root)):
                    raise HostPathError(
                        f"refusing to write under {host_dir}: {shown} is a symlink leading outside the "
                        f"host root (to {resolved})"
                    )
                path = resolved
            if not path.exists():
                return path.joinpath(*parts[i + 1 :])
        return path

    def read_text(self, host_path: str) -> str | None:
        data = self.read_bytes(host_path)
        if data is None:
            return None
        try:
            return data.decode()
        except UnicodeDecodeError:
            return None

    def read_bytes(self, host_path: str) -> bytes | None:
        path = self.on_host(host_path)
        try:
            if not path.is_file():
                return None
            with path.open("rb") as fh:
                return fh.read(MAX_READ)
        except OSError:
            return None

    def copy_of(self, host_path: str) -> FileCopy:
        path = self.on_host(host_path)
        try:
            return FileCopy(path.read_bytes(), path.stat().st_mode & 0o7777)
        except FileNotFoundError:
            return FileCopy(None)

    def list_files(self, host_dir: str) -> list[tuple[str, str | None]]:
        """Regular files under a directory, recursively: (relative path, text or None if not text)."""
        base = self.on_host(host_dir)
        if not base.is_dir():
            return []
        out: list[tuple[str, str | None]] = []
        for path in sorted(base.rglob("*")):
            if path.is_file():
                rel = str(path.relative_to(base))
                out.append((rel, self.read_text(str(PurePosixPath(host_dir) / rel))))
        return out

    def temp_dir_for(self, host_path: str, protected: tuple[str, ...]) -> str:
        """The target's directory, or the nearest ancestor that is outside every protected directory."""
        directory = PurePosixPath(host_path).parent
        guards = [PurePosixPath(p) for p in protected]
        while any(_within(directory, g) for g in guards) and directory != directory.parent:
            directory = directory.parent
        return str(directory)

    def write_atomic(
        self, host_path: str, content: bytes, *, protected: tuple[str, ...], mode: int = 0o644
    ) -> None:
        """temp file outside protected dirs, fsync, rename over the target, fsync the directory."""
        target = self._checked_dir(str(PurePosixPath(host_path).parent)) / PurePosixPath(host_path).name
        target.parent.mkdir(parents=True, exist_ok=True)
        temp_dir = self._checked_dir(self.temp_dir_for(host_path, protected))
        temp_dir.mkdir(parents=True, exist_ok=True)
        temp = temp_dir / f"{TEMP_PREFIX}{target.name}{TEMP_SUFFIX}"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
            try:
                os.write(fd, content)
                os.fchmod(fd, mode)
                os.fsync(fd)
            finally:
                os.close(fd)
            temp.replace(target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                temp.unlink()
            raise
        _fsync_dir(target.parent)

    def restore(self, host_path: str, copy: FileCopy, *, protected: tuple[str, ...]) -> None:
        if copy.content is None:
            self.remove(host_path)
        else:
            self.write_atomic(host_path, copy.content, protected=protected, mode=copy.mode)

    def remove(self, host_path: str) -> None:
        target = self._checked_dir(str(PurePosixPath(host_path).parent)) / PurePosixPath(host_path).name
        try:
            target.unlink()
        except FileNotFoundError:
            return
        _fsync_dir(target.parent)

    def remove_empty_dir(self, host_dir: str) -> bool:
        """Remove a directory we created, only when nothing is left in it; whether it was removed."""
        path = self._checked_dir(host_dir)
        try:
            path.rmdir()
        except FileNotFoundError:
            return False
        except OSError:  # not empty (someone else's files now live there) or not a directory: keep it
            return False
        _fsync_dir(path.parent)
        return True

    def sweep_temp_files(self, host_paths: list[str], protected: tuple[str, ...]) -> list[str]:
        """Remove temp files an interrupted write of ours may have left; returns what was removed."""
        removed: list[str] = []
        for host_path in host_paths:
            name = PurePosixPath(host_path).name
            temp = (
                PurePosixPath(self.temp_dir_for(host_path, protected)) / f"{TEMP_PREFIX}{name}{TEMP_SUFFIX}"
            )
            path = self.on_host(str(temp))
            if path.is_file():
                path.unlink()
                removed.append(str(temp))
        return removed


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
