"""`eventedpleg cluster up/status/down` as a user runs them: separate processes, PIDs recorded, stopped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eventedpleg_lab.localcluster.cluster import kubectl_path, remove_state

pytestmark = pytest.mark.cluster


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "eventedpleg", "cluster", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_up_survives_the_cli_and_down_stops_exactly_its_pids(tmp_path: Path) -> None:
    directory = tmp_path / "cl"
    up = cli("up", "--nodes", "3", "--dir", str(directory))
    try:
        assert up.returncode == 0, up.stderr
        kubeconfig = directory / "admin.kubeconfig"
        assert f"kubeconfig: {kubeconfig}" in up.stdout
        assert f"export KUBECONFIG={kubeconfig}" in up.stdout

        # The `up` process has exited; the control plane it started keeps running.
        status = cli("status", "--dir", str(directory))
        assert status.returncode == 0, status.stdout
        pids = [p["pid"] for p in json.loads((directory / "state.json").read_text())["processes"]]
        assert len(pids) == 5
        assert all(alive(pid) for pid in pids)

        nodes = subprocess.run(
            [kubectl_path(), f"--kubeconfig={kubeconfig}", "get", "nodes", "--no-headers"],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "KUBECONFIG": ""},
        ).stdout.splitlines()
        assert len(nodes) == 3
        assert all(line.split()[1] == "Ready" for line in nodes)
        assert sum("control-plane" in line for line in nodes) == 1

        again = cli("up", "--dir", str(directory))
        assert again.returncode != 0
        assert "already running" in again.stderr
    finally:
        down = cli("down", "--dir", str(directory))
    assert down.returncode == 0, down.stderr
    assert "kube-apiserver" in down.stdout
    assert not any(alive(pid) for pid in pids)
    assert not directory.exists()
    assert cli("status", "--dir", str(directory)).returncode != 0


def test_down_removes_only_what_the_cluster_wrote(tmp_path: Path) -> None:
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "ca.key").write_text("x")
    (tmp_path / "admin.kubeconfig").write_text("x")
    (tmp_path / "notes.txt").write_text("mine")
    remove_state(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
