"""Stand-in agents that follow the node protocol (protocol.py) without a host: for a node in Applying with
desired != current, after `apply_seconds` write current-config and Done (or what `behaviour` says).

For the rollout benchmark (thousands of nodes: one watch for all of them, one timer thread, a small
pool for the writes) and for operator tests that are about the operator, not the agent. The real agent
and its verification have their own tests (tests/agent, tests/cluster/test_agent.py).
"""

from __future__ import annotations

import heapq
import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from eventedpleg.core import hostcheck
from eventedpleg.core.node.phases.agentdecide import AgentAction, next_action
from eventedpleg.k8s import nodes
from eventedpleg.k8s.errors import ApiError
from eventedpleg.k8s.informer import NodeInformer
from eventedpleg.protocol import (
    ANN_CURRENT,
    ANN_DESIRED,
    ANN_EVIDENCE,
    ANN_HOST_CHECK,
    ANN_REASON,
    ANN_STATE,
    ANN_STATE_SINCE,
    format_time,
)

log = logging.getLogger(__name__)
WRITE_ATTEMPTS = 8  # a report that fails (timeout, 5xx under load) is retried, as the real agent's is
Behaviour = Callable[[str], str]  # node name -> "Done" | "RolledBack" | "Silent"


class ProtocolAgents:
    def __init__(
        self,
        api: Any,
        *,
        label_selector: str | None,
        apply_seconds: float = 0.5,
        behaviour: Behaviour | None = None,
        workers: int = 8,
    ) -> None:
        self.api, self.selector, self.apply_seconds = api, label_selector, apply_seconds
        self.behaviour = behaviour or (lambda _: "Done")
        self.applied: dict[str, int] = {}  # node -> how many times it was applied
        self.done_at: dict[str, float] = {}  # node -> wall time of the last Done write
        self._due: list[tuple[float, str, str]] = []  # (monotonic due, node, desired hash)
        self._scheduled: set[str] = set()  # nodes with an apply pending
        self._checking: set[str] = set()  # nodes whose host check is being published
        self._written: dict[
            str, int
        ] = {}  # node -> resourceVersion of our last report (older events are stale)
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(workers, "protocol-agent")
        # One watch for all nodes: the operator's informer, so the stand-ins see what the operator sees.
        self._informer = NodeInformer(api, self._event, lambda _: None, self._stop, label_selector)
        self._threads = [threading.Thread(target=self._timer, name="protocol-timer", daemon=True)]

    def __enter__(self) -> ProtocolAgents:
        self._threads[0].start()
        self._threads.append(self._informer.start())
        return self

    def __exit__(self, *exc: object) -> None:
        self._informer.close()  # sets _stop too
        with self._lock:
            self._lock.notify_all()
        for thread in self._threads:
            thread.join(10)
        self._pool.shutdown(wait=True)

    def _see(self, node: dict[str, Any]) -> None:
        name = str(node["metadata"]["name"])
        ann = node["metadata"].get("annotations") or {}
        desired = ann.get(ANN_DESIRED, "")
        if next_action(ann) is not AgentAction.APPLY:  # the real agent's rule, re-apply requests included
            return
        with self._lock:
            if name in self._scheduled or _rv(node) <= self._written.get(name, 0):
                return
            self._scheduled.add(name)
            heapq.heappush(self._due, (time.monotonic() + self.apply_seconds, name, desired))
            self._lock.notify()

    def _event(self, kind: str, node: dict[str, Any]) -> None:
        if kind != "DELETED":
            self._host_check(node)
            self._see(node)

    def _host_check(self, node: dict[str, Any]) -> None:
        """As the real agent at its start (and hourly): publish a host check, so the operator knows a live
        agent is there (core.hostcheck.absence); nothing refused. Once per node and stand-in lifetime, or
        again when it is gone or stale."""
        name = str(node["metadata"]["name"])
        ann = node["metadata"].get("annotations") or {}
        if not hostcheck.absence(ann.get(ANN_HOST_CHECK), datetime.now(UTC)):
            return
        with self._lock:
            if name in self._checking:
                return
            self._checking.add(name)

        def publish() -> None:
            check = hostcheck.HostCheck(datetime.now(UTC), {}, hostcheck.DEFAULT_EVERY)
            self._report(name, {ANN_HOST_CHECK: check.to_json()})
            with self._lock:
                self._checking.discard(name)

        self._pool.submit(publish)

    def _timer(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                while not self._stop.is_set() and (not self._due or self._due[0][0] > time.monotonic()):
                    self._lock.wait(timeout=(self._due[0][0] - time.monotonic()) if self._due else 1.0)
                if self._stop.is_set():
                    return
                _, name, desired = heapq.heappop(self._due)
            self._pool.submit(self._finish, name, desired)

    def _finish(self, name: str, desired: str) -> None:
        verdict = self.behaviour(name)
        if verdict == "Silent":
            return  # stays scheduled: a silent agent never answers
        marks: dict[str, str | None] = {
            ANN_STATE: verdict,
            ANN_STATE_SINCE: format_time(datetime.now(UTC)),
            ANN_EVIDENCE: json.dumps(
                {"result": "pass" if verdict == "Done" else "fail", "agent": "protocol"}
            ),
            ANN_REASON: "verified"
            if verdict == "Done"
            else "kubelet did not become healthy; previous files restored",
        }
        if verdict == "Done":
            marks[ANN_CURRENT] = desired
        written = self._report(name, marks)
        if written is None:
            with self._lock:
                self._scheduled.discard(name)
            return
        with self._lock:
            self._written[name] = _rv(written)
            self._scheduled.discard(name)
        self.applied[name] = self.applied.get(name, 0) + 1
        self.done_at[name] = time.time()

    def _report(self, name: str, marks: dict[str, str | None]) -> dict[str, Any] | None:
        for attempt in range(WRITE_ATTEMPTS):
            try:
                return nodes.patch_node(self.api, name, nodes.node_patch(annotations=marks))
            except ApiError as exc:
                log.warning("protocol agent %s (attempt %d): %s", name, attempt + 1, exc)
                if self._stop.wait(min(0.25 * 2**attempt, 5.0)):
                    break
        return None


def _rv(node: dict[str, Any]) -> int:
    try:
        return int(node["metadata"].get("resourceVersion", 0))
    except (TypeError, ValueError):
        return 0
