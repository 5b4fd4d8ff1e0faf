"""The rig's journal follow (eventedpleg_lab.realnode.host.RigHost.journal_after): the kubelet's log file
read on from a byte offset in chunks, a line still being written left for the next read."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from eventedpleg_lab.realnode import host as rh
from eventedpleg_lab.realnode import layout as lay
from eventedpleg_lab.realnode.rig import KUBELET

MATCH = "EventedPLEG is not healthy"


class _Layout:
    def __init__(self, root: Path) -> None:
        self.host = root

    def at(self, node_path: str) -> Path:
        return self.host / node_path.lstrip("/")


class _Rig:
    def __init__(self, root: Path) -> None:
        self.layout = _Layout(root)


def test_follows_from_the_offset_in_chunks(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(rh, "CHUNK", 64)  # many chunks, lines cut across them
    host = rh.RigHost(cast(Any, _Rig(tmp_path)))
    log = tmp_path / lay.KUBELET_LOG.lstrip("/")
    log.parent.mkdir(parents=True)
    log.write_text("")
    since = datetime.now(UTC)
    first = host.journal_after(KUBELET, "", since, MATCH)
    assert first.lines == ()
    noise = "I1128 13:15:54.855433 7355 pod_container_deletor.go:114] noise noise noise noise\n"
    wedge = f'E1128 13:15:54.855580 7355 kubelet.go:2646] "Skipping pod synchronization" err="{MATCH}"\n'
    with log.open("a") as handle:
        handle.write(noise * 5 + wedge + noise * 3 + wedge[:30])  # the last line not finished yet
    chunk = host.journal_after(KUBELET, first.cursor, since, MATCH)
    assert chunk.lines == (wedge.rstrip("\n"),)
    with log.open("a") as handle:
        handle.write(wedge[30:])
    rest = host.journal_after(KUBELET, chunk.cursor, since, MATCH)
    assert rest.lines == (wedge.rstrip("\n"),)  # the finished line, read once
    assert int(rest.cursor) == log.stat().st_size
    assert host.journal_after(KUBELET, rest.cursor, since, MATCH).lines == ()
