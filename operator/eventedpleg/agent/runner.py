"""The agent's main loop: watch our own Node, act on it, and check a Done node every so often."""

from __future__ import annotations

import logging
from collections.abc import Callable

from eventedpleg.agent.agent import Agent, drive
from eventedpleg.agent.health import LOOP
from eventedpleg.core.health import Heartbeats

log = logging.getLogger(__name__)
ERROR_BACKOFF_SECONDS = 5.0


def run(
    agent: Agent, *, stop: Callable[[], bool], once: bool = False, beats: Heartbeats | None = None
) -> None:
    """Until `stop()`: read the Node, act, watch it (fieldSelector metadata.name) for check_interval seconds,
    then run the after-Done check. API errors are logged and retried after a pause, never fatal.

    `beats` records progress for the health endpoint: every pass, watch event and retry, and every wait
    a step asks for (a verification window is progress; a call that never returns is not)."""
    clock = agent.host.clock

    def beat() -> None:
        if beats is not None:
            beats.beat(LOOP)

    def sleep(seconds: float) -> None:
        beat()
        clock.sleep(seconds)
        beat()

    interval = agent.settings.check_interval_seconds
    while not stop():
        beat()
        try:
            node = agent.api.get_node(agent.node)
            if node is None:
                log.warning("node %s not found; waiting", agent.node)
                sleep(ERROR_BACKOFF_SECONDS)
                continue
            drive(agent.on_node(node), sleep)
            if once:
                drive(agent.check(), sleep)
                return
            last_check = clock.now()
            for seen in agent.api.watch_node(
                agent.node, resource_version=node.resource_version, timeout_seconds=max(1, int(interval))
            ):
                if stop():
                    return
                beat()
                drive(agent.on_node(seen), sleep)
                if (clock.now() - last_check).total_seconds() >= interval:
                    drive(agent.check(), sleep)
                    last_check = clock.now()
            drive(agent.check(), sleep)
        except Exception:  # a bad moment of the API server must not kill the agent
            log.exception("agent loop error; retrying in %.0fs", ERROR_BACKOFF_SECONDS)
            sleep(ERROR_BACKOFF_SECONDS)
