"""HostFault (core.node.blocks.hostfault): one line naming what, where, the errno in words and the fix."""

from __future__ import annotations

import errno

import pytest

from eventedpleg.core.node.blocks.effects import ReadFile, ask
from eventedpleg.core.node.blocks.hostfault import Faulted, HostFault, fault, retry_hint


def test_a_fault_is_one_line_with_the_errno_by_name_and_in_words_and_the_fix() -> None:
    found = fault(
        "back up", "/etc/crio/crio.conf.d/99-eventedpleg.conf", errno.EISDIR, detail="it is a directory"
    )
    line = found.line(retry_hint("node-a", "cluster"))
    assert line == (
        "back up /etc/crio/crio.conf.d/99-eventedpleg.conf failed: it is a directory "
        "(EISDIR: Is a directory): "
        "remove or rename that directory, then `eventedpleg retry cluster --node node-a`"
    )


@pytest.mark.parametrize(
    ("code", "fix"),
    [
        (errno.EACCES, "SELinux/AppArmor"),
        (errno.EROFS, "writable"),
        (errno.ENOSPC, "free space"),
        (errno.ELOOP, "symbolic link"),
        (errno.EFBIG, "shrink"),
        (errno.ENOENT, "install it"),
        (errno.ETIMEDOUT, "hangs"),
        (errno.EMFILE, "fix it on the host"),
    ],
)
def test_each_errno_has_its_fix(code: int, fix: str) -> None:
    line = fault("write", "/x", code).line()
    assert fix in line and f"({errno.errorcode[code]}: " in line


def test_a_fault_known_only_in_words_says_them() -> None:
    line = fault("write", "/etc/x", None, words="refusing to write under /etc/x: a symlink").line()
    assert line == "write /etc/x failed (refusing to write under /etc/x: a symlink): fix it on the host"


def test_ask_turns_a_fault_answer_into_faulted_inside_the_phase() -> None:
    phase = ask(ReadFile("/etc/x"), bytes)
    next(phase)
    answer = fault("read", "/etc/x", errno.EACCES)
    with pytest.raises(Faulted) as raised:
        phase.send(answer)
    assert raised.value.fault == answer
    assert isinstance(raised.value.fault, HostFault)
