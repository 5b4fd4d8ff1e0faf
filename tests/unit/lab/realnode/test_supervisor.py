"""The rig's supervisor decides which PID is still its daemon; a wrong "no" made a healthy kubelet look
dead right after its start (seen on the real node rig), a wrong "yes" would signal a stranger."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eventedpleg_lab.realnode.supervisor import EXEC_GRACE_SECONDS, Supervisor, UnitState, proc_argv

KTHREADD = 2  # a live process whose /proc/<pid>/cmdline is empty, like a program still being exec'd


def _record(run_dir: Path, name: str, pid: int, argv: list[str], started: float) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    doc = {"pid": pid, "argv": argv, "log": "/dev/null", "started": started, "env": {}}
    (run_dir / f"{name}.json").write_text(json.dumps(doc))


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or Path(f"/proc/{KTHREADD}/cmdline").read_bytes() != b"",
    reason="needs Linux with kthreadd visible",
)
def test_an_empty_cmdline_is_ours_only_right_after_our_spawn(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path)
    _record(tmp_path, "kubelet", KTHREADD, ["/opt/kubelet"], time.time())
    assert sup.pid("kubelet") == KTHREADD  # mid-exec: still ours
    _record(tmp_path, "kubelet", KTHREADD, ["/opt/kubelet"], time.time() - EXEC_GRACE_SECONDS - 1)
    assert sup.pid("kubelet") is None  # long after: a reused PID, never ours
    assert sup.state("kubelet") is UnitState.FAILED


def test_a_running_daemon_is_active_and_a_stranger_with_its_pid_is_not(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path)
    pid = sup.start("sleeper", ["/bin/sleep", "30"], log=tmp_path / "sleeper.log", env={})
    try:
        assert sup.state("sleeper") is UnitState.ACTIVE
        # Until the exec completes the cmdline is empty and any fresh record may claim the PID (the grace
        # above); the stranger check is about a PID whose program is known, so wait for it (CI saw the race).
        deadline = time.monotonic() + 10
        while proc_argv(pid) != ("/bin/sleep", "30") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proc_argv(pid) == ("/bin/sleep", "30")
        _record(tmp_path, "other", pid, ["/usr/bin/not-sleep"], time.time())
        assert sup.pid("other") is None
    finally:
        assert sup.stop("sleeper")
    assert sup.state("sleeper") is UnitState.INACTIVE
    assert subprocess.run(["kill", "-0", str(pid)], capture_output=True, check=False).returncode != 0
