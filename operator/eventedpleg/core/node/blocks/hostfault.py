"""A host effect that failed (core.node.blocks.effects), as data. Pure.

The interpreter answers an effect whose file work or command failed with a `HostFault` instead of raising:
what it was doing, on which path or command, the errno by name and in words (errno.errorcode,
os.strerror), and what to do about it. `ask` turns that answer into `Faulted` inside the phase, and each
phase's entry point catches it and reports in one line: Skipped when nothing was changed yet, the backups
restored (RolledBack, or Failed) when something was.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass

# What an administrator can do, by errno ("it": the path or command the line names).
_FIXES: dict[int, str] = {
    errno.EISDIR: "remove or rename that directory",
    errno.ENOTDIR: "a component of the path is not a directory: fix the path on the host",
    errno.ELOOP: "replace the symbolic link with the file itself (the agent follows no links)",
    errno.EFBIG: "it is larger than the agent reads: shrink it or move it aside",
    errno.EINVAL: "remove or rename it",
    errno.ENXIO: "remove or rename it",
    errno.EACCES: "allow the agent access to it (file mode, SELinux/AppArmor policy)",
    errno.EPERM: "allow the agent to change it (immutable attribute, SELinux/AppArmor policy)",
    errno.EROFS: "make that filesystem writable (remount it read-write) or move that directory off it",
    errno.ENOSPC: "free space (or inodes) on that filesystem",
    errno.EDQUOT: "raise or free that disk quota",
    errno.EXDEV: "the path crosses a mount the kernel will not rename across: fix the mounts on the host",
    errno.EBUSY: "it is a mount point or in use: unmount it or free it on the host",
    errno.E2BIG: "remove what does not belong in that directory",
    errno.ENOENT: "install it on the host (on systemd's PATH)",
    errno.ETIMEDOUT: "find out on the host why it hangs",
    errno.EIO: "check that disk (dmesg)",
}
GENERIC_FIX = "fix it on the host"


@dataclass(frozen=True)
class HostFault:
    """What failed: `operation` (read, list, back up, write, rename, remove, run, read the journal of,
    scrape), on `target` (a host path or a command line), with the errno's name (errno.errorcode) and
    words (os.strerror); `detail` when the errno alone says less than we know (what kind of file it is)."""

    operation: str
    target: str
    errno_name: str
    words: str
    fix: str
    detail: str = ""

    def line(self, retry: str = "") -> str:
        """One line: what, where, the errno in words, and the fix (then `retry` when given)."""
        detail = f": {self.detail}" if self.detail else ""
        code = f"{self.errno_name}: {self.words}" if self.errno_name else self.words
        then = f", then {retry}" if retry else ""
        return f"{self.operation} {self.target} failed{detail} ({code}): {self.fix}{then}"


class Faulted(Exception):  # noqa: N818 - a phase's typed ending, not an error of the code
    """Raised inside a phase (by `ask`) when an effect was answered with a HostFault."""

    def __init__(self, fault: HostFault) -> None:
        super().__init__(fault.line())
        self.fault = fault


def fault(operation: str, target: str, code: int | None, *, words: str = "", detail: str = "") -> HostFault:
    """A HostFault for `code` (an errno; None when only `words` are known)."""
    name = errno.errorcode.get(code, "") if code is not None else ""
    said = os.strerror(code) if code is not None else (words or "failed")
    fix = _FIXES.get(code, GENERIC_FIX) if code is not None else GENERIC_FIX
    return HostFault(operation, target, name, said, fix, detail)


def retry_hint(node: str, owner: str) -> str:
    """The command that takes the node again once the cause is fixed."""
    return f"`eventedpleg retry {owner or 'cluster'} --node {node}`"
