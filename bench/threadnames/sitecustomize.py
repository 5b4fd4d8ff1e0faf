"""Loaded at start-up by the operator process that bench/rollout.py starts (it puts this folder on
PYTHONPATH): once a second, writes which OS thread is which Python thread to $EVENTEDPLEG_BENCH_THREADS,
so the bench can split the process's CPU (/proc/<pid>/task/<tid>/stat) by what each thread does; and,
beside it (`<that path>.gc`), how many cyclic garbage collections of each generation ran and the CPU
they took (gc.callbacks, timed with the collecting thread's CPU clock). Bench tooling only: nothing of
the product imports it."""

import gc
import json
import os
import threading
import time
from pathlib import Path

_PATH = os.environ.get("EVENTEDPLEG_BENCH_THREADS")
_COLLECTIONS = [0, 0, 0]
_CPU_S = [0.0, 0.0, 0.0]
_started: list[float] = [0.0]


def _gc_timer(phase: str, info: dict[str, int]) -> None:
    # The collector holds the GIL for the whole collection, so start and stop come in pairs.
    if phase == "start":
        _started[0] = time.thread_time()
        return
    generation = info["generation"]
    _COLLECTIONS[generation] += 1
    _CPU_S[generation] += time.thread_time() - _started[0]


def _write(path: str, doc: object) -> None:
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps(doc))
    tmp.replace(path)


def _write_names(path: str) -> None:
    stop = threading.Event()
    while not stop.wait(1.0):
        names = {thread.native_id: thread.name for thread in threading.enumerate() if thread.native_id}
        _write(path, names)
        _write(f"{path}.gc", {"collections": _COLLECTIONS, "cpu_s": _CPU_S})


if _PATH:
    gc.callbacks.append(_gc_timer)
    threading.Thread(target=_write_names, args=(_PATH,), name="bench-threadnames", daemon=True).start()
