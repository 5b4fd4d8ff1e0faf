"""The production host's argv and /proc reading; what a write leaves in the target's directory."""

from __future__ import annotations

from pathlib import Path

from eventedpleg import constants as c
from eventedpleg.agent.hostfiles import HostFiles
from eventedpleg.agent.linuxhost import LinuxHost, parse_followed
from eventedpleg.core.node.blocks.host import JournalChunk
from eventedpleg.protocol import NodeState
from eventedpleg_lab.sim import profiles
from tests.agent.conftest import RigFactory
from tests.unit.core.node.phases.test_guardphase import WEDGE


def test_linux_host_runs_commands_in_pid_1_namespaces() -> None:
    assert LinuxHost(Path("/host")).command(["systemctl", "restart", "kubelet"]) == [
        "nsenter", "-t", "1", "-m", "-u", "-i", "-n", "-p", "--", "systemctl", "restart", "kubelet",
    ]  # fmt: skip
    assert LinuxHost(Path("/"), nsenter=False).command(["crio", "status", "config"]) == [
        "crio",
        "status",
        "config",
    ]


def test_a_write_leaves_only_the_target_in_its_directory(tmp_path: Path) -> None:
    files = HostFiles(tmp_path)
    files.write_atomic("/etc/crio/crio.conf.d/99-eventedpleg.conf", b"x = 1\n")
    files.write_atomic("/etc/crio/crio.conf.d/99-eventedpleg.conf", b"x = 2\n")  # over an existing file
    assert sorted(p.name for p in (tmp_path / "etc/crio").rglob("*")) == [
        "99-eventedpleg.conf",
        "crio.conf.d",
    ]
    assert (tmp_path / "etc/crio/crio.conf.d/99-eventedpleg.conf").read_bytes() == b"x = 2\n"


def test_rollback_after_drift_returns_to_what_the_files_say(make_rig: RigFactory) -> None:
    # Our drop-in was removed by hand (the running kubelet still has the gate); the re-apply fails: the
    # rollback restores "no drop-in" and verifies the gate is off, as those files imply.
    rig = make_rig(profiles.kubeadm_containerd())
    config_hash = rig.apply()
    rig.path(f"{profiles.CONFIG_DIR}/{c.KUBELET_DROPIN_NAME}").unlink()
    rig.host.faults.kubelet.fails_when_evented = True
    rig.request(config_hash)
    rig.step()
    assert rig.state == NodeState.ROLLED_BACK
    assert not rig.host.kubelet.evented
    assert not rig.path(f"{profiles.CONFIG_DIR}/{c.KUBELET_DROPIN_NAME}").exists()


CURSOR = "s=0b1;i=1f2;b=9a;m=3c;t=5f;x=77"


def test_the_guard_follows_the_journal_from_journalctls_own_cursor() -> None:
    """journalctl --show-cursor ends with the cursor where it stopped reading (matched or not); with nothing
    logged since, it shows none and the old one stays."""
    wedge = WEDGE[0]
    chunk = parse_followed(f"{wedge}\n-- cursor: {CURSOR}\n", "old")
    assert chunk.lines == (wedge,)
    assert chunk.cursor == CURSOR
    assert parse_followed(f"-- cursor: {CURSOR}\n", "old") == JournalChunk((), CURSOR)  # read, none matched
    assert parse_followed("", "old") == JournalChunk((), "old")
    assert parse_followed("-- No entries --\n", "old") == JournalChunk((), "old")
