"""Two agents on one host while the DaemonSet surges: the new one waits, healthy, for the old one's host
lock, and both answer on the node's health port. Real flock(2) and real sockets."""

from __future__ import annotations

import socket
import threading
import urllib.request
from pathlib import Path

from eventedpleg.agent import health, hostlock
from eventedpleg.core.health import Heartbeats
from tests.healthprobe import FakeMonotonic


def test_a_second_agent_waits_for_the_first_and_takes_over_when_it_is_gone(tmp_path: Path) -> None:
    order: list[str] = []
    released = threading.Event()
    waits = 0

    def waiting() -> None:
        nonlocal waits
        waits += 1
        if waits == 3:
            order.append("old exits")
            released.set()

    with hostlock.held(tmp_path, stop=lambda: False, waiting=lambda: None, poll_seconds=0.01) as old:
        assert old
        result: list[bool] = []

        def new_agent() -> None:
            with hostlock.held(tmp_path, stop=lambda: False, waiting=waiting, poll_seconds=0.01) as new:
                order.append("new acts")
                result.append(new)

        thread = threading.Thread(target=new_agent)
        thread.start()
        assert released.wait(5)
        assert result == []  # still waiting while the old one holds the lock
    thread.join(5)
    assert result == [True]
    assert order == ["old exits", "new acts"]
    assert (tmp_path / hostlock.LOCK_FILE).is_file()


def test_a_waiting_agent_stops_on_its_signal_without_the_lock(tmp_path: Path) -> None:
    polls: list[int] = []
    with hostlock.held(tmp_path, stop=lambda: False, waiting=lambda: None) as old:
        assert old
        with hostlock.held(
            tmp_path, stop=lambda: len(polls) >= 2, waiting=lambda: polls.append(1), poll_seconds=0.01
        ) as new:
            assert new is False
    assert len(polls) == 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_old_and_the_new_agent_both_listen_on_the_health_port_and_the_waiting_one_is_healthy(
    tmp_path: Path,
) -> None:
    port = _free_port()
    old_beats, new_beats = Heartbeats(FakeMonotonic(10.0)), Heartbeats(FakeMonotonic(10.0))
    old_beats.beat(health.LOOP)
    old = health.serve(old_beats, 180, port, host="127.0.0.1")
    new = health.serve(new_beats, 180, port, host="127.0.0.1")  # would raise EADDRINUSE without sharing
    try:
        with (
            hostlock.held(tmp_path, stop=lambda: False, waiting=lambda: None),
            hostlock.held(
                tmp_path,
                stop=lambda: health.LOOP in new_beats.snapshot(),
                waiting=lambda: new_beats.beat(health.LOOP),
                poll_seconds=0.01,
            ) as ours,
        ):
            assert ours is False
        for _ in range(6):  # whichever process the kernel hands the connection to, it is healthy
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
                assert answer.status == 200
    finally:
        old.shutdown()
        new.shutdown()
