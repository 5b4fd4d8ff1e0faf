"""File work on the host root: confined reads, directory listings, and atomic writes that never litter drop-in
dirs.

Every host path is resolved by one walk (`HostFiles._walk`), for reads and writes alike, and it never leaves
the host root. It opens the root, then each component relative to the directory before it with O_NOFOLLOW
(and O_DIRECTORY for directories), so a link swapped in after a check makes the open fail instead of being
followed. Symbolic links are resolved by the walk itself, by this rule:
- a relative link is followed from the directory that holds it;
- an absolute link is followed from the host root (where the host's daemons resolve it; inside the agent's
  container, the kernel would resolve it against the container's `/`);
- a `..` that would climb above the host root, or more than MAX_LINKS links on one path, is refused with
  ELOOP: such a path leads out of the host, and nothing outside it is opened, read, written or created.
Reads take regular files only: every other kind is refused from its lstat, before any open (a FIFO would
block a read for ever, a device may act on open), and the open is O_NONBLOCK and checked again with fstat.
A file bigger than MAX_READ is refused with EFBIG. Every refusal is an OSError with a real errno and the
host path in `filename`:
- ELOOP: a link leads out of the host root, or a link loop (HostPathError);
- EFBIG: a file over MAX_READ;
- EISDIR: a directory where a file is read; ENOTDIR: a file where a directory is walked;
- ENXIO: not a regular file (a FIFO, socket or device; strerror names which).
A missing file reads as None (absence is a fact, not a failure).

CRI-O parses every regular file in crio.conf.d and the kubelet every `*.conf` in its --config-dir
(docs/compatibility.md §2, §3), so a temp file or a backup inside them would be applied — or stop the
daemon. Temp files go to the nearest directory outside every protected directory (same filesystem in
practice, so the rename stays atomic); backups live in AGENT_STATE_DIR. Directories a write needs are
created by the walk, one component at a time, only after the components before them were checked. Temp
files are opened with O_NOFOLLOW, and the target itself is replaced by rename, which replaces a symlink
rather than following it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from eventedpleg.core.node.phases.transaction import FileCopy

TEMP_PREFIX = ".eventedpleg-"
TEMP_SUFFIX = ".tmp"
# What the agent reads are configs, drop-ins, unit and environment files and CA bundles: a few KiB each, a
# distribution's whole CA bundle about 250 KiB. 4 MiB is far above any of them, and a backup of several
# such files still fits well within the agent's memory limit (128 MiB in the chart).
MAX_READ = 4 << 20
MAX_LINKS = 40  # links followed on one path, as the kernel allows (MAXSYMLINKS)

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFLNK: "a symlink",
}


class HostPathError(OSError):
    """A path the walk refused (errno ELOOP, `filename` the host path): it leads out of the host root, or
    follows more than MAX_LINKS links."""


@dataclass(frozen=True)
class Listing:
    """Regular files under a directory (relative path, text or None if not text), and what was skipped."""

    files: tuple[tuple[str, str | None], ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()  # (relative path, why)


def _within(path: PurePosixPath, directory: PurePosixPath) -> bool:
    return path == directory or directory in path.parents


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p not in ("", ".")]


def _file_name(host_path: str) -> tuple[str, str]:
    """(directory, name) of a path that names a file: one ending in `/`, `.` or `..` names a directory."""
    head, _, name = host_path.rpartition("/")
    if name in ("", ".", ".."):
        raise IsADirectoryError(errno.EISDIR, "names a directory, not a file", host_path)
    return head or "/", name


def _decode(data: bytes) -> str | None:
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


def _on(exc: OSError, host_path: str) -> OSError:
    """The same failure (same class and errno), naming the host path: the kernel names only the component
    it was given. Raised `from` the original."""
    return type(exc)(exc.errno, exc.strerror, host_path)


def via_temp(host_path: str, temp_path: str) -> str:
    """How a fault while writing `host_path`'s temp file names the two."""
    return f"{host_path} (via its temp file {temp_path})"


def _regular(st: os.stat_result, host_path: str) -> None:
    if stat.S_ISREG(st.st_mode):
        return
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory, not a file", host_path)
    kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
    raise OSError(errno.ENXIO, f"not a regular file ({kind}); only regular files are read", host_path)


@dataclass(frozen=True)
class _Found:
    """Where a host path resolved: an open fd of its directory, the entry's name there, its lstat (None if
    it does not exist) and its resolved host path."""

    dir_fd: int
    name: str
    st: os.stat_result | None
    path: PurePosixPath


