"""The kubelet is kubelet.service's main process, asked of the service manager; a process that merely calls
itself kubelet is never read and its binary never run. A fake `systemctl` on PATH answers MainPID, a fake
/proc holds the unit's kubelet and a planted one, and both "binaries" are scripts that leave a mark when run.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from eventedpleg.agent.hostfiles import HostFiles
from eventedpleg.agent.hostread import read_facts
from eventedpleg.agent.linuxhost import LinuxHost
from eventedpleg.core import render
from eventedpleg.core.node.blocks.nodeapi import AgentNode
from eventedpleg.core.node.facts.hostplan import ManagedState, Refusal, plan_host
from eventedpleg_lab.realnode.host import RigHost
from eventedpleg_lab.realnode.rig import RealNode

UNIT_PID, PLANTED_PID = 812, 900


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _process(proc: Path, pid: int, argv: list[str], exe: Path) -> None:
    entry = proc / str(pid)
    entry.mkdir(parents=True)
    (entry / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in argv))
    (entry / "environ").write_bytes(b"PATH=/usr/bin\0")
    (entry / "exe").symlink_to(exe)
    fields = ["S"] + ["0"] * 18 + ["250"]  # field 22 = start time: 250 ticks after boot
    (entry / "stat").write_text(f"{pid} (kubelet) " + " ".join(fields) + " 0 0\n")


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    marks = tmp_path / "marks"
    marks.mkdir()
    main_pid = tmp_path / "main-pid"
    main_pid.write_text(str(UNIT_PID))
    # systemctl answers only the exact question the agent asks.
    _script(
        tmp_path / "bin/systemctl",
        f'[ "$*" = "show --property=MainPID --value kubelet.service" ] || exit 1\ncat {main_pid}\n',
    )
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    real = _script(
        tmp_path / "usr/bin/kubelet",
        f'echo "$@" >> {marks}/unit-kubelet\n'
        'case "$1" in --version) echo "Kubernetes v1.33.2";;\n'
        '  --help) echo "  --feature-gates EventedPLEG=true|false";; esac\n',
    )
    planted = _script(
        tmp_path / "home/mallory/kubelet", f"touch {marks}/PLANTED-RAN\necho Kubernetes v9.9.9\n"
    )
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "stat").write_text("cpu 1 2 3\nbtime 1700000000\n")
    # The planted process has the lower PID (an older scan found it first) and a config of its own.
    _process(proc, 77, ["/home/mallory/kubelet", "--config=/home/mallory/evil.yaml"], planted)
    _process(proc, UNIT_PID, [str(real), "--config=/var/lib/kubelet/config.yaml"], real)
    root = tmp_path / "host"
    (root / "var/lib/kubelet").mkdir(parents=True)
    (root / "var/lib/kubelet/config.yaml").write_text("kind: KubeletConfiguration\n")
    (root / "home/mallory").mkdir(parents=True)
    (root / "home/mallory/evil.yaml").write_text("kind: KubeletConfiguration\nstaticPodPath: /evil\n")
    host = LinuxHost(root, proc=proc, nsenter=False)
    return SimpleNamespace(host=host, root=root, marks=marks, main_pid=main_pid, real=real)


NODE = AgentNode("node-a", kubelet_version="v1.33.0", runtime_version="containerd://2.0.0")


def test_the_kubelet_is_the_units_main_process_and_only_its_binary_runs(world: SimpleNamespace) -> None:
    found = world.host.kubelet_process()
    assert found is not None and found.pid == UNIT_PID and found.exe == str(world.real)
    facts = read_facts(world.host, HostFiles(world.root), NODE, enabling=True)
    assert facts.running_argv == (str(world.real), "--config=/var/lib/kubelet/config.yaml")
    assert facts.config_text == "kind: KubeletConfiguration\n"
    assert str(facts.kubelet_version) == "1.33.2"  # from the unit's binary, not the Node's v1.33.0
    assert facts.kubelet_help is not None and "EventedPLEG" in facts.kubelet_help
    assert (world.marks / "unit-kubelet").read_text().split() == ["--version", "--help"]
    assert not (world.marks / "PLANTED-RAN").exists()


def test_without_a_main_process_the_planted_kubelet_is_not_taken_and_the_agent_refuses(
    world: SimpleNamespace,
) -> None:
    world.main_pid.write_text("0\n")  # kubelet.service not running (or no such unit): systemd says 0
    assert world.host.kubelet_process() is None
    facts = read_facts(world.host, HostFiles(world.root), NODE, enabling=True)
    assert facts.running_argv is None and facts.config_text is None
    assert str(facts.kubelet_version) == "1.33.0"  # the Node's: no binary was run at all
    rendered = render.render(enabled=True, owner="cluster", kubelet_config_mode="DropInOnly")
    refused = plan_host(facts, rendered, ManagedState(), allow_static_pods=False)
    assert isinstance(refused, Refusal)
    assert "kubelet.service has no main process" in refused.reason
    assert not (world.marks / "PLANTED-RAN").exists()
    assert not (world.marks / "unit-kubelet").exists()


def test_a_main_pid_that_has_exited_is_no_kubelet(world: SimpleNamespace) -> None:
    world.main_pid.write_text("4242\n")  # the PID is gone from /proc by the time we look
    assert world.host.kubelet_process() is None


def test_the_rig_answers_the_same_question_from_its_supervisor(tmp_path: Path) -> None:
    # The rig's service manager is its supervisor: its PID for the kubelet is what MainPID is on a node.
    # This test process stands in for the supervised kubelet.
    sup = SimpleNamespace(pid=lambda name: os.getpid() if name == "kubelet" else None)
    rig = SimpleNamespace(layout=SimpleNamespace(host=tmp_path), sup=sup)
    found = RigHost(cast(RealNode, rig)).kubelet_process()
    assert found is not None and found.pid == os.getpid()
    assert found.exe == os.path.realpath(f"/proc/{os.getpid()}/exe")
    sup.pid = lambda name: None
    assert RigHost(cast(RealNode, rig)).kubelet_process() is None
