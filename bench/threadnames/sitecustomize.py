"""Loaded at start-up by the operator process that bench/rollout.py starts (it puts this folder on
PYTHONPATH): once a second, writes which OS thread is which Python thread to $EVENTEDPLEG_BENCH_THREADS,
so the bench can split the process's CPU (/proc/<pid>/task/<tid>/stat) by what each thread does.
Bench tooling only: nothing of the product imports it."""

import json
import os
import threading
from pathlib import Path

_PATH = os.environ.get("EVENTEDPLEG_BENCH_THREADS")


def _write_names(path: str) -> None:
    stop = threading.Event()
    while not stop.wait(1.0):
        names = {thread.native_id: thread.name for thread in threading.enumerate() if thread.native_id}
        tmp = Path(f"{path}.tmp")
        tmp.write_text(json.dumps(names))
        tmp.replace(path)


if _PATH:
    threading.Thread(target=_write_names, args=(_PATH,), name="bench-threadnames", daemon=True).start()