class HostFiles:
    def __init__(self, root: Path) -> None:
        self.root = root

    # --- the walk: the one way a host path is resolved --------------------------------------------------

    def _out(self, host_path: str, via: tuple[str, str] | None) -> HostPathError:
        """`via`: the last link followed on the way (its host path, its target)."""
        what = f"{via[0]} is a symlink leading outside the host root (to {via[1]})" if via else ""
        return HostPathError(errno.ELOOP, what or "`..` climbs outside the host root", host_path)

    def _open_dir(
        self,
        host_dir: str,
        *,
        create: bool = False,
        links: int = 0,
        origin: str | None = None,
        via: tuple[str, str] | None = None,
    ) -> tuple[int, PurePosixPath, int]:
        """An open fd of the directory at `host_dir`, its resolved host path and the links followed so far.

        Each component is opened with O_NOFOLLOW|O_DIRECTORY relative to the one before. With `create`,
        missing components of `host_dir` itself are made (never those named by a link's target: a write
        does not build a tree at the end of a dangling link)."""
        origin = origin or host_dir
        todo = [(part, True) for part in reversed(_parts(host_dir))]  # (component, may be created)
        stack = [os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]
        shown: list[str] = []
        try:
            while todo:
                part, creatable = todo.pop()
                if part == "..":
                    if len(stack) == 1:
                        raise self._out(origin, via)
                    os.close(stack.pop())
                    shown.pop()
                    continue
                here = "/" + "/".join([*shown, part])
                try:
                    st = os.stat(part, dir_fd=stack[-1], follow_symlinks=False)
                except FileNotFoundError:
                    if not (create and creatable):
                        through = f" (reached through {via[0]} -> {via[1]})" if via else ""
                        why = f"{here} does not exist{through}"
                        raise FileNotFoundError(errno.ENOENT, why, origin) from None
                    os.mkdir(part, 0o755, dir_fd=stack[-1])
                    st = os.stat(part, dir_fd=stack[-1], follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    links += 1
                    if links > MAX_LINKS:
                        raise HostPathError(errno.ELOOP, "too many levels of symbolic links", origin)
                    target = os.readlink(part, dir_fd=stack[-1])
                    via = (here, target)
                    if target.startswith("/"):  # from the host root, where the host resolves it
                        while len(stack) > 1:
                            os.close(stack.pop())
                        shown.clear()
                    todo.extend((p, False) for p in reversed(_parts(target)))
                    continue
                stack.append(os.open(part, _DIR_FLAGS, dir_fd=stack[-1]))
                shown.append(part)
            return stack.pop(), PurePosixPath("/", *shown), links
        except OSError as exc:
            raise _on(exc, origin) from exc
        finally:
            for fd in stack:
                os.close(fd)

    def _find(self, host_path: str, *, follow: bool = True) -> _Found:
        """Resolve `host_path`; with `follow`, a symlink at the end is followed by the same rule. The caller
        closes `dir_fd`. A missing directory on the way raises FileNotFoundError."""
        text, links = "/" + host_path.lstrip("/"), 0
        via: tuple[str, str] | None = None
        while True:
            head, _, name = text.rstrip("/").rpartition("/")
            if name in ("", ".", "..") or text.endswith("/"):  # names a directory: it is one, or this raises
                fd, _, _ = self._open_dir(text, links=links, origin=host_path, via=via)
                os.close(fd)
                raise IsADirectoryError(errno.EISDIR, "is a directory, not a file", host_path)
            dir_fd, parent, links = self._open_dir(head, links=links, origin=host_path, via=via)
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                return _Found(dir_fd, name, None, parent / name)
            except OSError as exc:
                os.close(dir_fd)
                raise _on(exc, host_path) from exc
            if not (follow and stat.S_ISLNK(st.st_mode)):
                return _Found(dir_fd, name, st, parent / name)
            try:
                target = os.readlink(name, dir_fd=dir_fd)
            finally:
                os.close(dir_fd)
            links += 1
            if links > MAX_LINKS:
                raise HostPathError(errno.ELOOP, "too many levels of symbolic links", host_path)
            via = (str(parent / name), target)
            text = target if target.startswith("/") else f"{parent}/{target}"  # absolute: from the host root

    def _read(self, host_path: str, *, exact: bool = False) -> FileCopy | None:
        """A regular file's bytes and permission bits (with `exact`, its owner and xattrs too); None when it
        does not exist."""
        try:
            found = self._find(host_path)
        except FileNotFoundError:
            return None
        try:
            if found.st is None:
                return None
            _regular(found.st, host_path)  # before open: a FIFO or device is never opened
            try:
                fd = os.open(found.name, _READ_FLAGS, dir_fd=found.dir_fd)
            except OSError as exc:
                raise _on(exc, host_path) from exc
            try:
                st = os.fstat(fd)
                _regular(st, host_path)  # it may have been swapped since the lstat
                chunks: list[bytes] = []
                size = 0
                while size <= MAX_READ and (chunk := os.read(fd, MAX_READ + 1 - size)):
                    chunks.append(chunk)
                    size += len(chunk)
                if size > MAX_READ:
                    raise OSError(errno.EFBIG, f"bigger than {MAX_READ >> 20} MiB, not read", host_path)
                if not exact:
                    return FileCopy(b"".join(chunks), stat.S_IMODE(st.st_mode))
                return FileCopy(b"".join(chunks), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, _xattrs(fd))
            finally:
                os.close(fd)
        finally:
            os.close(found.dir_fd)

    # --- reads -------------------------------------------------------------------------------------------

    def read_text(self, host_path: str) -> str | None:
        """The file's text; None when it does not exist or is not UTF-8 text."""
        data = self.read_bytes(host_path)
        return None if data is None else _decode(data)

    def read_bytes(self, host_path: str) -> bytes | None:
        read = self._read(host_path)
        return None if read is None else read.content

    def copy_of(self, host_path: str) -> FileCopy:
        """An exact copy (bytes, mode, owner, xattrs) of the file, or of its absence."""
        return self._read(host_path, exact=True) or FileCopy(None)

    def kind(self, host_path: str) -> int | None:
        """stat.S_IFMT of what the path resolves to (links followed inside the root); None when missing."""
        try:
            found = self._find(host_path)
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            return stat.S_IFDIR  # "/" or a path ending in ".."
        os.close(found.dir_fd)
        return None if found.st is None else stat.S_IFMT(found.st.st_mode)

    def list_files(self, host_dir: str) -> Listing:
        """Regular files under a directory, recursively, each read as `read_text` reads it. A symlink is
        listed when it resolves (inside the host root) to a regular file; subdirectories are entered, linked
        ones are not. FIFOs, sockets, devices, dangling links and links to directories are skipped and
        named in `skipped`. A link leading out of the root or a file over MAX_READ raises."""
        try:
            fd, _, _ = self._open_dir(host_dir)
        except (FileNotFoundError, NotADirectoryError):
            return Listing()
        files: list[tuple[str, str | None]] = []
        skipped: list[tuple[str, str]] = []
        try:
            self._scan(fd, PurePosixPath("/", host_dir), PurePosixPath(), files, skipped)
        finally:
            os.close(fd)
        return Listing(tuple(files), tuple(skipped))

    def _scan(
        self,
        dir_fd: int,
        base: PurePosixPath,
        rel: PurePosixPath,
        files: list[tuple[str, str | None]],
        skipped: list[tuple[str, str]],
    ) -> None:
        for name in sorted(os.listdir(dir_fd)):
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                sub = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
                try:
                    self._scan(sub, base, rel / name, files, skipped)
                finally:
                    os.close(sub)
                continue
            try:
                read = self._read(str(base / rel / name))
            except (IsADirectoryError, FileNotFoundError) as exc:
                skipped.append((str(rel / name), f"a symlink to {exc.strerror}"))
                continue
            except OSError as exc:
                if exc.errno != errno.ENXIO:
                    raise
                skipped.append((str(rel / name), str(exc.strerror)))
                continue
            if read is None or read.content is None:
                skipped.append((str(rel / name), "a dangling symlink"))
                continue
            files.append((str(rel / name), _decode(read.content)))

    # --- writes ------------------------------------------------------------------------------------------

    def temp_dir_for(self, host_path: str, protected: tuple[str, ...]) -> str:
        """The target's directory, or the nearest ancestor that is outside every protected directory."""
        directory = PurePosixPath(host_path).parent
        guards = [PurePosixPath(p) for p in protected]
        while any(_within(directory, g) for g in guards) and directory != directory.parent:
            directory = directory.parent
        return str(directory)

    def write_atomic(
        self,
        host_path: str,
        content: bytes,
        *,
        protected: tuple[str, ...],
        mode: int = 0o644,
        like: FileCopy | None = None,
    ) -> None:
        """temp file outside protected dirs, fsync, rename over the target, fsync the directory. With
        `like`, the file gets its owner and xattrs before the rename (a restore is exact)."""
        parent, name = _file_name(host_path)
        target_dir, _, _ = self._open_dir(parent, create=True, origin=host_path)
        try:
            temp_host_dir = self.temp_dir_for(host_path, protected)
            temp_dir, _, _ = self._open_dir(temp_host_dir, create=True, origin=host_path)
            temp = f"{TEMP_PREFIX}{name}{TEMP_SUFFIX}"
            # A fault names where it happened: the temp file while it is written (its directory may be
            # another), the target once the rename into the target's directory is refused (EPERM from an
            # immutable directory on the lab's ext4 nodes).
            failing = via_temp(host_path, str(PurePosixPath(temp_host_dir) / temp))
            try:
                flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
                fd = os.open(temp, flags, mode, dir_fd=temp_dir)
                try:
                    view = memoryview(content)
                    while view:
                        view = view[os.write(fd, view) :]
                    if like is not None:
                        _give_attributes(fd, like)
                    os.fchmod(fd, mode)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                failing = host_path
                os.rename(temp, name, src_dir_fd=temp_dir, dst_dir_fd=target_dir)
            except BaseException as exc:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temp, dir_fd=temp_dir)
                if isinstance(exc, OSError):
                    raise _on(exc, failing) from exc
                raise
            finally:
                os.close(temp_dir)
            _fsync(target_dir)
        finally:
            os.close(target_dir)

    def restore(self, host_path: str, copy: FileCopy, *, protected: tuple[str, ...]) -> None:
        if copy.content is None:
            self.remove(host_path)
        else:
            self.write_atomic(host_path, copy.content, protected=protected, mode=copy.mode, like=copy)

    def remove(self, host_path: str) -> None:
        parent, name = _file_name(host_path)
        try:
            dir_fd, _, _ = self._open_dir(parent, origin=host_path)
        except FileNotFoundError:
            return
        try:
            try:
                os.unlink(name, dir_fd=dir_fd)
            except FileNotFoundError:
                return
            except OSError as exc:
                raise _on(exc, host_path) from exc
            _fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def remove_empty_dir(self, host_dir: str) -> bool:
        """Remove a directory we created, only when nothing is left in it; whether it was removed."""
        try:
            dir_fd, _, _ = self._open_dir(str(PurePosixPath(host_dir).parent), origin=host_dir)
        except FileNotFoundError:
            return False
        try:
            os.rmdir(PurePosixPath(host_dir).name, dir_fd=dir_fd)
        except OSError:  # gone, not empty (someone else's files now live there), or not a directory
            return False
        else:
            _fsync(dir_fd)
            return True
        finally:
            os.close(dir_fd)

    def sweep_temp_files(self, host_paths: list[str], protected: tuple[str, ...]) -> list[str]:
        """Remove temp files an interrupted write of ours may have left; returns what was removed."""
        removed: list[str] = []
        for host_path in host_paths:
            name = PurePosixPath(host_path).name
            temp = (
                PurePosixPath(self.temp_dir_for(host_path, protected)) / f"{TEMP_PREFIX}{name}{TEMP_SUFFIX}"
            )
            try:
                found = self._find(str(temp), follow=False)
            except FileNotFoundError:
                continue
            try:
                if found.st is not None and (
                    stat.S_ISREG(found.st.st_mode) or stat.S_ISLNK(found.st.st_mode)
                ):
                    os.unlink(found.name, dir_fd=found.dir_fd)  # a link is removed, never followed
                    removed.append(str(temp))
            finally:
                os.close(found.dir_fd)
        return removed


# --- exact copies: owner and extended attributes (a restore puts back what was there) --------------------


def _xattrs(fd: int) -> tuple[tuple[str, bytes], ...]:
    """The open file's extended attributes (SELinux label, ACLs, user.*), by name."""
    try:
        names = os.listxattr(fd)
    except OSError as exc:
        if exc.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):  # a filesystem without xattrs: none to keep
            return ()
        raise
    return tuple((name, os.getxattr(fd, name)) for name in sorted(names))


def _give_attributes(fd: int, copy: FileCopy) -> None:
    """Owner first (chown(2) clears security.capability and set-id bits), then the xattrs; the caller sets
    the mode last."""
    if copy.uid is not None and copy.gid is not None:
        os.fchown(fd, copy.uid, copy.gid)
    for name, value in copy.xattrs:
        os.setxattr(fd, name, value)


def _fsync(dir_fd: int) -> None:
    with contextlib.suppress(OSError):
        os.fsync(dir_fd)
