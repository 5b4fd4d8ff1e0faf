"""File faults of a simulated host: the errors a real kernel gives that a temp root cannot give for real.

The simulated host's files are real files under a temp root, so a directory, a FIFO or a symlink leading
out of the root where a file should be, a file over the agent's size cap, a file's owner, mode and extended
attributes are all real and need no simulation (HostFiles refuses them as on a real host). What a test
running as root cannot get from the kernel under a temp dir -- EACCES (root passes file modes; a real host
refuses it through SELinux or AppArmor), a read-only or a full filesystem, a used-up quota -- `SimFiles`
raises, following the rules of the Linux man pages (each cited where it is raised), before the real
operation, which is what the kernel's refusal amounts to: the write of a new file that fails with ENOSPC
is undone by HostFiles itself, as on a real host. The real kernel's answers on real mounts are in
tests/agent/test_hostfiles_layouts.py.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from eventedpleg.agent.hostfiles import HostFiles
from eventedpleg.core.node.blocks.transaction import FileCopy


@dataclass(frozen=True)
class Attributes:
    """What an exact restore must put back: a real file's bytes, mode, owner and extended attributes."""

    content: bytes
    mode: int
    uid: int
    gid: int
    xattrs: tuple[tuple[str, bytes], ...]


def attributes(path: Path) -> Attributes:
    st = os.lstat(path)
    names = sorted(os.listxattr(path, follow_symlinks=False))
    xattrs = tuple((n, os.getxattr(path, n, follow_symlinks=False)) for n in names)
    return Attributes(path.read_bytes(), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, xattrs)


def _under(host_path: str, tops: set[str]) -> bool:
    path = PurePosixPath("/", host_path)
    return any(path == PurePosixPath(t) or PurePosixPath(t) in path.parents for t in tops)


@dataclass
class FileFaults:
    """Host paths (a file, or a directory and everything under it) and what the kernel says about them.
    `after`: how many checked operations succeed before the faults begin (a disk that fills half-way);
    `times`: how many refusals before they clear (None: for good), e.g. a disk full for a moment."""

    unreadable: set[str] = field(default_factory=set)  # an LSM denial of reading: EACCES on open for read
    denied: set[str] = field(
        default_factory=set
    )  # an LSM denial of writing: EACCES on create, rename, unlink
    read_only: set[str] = field(default_factory=set)  # mount points of read-only filesystems: EROFS
    full: set[str] = field(default_factory=set)  # mount points of full filesystems: ENOSPC on writing data
    over_quota: set[str] = field(default_factory=set)  # filesystems whose quota is used up: EDQUOT on data
    # Directories with the immutable attribute (chattr +i): no entry in them can be created, renamed over
    # or removed, EPERM (chattr(1), open(2), rename(2), unlink(2)); their subdirectories are not affected.
    immutable: set[str] = field(default_factory=set)
    after: int = 0
    times: int | None = None
    refused: list[tuple[str, str, str]] = field(default_factory=list)  # (operation, path, errno name)

    def check(self, operation: str, host_path: str, code: int | None) -> None:
        if code is None or self.times == 0:
            return
        if self.after > 0:
            self.after -= 1
            return
        if self.times is not None:
            self.times -= 1
        self.refused.append((operation, host_path, errno.errorcode[code]))
        raise OSError(code, os.strerror(code), host_path)


class SimFiles(HostFiles):
    """HostFiles of a simulated host: the real file work, after the kernel's refusals of `faults`."""

    def __init__(self, root: Path, faults: FileFaults) -> None:
        super().__init__(root)
        self.faults = faults

    def _writing(self, host_path: str, data: bool) -> int | None:
        """The errno of creating or replacing `host_path` (data: with bytes to write), or None."""
        f = self.faults
        if _under(host_path, f.read_only):
            return errno.EROFS  # open(2), rename(2), unlink(2): EROFS, checked before permissions
        if _under(host_path, f.denied):
            return errno.EACCES  # open(2) O_CREAT, rename(2): write permission to the directory denied
        if str(PurePosixPath("/", host_path).parent) in f.immutable:
            return errno.EPERM  # rename(2), unlink(2): the directory is immutable
        if data and _under(host_path, f.full):
            return errno.ENOSPC  # write(2): ENOSPC, no room for the data (the new file is dropped)
        if data and _under(host_path, f.over_quota):
            return errno.EDQUOT  # write(2): EDQUOT, the user's quota of disk blocks is exhausted
        return None

    def _read(self, host_path: str, *, exact: bool = False) -> FileCopy | None:
        # open(2) EACCES: read access to the file is not allowed (a file must exist to be refused). Every
        # read of HostFiles (read_bytes, copy_of, list_files) comes through here.
        if _under(host_path, self.faults.unreadable) and self.kind(host_path) == stat.S_IFREG:
            self.faults.check("open", host_path, errno.EACCES)
        return super()._read(host_path, exact=exact)

    def write_atomic(
        self, host_path: str, content: bytes, *, mode: int = 0o644, like: FileCopy | None = None
    ) -> None:
        # The new file is made, written and named in the target's own directory: each refusal names the
        # target, as HostFiles does on a real host.
        self.faults.check("write", host_path, self._writing(host_path, bool(content)))
        super().write_atomic(host_path, content, mode=mode, like=like)

    def write_symlink(self, host_path: str, target: str) -> None:
        self.faults.check("write", host_path, self._writing(host_path, data=False))
        super().write_symlink(host_path, target)

    def remove(self, host_path: str) -> None:
        # unlink(2) looks the name up first: a file that is not there is ENOENT (HostFiles: nothing to do)
        # before EROFS or EACCES.
        if self.kind(host_path) is not None:
            self.faults.check("remove", host_path, self._writing(host_path, data=False))
        super().remove(host_path)
