"""Follow one NodeConfig and every Node, for `eventedpleg status --watch`: two informers
(eventedpleg.k8s.informer: a LIST in pages, then a WATCH from its resourceVersion), so the CLI redraws when
something changed and asks the API server nothing in between."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg.k8s.client import PAGE
from eventedpleg.k8s.informer import NodeInformer

SETTLE_SECONDS = 0.2  # events that arrive this close together make one redraw (a step patches a node twice)


@dataclass(frozen=True)
class Seen:
    """The NodeConfig (None once it is gone) and every Node, as the watches last saw them."""

    nodeconfig: dict[str, Any] | None
    nodes: tuple[dict[str, Any], ...]


def follow(api: client.ApiClient, name: str, stop: threading.Event, *, page: int = PAGE) -> Iterator[Seen]:
    """What the API server holds now, then again after each change, until `stop` is set."""
    lock = threading.Lock()
    changed: queue.Queue[None] = queue.Queue()
    nodes: dict[str, dict[str, Any]] = {}
    found: list[dict[str, Any] | None] = [None]
    synced = {"nodes": threading.Event(), "nodeconfig": threading.Event()}

    def on_node(kind: str, body: dict[str, Any]) -> None:
        with lock:
            if kind == "DELETED":
                nodes.pop(str(body["metadata"]["name"]), None)
            else:
                nodes[str(body["metadata"]["name"])] = body
        changed.put(None)

    def on_nodes_listed(names: set[str]) -> None:
        with lock:
            for gone in set(nodes) - names:
                del nodes[gone]
        synced["nodes"].set()
        changed.put(None)

    def on_nodeconfig(kind: str, body: dict[str, Any]) -> None:
        with lock:
            found[0] = None if kind == "DELETED" else body
        changed.put(None)

    def on_nodeconfig_listed(names: set[str]) -> None:
        if name not in names:
            with lock:
                found[0] = None
        synced["nodeconfig"].set()
        changed.put(None)

    informers = [
        NodeInformer(api, on_node, on_nodes_listed, stop=stop, page=page),
        NodeInformer(
            api,
            on_nodeconfig,
            on_nodeconfig_listed,
            stop=stop,
            path=f"/apis/{protocol.GROUP}/{c.VERSION}/{c.PLURAL}",
            field_selector=f"metadata.name={name}",
        ),
    ]
    for informer in informers:
        informer.start()
    try:
        while not stop.is_set():
            try:
                changed.get(timeout=SETTLE_SECONDS)
            except queue.Empty:
                continue
            stop.wait(SETTLE_SECONDS)
            while not changed.empty():
                changed.get_nowait()
            if all(event.is_set() for event in synced.values()):
                with lock:
                    seen = Seen(found[0], tuple(nodes.values()))
                yield seen
    finally:
        for informer in informers:
            informer.close()
