"""`eventedpleg operator`: probes and metrics, leader election on a Lease, the node informer, then kopf.

Why a Lease rather than kopf peering: peering pauses operators by priority but two replicas of one
Deployment share a priority, and kopf then only warns; a Lease gives exactly one active replica, a
standby that takes over within the lease duration, and `kubectl get lease` shows who leads.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from dataclasses import dataclass

import kopf

from eventedpleg.controller import handlers
from eventedpleg.controller.metrics import Metrics
from eventedpleg.controller.runtime import STEP_THREADS, Runtime
from eventedpleg.k8s.client import api_client
from eventedpleg.k8s.events import EventRecorder
from eventedpleg.k8s.informer import NodeInformer
from eventedpleg.k8s.lease import LeaseConfig, LeaseLock

log = logging.getLogger(__name__)
LEASE_NAME = "eventedpleg-operator"


@dataclass(frozen=True)
class OperatorOptions:
    namespace: str
    kubeconfig: str | None = None
    metrics_port: int = 8080
    leader_elect: bool = True
    identity: str = ""
    allow_force_delete: bool = False
    lease_seconds: int = 15
    renew_seconds: float = 5.0


def _renew_until_lost(
    lock: LeaseLock, stop: threading.Event, lost: threading.Event, metrics: Metrics
) -> None:
    """Renew the Lease; when renewals fail for a whole lease duration, stop kopf (client-go does the same)."""
    last_ok = time.monotonic()
    while not stop.wait(lock.config.renew_seconds):
        if lock.try_acquire_or_renew():
            last_ok = time.monotonic()
        elif time.monotonic() - last_ok > lock.config.duration_seconds:
            log.error("lost the leader Lease %s/%s; stopping", lock.config.namespace, lock.config.name)
            metrics.leader.set(0)
            metrics.ready.clear()
            lost.set()
            stop.set()
            return


def run(options: OperatorOptions) -> int:
    """Run until stopped; returns the process exit code (1 when leadership was lost)."""
    if options.kubeconfig:
        os.environ["KUBECONFIG"] = options.kubeconfig  # kopf's own login reads it
    api = api_client(options.kubeconfig, pool_size=STEP_THREADS + 8)  # + informer, Events, status, Lease
    identity = options.identity or os.environ.get("POD_NAME") or os.uname().nodename
    # kopf logs every handler call at INFO: one line per node event would drown the log on a big cluster.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    metrics = Metrics()
    server = metrics.serve(options.metrics_port)
    stop, lost = threading.Event(), threading.Event()
    # Until kopf installs its own handlers, SIGTERM (a pod deleted as it starts) must still end us through
    # `finally` (Lease released), not by the default action; kopf sees the flag and stops at once.
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    lock: LeaseLock | None = None
    informer: NodeInformer | None = None
    try:
        if options.leader_elect:
            lock = LeaseLock(
                api,
                LeaseConfig(
                    options.namespace, LEASE_NAME, identity, options.lease_seconds, options.renew_seconds
                ),
            )
            log.info("waiting for the leader Lease %s/%s as %s", options.namespace, LEASE_NAME, identity)
            while not lock.try_acquire_or_renew():
                if stop.wait(options.renew_seconds):
                    return 0  # SIGTERM while standing by
            log.info("became leader")
            threading.Thread(
                target=_renew_until_lost, args=(lock, stop, lost, metrics), name="lease", daemon=True
            ).start()
        metrics.leader.set(1)
        metrics.ready.set()
        recorder = EventRecorder(api, "eventedpleg-operator", identity, background=True)
        runtime = Runtime(
            api=api,
            namespace=options.namespace,
            recorder=recorder,
            metrics=metrics,
            allow_force_delete=options.allow_force_delete,
        )
        informer = NodeInformer(api, runtime.node_event, runtime.node_list_done)
        informer.start()
        settings = kopf.OperatorSettings()
        handlers.configure(settings)
        kopf.run(
            clusterwide=True,
            standalone=True,
            settings=settings,
            memo=kopf.Memo(runtime=runtime, stop=stop),
            stop_flag=stop,
        )
    finally:
        stop.set()
        if informer is not None:
            informer.close()
        metrics.ready.clear()
        if lock is not None and not lost.is_set():
            lock.release()
        server.shutdown()
    return 1 if lost.is_set() else 0
