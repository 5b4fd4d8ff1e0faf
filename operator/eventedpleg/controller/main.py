"""`eventedpleg operator`: probes and metrics, the node informer, leader election on a Lease, then kopf.

Why a Lease rather than kopf peering: peering pauses operators by priority but two replicas of one
Deployment share a priority, and kopf then only warns; a Lease gives exactly one active replica, a
standby that takes over within the lease duration, and `kubectl get lease` shows who leads.

The standby keeps its node cache warm (the informer runs on every replica): readiness means the cache
is synced, so both replicas are Ready, and a new leader plans at once. A leader that cannot renew within
the renew deadline starts no more steps from that instant (the step gate reads the deadline, not the
renew thread) and exits; the standby may take over only after the longer lease duration.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import signal
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kopf

from eventedpleg import constants as c
from eventedpleg.controller import handlers
from eventedpleg.controller.engine import STEP_THREADS, RolloutEngine
from eventedpleg.controller.metrics import OperatorMetrics
from eventedpleg.controller.probes import INFORMER, Thresholds, liveness
from eventedpleg.controller.wiring import always, build_engine
from eventedpleg.core.health import Heartbeats
from eventedpleg.core.leaderelection import ElectionTimings
from eventedpleg.k8s.client import api_client, get_json
from eventedpleg.k8s.events import EventRecorder
from eventedpleg.k8s.informer import NodeInformer
from eventedpleg.k8s.lease import LeaseConfig, LeaseLock
from eventedpleg.k8s.nodes import AGENT_POD_SELECTOR, agent_pods_path

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OperatorOptions:
    namespace: str
    kubeconfig: str | None = None
    context: str | None = None
    metrics_port: int = 8080
    leader_elect: bool = True
    identity: str = ""
    election: ElectionTimings = field(default_factory=ElectionTimings)
    health: Thresholds = field(default_factory=Thresholds)
    allow_force_delete: bool = False
    list_namespaces: bool = True  # RBAC grants `namespaces list` (drain.rules[].namespaceSelector)
    agent_namespace: str = ""  # where the agent DaemonSet's pods are watched ("": every namespace)


def _renew_until_lost(
    lock: LeaseLock, stop: threading.Event, lost: threading.Event, metrics: OperatorMetrics
) -> None:
    """Renew every retry period; once the renew deadline passed without a successful renew, step down
    and stop kopf for good (client-go's OnStoppedLeading; the pod restarts as a candidate)."""
    while not stop.wait(lock.timings.retry_period):
        if lock.try_acquire_or_renew():
            continue
        if not lock.leading():
            lock.step_down()
            log.error(
                "could not renew the leader Lease %s/%s within %ss; stopped leading",
                lock.config.namespace, lock.config.name, lock.timings.renew_deadline,
            )  # fmt: skip
            metrics.leader.set(0)
            lost.set()
            stop.set()
            return


def select_context(context: str) -> None:
    """Make `context` the current one for kopf's login, which reads $KUBECONFIG and uses its current
    context: a file that sets only current-context goes first, and the first file to set it wins (kubectl's
    merge rule, which kopf and the kubernetes client follow too)."""
    files = os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    chosen = Path(tempfile.mkdtemp(prefix="eventedpleg-")) / "context"
    chosen.write_text(json.dumps({"apiVersion": "v1", "kind": "Config", "current-context": context}))
    os.environ["KUBECONFIG"] = os.pathsep.join([str(chosen), files])


def _agent_pod_informer(api: Any, engine: RolloutEngine, namespace: str) -> NodeInformer:
    """The agent pods' readiness, so a crash-looping or stuck agent counts as none (core.rollout.agentpod)
    long before its host check goes stale. One more watch, of one pod per node, each kept as a small
    summary: at 5000 nodes a few events a minute and well under a MiB. Planning does not wait for its
    LIST: a node whose pod is not known yet is judged by its host check alone, as without it."""
    return NodeInformer(
        api,
        engine.agent_pod_event,
        engine.agent_pods_listed,
        path=agent_pods_path(namespace),
        label_selector=AGENT_POD_SELECTOR,
    )


def run(options: OperatorOptions) -> int:
    """Run until stopped; returns the process exit code (1 when leadership was lost)."""
    if options.kubeconfig:
        os.environ["KUBECONFIG"] = options.kubeconfig  # kopf's own login reads it
    if options.context:
        select_context(options.context)
    api = api_client(options.kubeconfig, context=options.context, pool_size=STEP_THREADS + 8)
    # Fail fast on a server we cannot reach or that refuses our credentials: one line and an exit code
    # (cli/failures.py) instead of an informer and a Lease loop retrying in silence for ever.
    get_json(api, "/version")
    identity = options.identity or os.environ.get("POD_NAME") or os.uname().nodename
    # kopf logs every handler call at INFO: one line per node event would drown the log on a big cluster.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    beats = Heartbeats(time.monotonic)
    metrics = OperatorMetrics(live=liveness(beats, options.health))
    server = metrics.serve(options.metrics_port)
    stop, lost = threading.Event(), threading.Event()
    # Until kopf installs its own handlers, SIGTERM (a pod deleted as it starts) must still end us through
    # `finally` (Lease released), not by the default action; kopf sees the flag and stops at once.
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    lock: LeaseLock | None = None
    informers: list[NodeInformer] = []
    try:
        recorder = EventRecorder(api, "eventedpleg-operator", identity, background=True)
        election = (
            LeaseLock(api, LeaseConfig(options.namespace, c.LEASE_NAME, identity, options.election))
            if options.leader_elect
            else None
        )
        engine = build_engine(
            api,
            options.namespace,
            recorder,
            metrics,
            beats=beats,
            # a leader that cannot renew starts no step
            may_start=election.leading if election is not None else always,
            allow_force_delete=options.allow_force_delete,
            list_namespaces=options.list_namespaces,
        )

        def synced(names: set[str]) -> None:
            engine.node_list_done(names)
            metrics.ready.set()

        informers = [
            NodeInformer(api, engine.node_event, synced, on_progress=lambda: beats.beat(INFORMER)),
            _agent_pod_informer(api, engine, options.agent_namespace),
        ]
        # Everything made so far lives as long as the process: modules, classes, the kubernetes client's
        # and pydantic's machinery (~80,000 objects the cyclic collector tracks). Moved out of its reach,
        # so each full collection walks what the operator makes while it runs (the node cache, passes,
        # requests) instead of all of that again: a full collection cost ~0.16 s of CPU at 1000 nodes
        # (docs/benchmarks.md). Reference counting still frees them; they were never cyclic garbage.
        gc.freeze()
        for informer in informers:
            informer.start()
        if election is not None:
            lock = election  # released on the way out from here on
            log.info("waiting for the leader Lease %s/%s as %s", options.namespace, c.LEASE_NAME, identity)
            while not lock.try_acquire_or_renew():
                if stop.wait(options.election.retry_period):
                    return 0  # SIGTERM while standing by
            log.info("became leader")
            threading.Thread(
                target=_renew_until_lost, args=(lock, stop, lost, metrics), name="lease", daemon=True
            ).start()
        metrics.leader.set(1)
        settings = kopf.OperatorSettings()
        handlers.configure(settings)
        kopf.run(
            clusterwide=True,
            standalone=True,
            settings=settings,
            memo=kopf.Memo(engine=engine, stop=stop),
            stop_flag=stop,
            # Our identity, not kopf's own guess: it calls getpass.getuser(), which raises for a uid
            # with no passwd entry (the operator pod on containerd crashed on becoming leader).
            identity=identity,  # type: ignore[arg-type]  # kopf.Identity is a NewType of str, not exported
        )
    finally:
        stop.set()
        gc.unfreeze()  # for a caller that goes on in this process (tests)
        for informer in informers:
            informer.close()
        metrics.ready.clear()
        if lock is not None and not lost.is_set():
            lock.release()
        server.shutdown()
    return 1 if lost.is_set() else 0
