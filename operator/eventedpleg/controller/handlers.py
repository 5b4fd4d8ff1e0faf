"""kopf handlers: a few lines each; the work is in engine.RolloutEngine (and the parts it wires) and the
pure core.

Run with `eventedpleg operator` (controller/main.py: leader election, metrics, `configure`, then kopf with
a RolloutEngine in its memo); the handlers need that memo, so `kopf run -m` alone does not run them.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from typing import Any

import kopf

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg.controller.engine import RolloutEngine
from eventedpleg.k8s.client import in_cluster_server

NODECONFIGS = (protocol.GROUP, c.VERSION, c.PLURAL)


def configure(settings: kopf.OperatorSettings) -> None:
    """Our finalizer and annotation prefixes under eventedpleg.io; quiet kopf's own Events."""
    settings.persistence.finalizer = c.FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=protocol.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=protocol.GROUP, key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300  # re-watch from the last resourceVersion, never a periodic LIST
    settings.watching.client_timeout = 330
    # Every other kopf request (finalizers, progress annotations) gets a timeout too: a hung API server
    # must not freeze a handler for ever.
    settings.networking.connect_timeout = 5
    settings.networking.request_timeout = 30


def _engine(memo: kopf.Memo) -> RolloutEngine:
    engine: RolloutEngine = memo["engine"]
    return engine


@kopf.on.cleanup()
def release_stop_flag(memo: kopf.Memo, **_: Any) -> None:
    """kopf waits for a threading stop-flag in the event loop's default executor, and closing the loop
    joins that executor: after SIGTERM the process would hang until SIGKILL (seen: >60 s, Lease never
    released) unless the flag is set once kopf is stopping for any other reason."""
    stop: threading.Event | None = memo.get("stop")
    if stop is not None:
        stop.set()


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """$KUBECONFIG when set (out of cluster, tests), else the pod's ServiceAccount at the address the
    kubelet gives the pod. kopf's default reads the kubernetes client's kubeconfig path, which that
    library fixes at import time."""
    if os.environ.get("KUBECONFIG"):
        return kopf.login_with_kubeconfig(**kwargs)
    info = kopf.login_with_service_account(**kwargs)
    return dataclasses.replace(info, server=in_cluster_server()) if info else None


@kopf.on.event(*NODECONFIGS)
async def nodeconfig_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    _engine(memo).nodeconfig_event(event.get("type"), event["object"])


@kopf.daemon(*NODECONFIGS, cancellation_timeout=30.0)
async def rollout(name: str, stopped: kopf.DaemonStopped, memo: kopf.Memo, **_: Any) -> None:
    await _engine(memo).run_rollout(name, stopped)


@kopf.on.delete(*NODECONFIGS)
async def revert_on_delete(name: str, memo: kopf.Memo, **_: Any) -> None:
    """Keep the finalizer until every node we touched is reverted (onDelete: Revert) or let go (Keep).
    Waits inside the handler (logging at INFO) instead of raising kopf.TemporaryError every 2 s, which
    kopf logs at ERROR; on shutdown kopf cancels the handler and the next leader resumes the deletion."""
    await _engine(memo).until_finalized(name)
