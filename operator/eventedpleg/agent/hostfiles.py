"""File work on the host root: confined reads, capped directory listings, and atomic writes in the
target's own directory.

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
- ENXIO: not a regular file (a FIFO, socket or device; strerror names which);
- E2BIG: a directory listing past its caps (below).
A missing file reads as None (absence is a fact, not a failure).

Writes happen in the target's own directory, so a directory that is its own mount point (a bind mount, a
tmpfs, another filesystem) is written like any other, and a refusal is that filesystem's own (EROFS,
ENOSPC, EDQUOT, EPERM), never a cross-device rename. The new file is opened with O_TMPFILE: it has no name
while it is written, and gets one (linkat(2) through /proc/self/fd) only once it is whole and fsync'ed.
Over an existing file it is linked under a random temp name and renamed over the target (rename replaces
a symlink rather than following it). Where the filesystem has no O_TMPFILE, the file is created under a
random temp name with O_EXCL|O_NOFOLLOW (nothing planted at that name -- a link, a hard link -- is ever
opened), written, then renamed. The temp name is `.eventedpleg-<16 hex>.tmp`: the kubelet reads only
`*.conf` from its --config-dir (docs/compatibility.md §3), so it never reads one. CRI-O parses every regular
file in crio.conf.d whatever its name (`UpdateFromPath` -> `filepath.Walk`, cri-o pkg/config/config.go;
docs/compatibility.md §2): a temp name there exists only for the moment of the rename (holding the whole
new file), or, without O_TMPFILE, while the file is written; a name left by an interrupted write is swept
before the next write. Backups live in AGENT_STATE_DIR (agent.statestore), one file each. Directories a
write needs are created by the walk, one component at a time, only after the components before them were
checked.

A listing (`list_files`) stops at MAX_LIST_ENTRIES entries, MAX_LIST_DEPTH levels and MAX_LIST_BYTES read
with E2BIG naming the directory and the cap.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from eventedpleg.core.node.blocks.transaction import FileCopy

TEMP_PREFIX = ".eventedpleg-"
TEMP_SUFFIX = ".tmp"
# What the agent reads are configs, drop-ins, unit and environment files and CA bundles: a few KiB each, a
# distribution's whole CA bundle about 250 KiB. 4 MiB is far above any of them, and a backup of several
# such files still fits well within the agent's memory limit (128 MiB in the chart).
MAX_READ = 4 << 20
MAX_LINKS = 40  # links followed on one path, as the kernel allows (MAXSYMLINKS)
# A drop-in directory holds a handful of files, one or two levels deep; the caps keep a listing (every file
# read into memory) well inside the agent's memory limit whatever is planted there.
MAX_LIST_ENTRIES = 256
MAX_LIST_DEPTH = 8
MAX_LIST_BYTES = 16 << 20

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


def _regular(st: os.stat_result, host_path: str) -> None:
    if stat.S_ISREG(st.st_mode):
        return
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory, not a file", host_path)
    kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
    raise OSError(errno.ENXIO, f"not a regular file ({kind}); only regular files are read", host_path)


@dataclass
class _Budget:
    """What one listing may take: MAX_LIST_ENTRIES entries, MAX_LIST_DEPTH directories deep, MAX_LIST_BYTES
    read; past any of them the listing fails with E2BIG naming the directory and the cap."""

    host_dir: str
    entries: int = 0
    bytes: int = 0

    def _over(self, what: str) -> OSError:
        return OSError(errno.E2BIG, f"{what}; the agent lists no more", self.host_dir)

    def entry(self) -> None:
        self.entries += 1
        if self.entries > MAX_LIST_ENTRIES:
            raise self._over(f"more than {MAX_LIST_ENTRIES} entries under it")

    def depth(self, depth: int) -> None:
        if depth > MAX_LIST_DEPTH:
            raise self._over(f"subdirectories more than {MAX_LIST_DEPTH} levels deep")

    def read(self, size: int) -> None:
        self.bytes += size
        if self.bytes > MAX_LIST_BYTES:
            raise self._over(f"more than {MAX_LIST_BYTES >> 20} MiB of files under it")


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
        """An exact copy (bytes, mode, owner, xattrs) of the file, or of its absence; when the path itself
        is a symbolic link, its target too (`link`), so a restore puts the link back, not a file."""
        copy = self._read(host_path, exact=True) or FileCopy(None)
        try:
            found = self._find(host_path, follow=False)
        except FileNotFoundError:
            return copy
        try:
            if found.st is None or not stat.S_ISLNK(found.st.st_mode):
                return copy
            return replace(copy, link=os.readlink(found.name, dir_fd=found.dir_fd))
        finally:
            os.close(found.dir_fd)

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
        budget = _Budget(host_dir)
        try:
            self._scan(fd, PurePosixPath("/", host_dir), PurePosixPath(), files, skipped, budget)
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
        budget: _Budget,
    ) -> None:
        for name in sorted(os.listdir(dir_fd)):
            budget.entry()
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                budget.depth(len(rel.parts) + 1)
                sub = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
                try:
                    self._scan(sub, base, rel / name, files, skipped, budget)
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
            budget.read(len(read.content))
            files.append((str(rel / name), _decode(read.content)))

    # --- writes ------------------------------------------------------------------------------------------

    def write_atomic(
        self, host_path: str, content: bytes, *, mode: int = 0o644, like: FileCopy | None = None
    ) -> None:
        """Write the whole file in the target's own directory, then give it the target's name: an O_TMPFILE
        file (no name while it is written) linked in, or where the filesystem has none a random
        O_EXCL|O_NOFOLLOW temp name renamed over the target; file and directory fsync'ed. With `like`, the
        file gets its owner and xattrs before it is named (a restore is exact). Any fault names the target."""
        parent, name = _file_name(host_path)
        dir_fd, _, _ = self._open_dir(parent, create=True, origin=host_path)
        try:
            try:
                fd, temp = _open_unnamed(dir_fd, mode)
            except OSError as exc:
                raise _on(exc, host_path) from exc
            try:
                view = memoryview(content)
                while view:
                    view = view[os.write(fd, view) :]
                if like is not None:
                    _give_attributes(fd, like)
                os.fchmod(fd, mode)
                os.fsync(fd)
                if temp is None:
                    temp = _link_in(fd, dir_fd, name)
            except BaseException as exc:
                if temp is not None:  # a named temp file: nothing of it stays behind
                    with contextlib.suppress(OSError):
                        os.unlink(temp, dir_fd=dir_fd)
                if isinstance(exc, OSError):
                    raise _on(exc, host_path) from exc
                raise
            finally:
                os.close(fd)
            if temp is not None:
                try:
                    _rename_in(dir_fd, temp, name)
                except OSError as exc:
                    raise _on(exc, host_path) from exc
            _fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def write_symlink(self, host_path: str, target: str) -> None:
        """Put a symbolic link to `target` at `host_path` (replacing what is there), made under a temp name
        in the same directory and renamed over it."""
        parent, name = _file_name(host_path)
        dir_fd, _, _ = self._open_dir(parent, create=True, origin=host_path)
        try:
            try:
                for _ in range(_TEMP_TRIES):
                    temp = _temp_name()
                    try:
                        os.symlink(target, temp, dir_fd=dir_fd)
                        break
                    except FileExistsError:
                        continue
                else:
                    raise FileExistsError(errno.EEXIST, "no free temp name", host_path)
                _rename_in(dir_fd, temp, name)
            except OSError as exc:
                raise _on(exc, host_path) from exc
            _fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def restore(self, host_path: str, copy: FileCopy) -> None:
        """Put back what `copy_of` found: a symlink as the same link, a file exactly, an absence as none.
        Nothing is written when the path is that already (a write that failed changed nothing), so a
        read-only directory that refused the write does not refuse its rollback too."""
        try:
            unchanged = self.copy_of(host_path) == copy
        except OSError:
            unchanged = False  # not readable as it is: put it back
        if unchanged:
            return
        if copy.link is not None:
            self.write_symlink(host_path, copy.link)
        elif copy.content is None:
            self.remove(host_path)
        else:
            self.write_atomic(host_path, copy.content, mode=copy.mode, like=copy)

    def remove(self, host_path: str) -> None:
        parent, name = _file_name(host_path)
        try:
            dir_fd, _, _ = self._open_dir(parent, origin=host_path)
        except FileNotFoundError:
            return
        try:
            try:
                os.stat(name, dir_fd=dir_fd, follow_symlinks=False)  # absent already: a read-only
                os.unlink(name, dir_fd=dir_fd)  # filesystem refuses the unlink of a missing name too
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

    def sweep_temp_files(self, host_paths: list[str]) -> list[str]:
        """Remove the temp names an interrupted write of ours may have left in the directories of
        `host_paths` (`.eventedpleg-<random>.tmp`: a regular file or a link, unlinked, never followed);
        returns what was removed."""
        removed: list[str] = []
        for host_dir in dict.fromkeys(str(PurePosixPath("/", p).parent) for p in host_paths):
            try:
                dir_fd, resolved, _ = self._open_dir(host_dir)
            except (FileNotFoundError, NotADirectoryError):
                continue
            try:
                for name in sorted(os.listdir(dir_fd)):  # noqa: PTH208 - an fd, not a path
                    if not _TEMP_NAME.fullmatch(name):
                        continue
                    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                    if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                        os.unlink(name, dir_fd=dir_fd)
                        removed.append(str(resolved / name))
            finally:
                os.close(dir_fd)
        return removed


# --- the unnamed file: O_TMPFILE where the filesystem has it, else a random exclusive name ---------------

_TEMP_TRIES = 16
_TEMP_NAME = re.compile(re.escape(TEMP_PREFIX) + r"[0-9a-f]{16}" + re.escape(TEMP_SUFFIX))
# open(2): a filesystem without O_TMPFILE answers EOPNOTSUPP; a kernel older than 3.11 EISDIR or EINVAL.
_NO_TMPFILE = (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL)
_PROC_FD = Path("/proc/self/fd")


def _temp_name() -> str:
    return f"{TEMP_PREFIX}{secrets.token_hex(8)}{TEMP_SUFFIX}"


def _open_unnamed(dir_fd: int, mode: int) -> tuple[int, str | None]:
    """A new, empty file for writing in the directory: (fd, None) when it has no name (O_TMPFILE), else
    (fd, its random temp name), created with O_EXCL|O_NOFOLLOW so nothing planted there is opened."""
    if hasattr(os, "O_TMPFILE") and _PROC_FD.is_dir():
        try:
            return os.open(".", os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, mode, dir_fd=dir_fd), None
        except OSError as exc:
            if exc.errno not in _NO_TMPFILE:
                raise
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(_TEMP_TRIES):
        temp = _temp_name()
        try:
            fd = os.open(temp, flags, mode, dir_fd=dir_fd)
        except FileExistsError:
            continue
        return fd, temp
    raise FileExistsError(errno.EEXIST, "no free temp name")


def _link_in(fd: int, dir_fd: int, name: str) -> str | None:
    """Give the O_TMPFILE file `name` (linkat(2) through /proc/self/fd, which is how an unnamed file is
    named); when `name` exists, a random temp name for the rename instead, returned."""
    try:
        os.link(f"{_PROC_FD}/{fd}", name, dst_dir_fd=dir_fd, follow_symlinks=True)
        return None
    except FileExistsError:
        pass
    for _ in range(_TEMP_TRIES):
        temp = _temp_name()
        try:
            os.link(f"{_PROC_FD}/{fd}", temp, dst_dir_fd=dir_fd, follow_symlinks=True)
        except FileExistsError:
            continue
        return temp
    raise FileExistsError(errno.EEXIST, "no free temp name")


def _rename_in(dir_fd: int, temp: str, name: str) -> None:
    """rename(2) within one directory (never EXDEV); the temp name is removed when it fails."""
    try:
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise


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
