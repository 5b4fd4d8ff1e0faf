"""The production host's argv and /proc reading; temp-file placement."""

from __future__ import annotations

from pathlib import Path

from eventedpleg import constants as c
from eventedpleg.agent.hostfiles import HostFiles
from eventedpleg.agent.linuxhost import LinuxHost
from eventedpleg.constants import NodeState
from eventedpleg_lab.sim import profiles
from tests.agent.conftest import RigFactory


def test_linux_host_runs_commands_in_pid_1_namespaces() -> None:
    assert LinuxHost(Path("/host")).command(["systemctl", "restart", "kubelet"]) == [
        "nsenter", "-t", "1", "-m", "-u", "-i", "-n", "-p", "--", "systemctl", "restart", "kubelet",
    ]  # fmt: skip
    assert LinuxHost(Path("/"), nsenter=False).command(["crio", "status", "config"]) == [
        "crio",
        "status",
        "config",
    ]


def test_linux_host_finds_the_kubelet_in_proc(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    for pid, argv, env in (
        (1, b"/sbin/init\0", b""),
        (812, b"/usr/bin/kubelet\0--config=/var/lib/kubelet/config.yaml\0--config-dir=/d\0", b"A=1\0"),
    ):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cmdline").write_bytes(argv)
        (proc / str(pid) / "environ").write_bytes(env)
        fields = ["S"] + ["0"] * 18 + ["250"]  # field 22 = start time: 250 ticks after boot
        (proc / str(pid) / "stat").write_text(f"{pid} (x) " + " ".join(fields) + " 0 0\n")
    (proc / "stat").write_text("cpu 1 2 3\nbtime 1700000000\n")
    (proc / "self").mkdir()

    found = LinuxHost(Path("/"), proc=proc, nsenter=False).kubelet_process()
    assert found is not None
    assert found.pid == 812

    # A kubelet of a nested machine (kind, systemd-nspawn) is listed too, with a PID namespace of its own:
    # not this host's, wherever /proc lists it.
    nested = proc / "700"
    nested.mkdir()
    (nested / "cmdline").write_bytes(b"/usr/local/bin/kubelet\0--config=/etc/kubernetes/kubelet.yaml\0")
    (nested / "environ").write_bytes(b"")
    for pid, ns in ((1, "pid:[4026531836]"), (812, "pid:[4026531836]"), (700, "pid:[4026532999]")):
        (proc / str(pid) / "ns").mkdir()
        (proc / str(pid) / "ns" / "pid").symlink_to(ns)
    host = LinuxHost(Path("/"), proc=proc, nsenter=False)
    assert (found := host.kubelet_process()) is not None and found.pid == 812
    (proc / "812" / "cmdline").write_bytes(b"/sbin/other\0")
    assert host.kubelet_process() is None  # the nested one alone is not this host's kubelet
    assert found.argv == ("/usr/bin/kubelet", "--config=/var/lib/kubelet/config.yaml", "--config-dir=/d")
    assert found.environ == {"A": "1"}
    assert found.started_at is not None and found.started_at.timestamp() > 1700000000


def test_temp_files_go_outside_every_protected_directory(tmp_path: Path) -> None:
    files = HostFiles(tmp_path)
    protected = ("/etc/kubernetes/kubelet.conf.d", "/etc/crio/crio.conf.d")
    assert files.temp_dir_for("/etc/crio/crio.conf.d/99-eventedpleg.conf", protected) == "/etc/crio"
    assert files.temp_dir_for("/etc/kubernetes/kubelet.conf.d/sub/x.conf", protected) == "/etc/kubernetes"
    assert files.temp_dir_for("/var/lib/kubelet/config.yaml", protected) == "/var/lib/kubelet"
    files.write_atomic("/etc/crio/crio.conf.d/99-eventedpleg.conf", b"x = 1\n", protected=protected)
    assert sorted(p.name for p in (tmp_path / "etc/crio").rglob("*")) == [
        "99-eventedpleg.conf",
        "crio.conf.d",
    ]


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
