"""A Node informer for the operator (and, with `path`, any list: the CLI's `status --watch` follows its
NodeConfig with one): LIST in pages, then WATCH from the list's resourceVersion; LIST again
only when the watch is gone (410 Gone) or broken.

Each Node goes to `on_event` as a plain dict and is dropped there: the caller keeps what it plans on (a
NodeView). Memory is one page, never one dict per node, and there is no per-object machinery: at 5000
nodes, kopf's per-object watch (a worker, a queue and a memory per node, one LIST for all) held ~100 MiB
more than this (docs/benchmarks.md). The client's model round trip (JSON -> V1Node -> dict) is skipped.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from eventedpleg.k8s.client import PAGE, Watch, list_page, open_watch
from eventedpleg.k8s.errors import ApiError, from_api_exception

log = logging.getLogger(__name__)
NODES = "/api/v1/nodes"
WATCH_SECONDS = 300  # the server ends each watch after this; we re-watch from the last resourceVersion
RETRY_SECONDS = (0.5, 1, 2, 5, 10)  # back-off after failures, capped at the last


@dataclass
class NodeInformer:
    api: client.ApiClient
    on_event: Callable[[str, dict[str, Any]], None]  # ("ADDED" | "MODIFIED" | "DELETED", node)
    on_synced: Callable[[set[str]], None]  # after each complete LIST: the names that exist now
    stop: threading.Event = field(default_factory=threading.Event)
    label_selector: str | None = None
    page: int = PAGE
    path: str = NODES  # the collection to list and watch
    field_selector: str | None = None
    watch_seconds: int = WATCH_SECONDS
    lists: int = 0  # complete LISTs so far: 1 unless the watch was lost
    # Called whenever the loop makes progress (a page, an event, a bookmark, a new watch, a retry):
    # the operator's liveness probe fails when it stops being called.
    on_progress: Callable[[], None] = lambda: None
    _stream: Watch | None = None

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name="node-informer", daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        """Stop, and end a watch that is waiting for the next event."""
        self.stop.set()
        # Shut the socket down rather than close the response: close() waits for the reading thread's
        # buffer lock, i.e. for the next event (up to a minute on a quiet cluster).
        stream = self._stream
        if stream is not None:
            stream.shutdown()

    def run(self) -> None:
        failures = 0
        while not self.stop.is_set():
            self.on_progress()
            try:
                version = self._list()
                failures = 0
                while version and not self.stop.is_set():
                    version = self._watch(version)
            except (ApiError, HTTPError, OSError, ValueError) as exc:
                if self.stop.is_set():
                    return
                delay = RETRY_SECONDS[min(failures, len(RETRY_SECONDS) - 1)]
                failures += 1
                log.warning("node informer: %s; listing again in %ss", exc, delay)
                self.stop.wait(delay)

    def _selectors(self) -> dict[str, str]:
        query = {"labelSelector": self.label_selector, "fieldSelector": self.field_selector}
        return {key: value for key, value in query.items() if value}

    def _list(self) -> str:
        names, token = set[str](), None
        while True:
            body = list_page(self.api, self.path, self._selectors(), self.page, token)
            self.on_progress()
            for item in body.get("items", []):
                names.add(str(item["metadata"]["name"]))
                self.on_event("ADDED", item)
            meta = body.get("metadata") or {}
            token = meta.get("continue")
            if not token:  # every page carries the first page's resourceVersion: watch from there
                self.lists += 1
                self.on_synced(names)
                return str(meta.get("resourceVersion", ""))

    def _watch(self, version: str) -> str:
        """One watch; returns the resourceVersion to watch from next, or "" to LIST again (410)."""
        self.on_progress()
        query = {"watch": "true", "resourceVersion": version, "allowWatchBookmarks": "true"}
        query["timeoutSeconds"] = str(self.watch_seconds)
        query.update(self._selectors())
        try:
            self._stream = open_watch(self.api, self.path, query, self.watch_seconds + 30)
        except ApiException as exc:
            if exc.status == 410:
                return ""
            raise from_api_exception(exc) from exc
        try:
            for line in self._stream.lines:
                if not line:
                    continue
                event = json.loads(line)
                kind, obj = str(event.get("type", "")), event.get("object") or {}
                if kind == "ERROR":  # a Status: 410 when our version is too old for the watch cache
                    if obj.get("code") == 410:
                        return ""
                    raise ApiError(int(obj.get("code") or 0), str(obj.get("reason", "")), str(obj))
                version = str((obj.get("metadata") or {}).get("resourceVersion", version))
                if kind != "BOOKMARK":
                    self.on_event(kind, obj)
                self.on_progress()
        except Exception:
            if self.stop.is_set():
                return ""  # close() pulled the stream from under the read: any error is the way out
            raise
        finally:
            stream, self._stream = self._stream, None
            stream.close()
        return version
