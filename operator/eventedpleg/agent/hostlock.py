"""One agent acts on a host at a time. The DaemonSet rolls with maxSurge: a new agent pod starts beside the
old one, and the old one is deleted only once the new one is Ready. So an image that cannot be pulled (a
registry down during `helm upgrade`) leaves the old agent running. While both run, the new one waits here,
Ready, for the old one's lock (an flock on the host, released by the kernel when its process exits),
before it reads or writes anything.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

# /run is the host's tmpfs: the lock file goes away at reboot, and its lock with the process that held it.
LOCK_FILE = "run/eventedpleg/agent.lock"


@contextlib.contextmanager
def held(
    root: Path, *, stop: Callable[[], bool], waiting: Callable[[], None], poll_seconds: float = 1.0
) -> Iterator[bool]:
    """Hold the host's agent lock inside the block (True), or give up when `stop()` (False). `waiting()` is
    called each poll while another agent holds it (the caller's heartbeat: a waiting agent is healthy)."""
    path = root / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    told = False
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not told:
                    told = True
                    logging.getLogger(__name__).info("another agent holds %s: waiting for it to exit", path)
                if stop():
                    yield False
                    return
                waiting()
                time.sleep(poll_seconds)
        yield True
    finally:
        os.close(fd)
