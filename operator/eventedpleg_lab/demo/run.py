"""The demo: everything the product does, end to end, on this machine, then torn down.

1. build (first run only) and start a real control plane: etcd, kube-apiserver (RBAC), kcm, scheduler, kwok;
2. create kwok nodes with a realistic mix of kubelet/runtime versions, each backed by a simulated host
   with a real agent;
3. install the CRD, the chart's RBAC, and run the operator under its ServiceAccount token;
4. apply a NodeConfig and show the rollout live until Available (exit 0) or Degraded/timeout (exit 1).
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg.cli import report
from eventedpleg.core.rollout.snapshot import node_view
from eventedpleg.k8s import nodeconfigs, nodes
from eventedpleg.k8s.client import api_client
from eventedpleg.k8s.errors import ApiError
from eventedpleg_lab.demo.harness import NAMESPACE, OPERATOR_SA, OperatorProcess, install_operator
from eventedpleg_lab.demo.simnodes import SimulatedAgents
from eventedpleg_lab.localcluster import build
from eventedpleg_lab.localcluster.cluster import LocalCluster, default_mix

DEMO_NODECONFIG: dict[str, Any] = {
    "apiVersion": f"{protocol.GROUP}/{c.VERSION}",
    "kind": c.KIND,
    "metadata": {"name": "cluster"},
    "spec": {
        "eventedPleg": True,
        "rollout": {"maxUnavailable": 2, "canary": {"nodes": 1, "soakSeconds": 5}},
        "verification": {"timeoutSeconds": 60},
    },
}


@dataclass(frozen=True)
class DemoOptions:
    nodes: int = 10
    timeout: float = 600.0
    directory: Path | None = None
    keep: bool = False


def _redraw(text: str) -> None:
    if sys.stdout.isatty():
        sys.stdout.write("\x1b[H\x1b[2J" + text + "\n")
    else:
        sys.stdout.write(text + "\n\n")
    sys.stdout.flush()


def watch(api: Any, name: str, timeout: float, started: float) -> tuple[int, str]:
    """Show the rollout until it settles; (exit code, final screen)."""
    deadline = time.monotonic() + timeout
    last = ""
    interval = 1.0 if sys.stdout.isatty() else 5.0
    while time.monotonic() < deadline:
        try:
            body = nodeconfigs.get(api, name)
            screen = report.status_view(
                body,
                [node_view(n) for n in nodes.list_nodes(api)],
                now_text=f"t+{time.monotonic() - started:.0f}s",
            )
        except ApiError as exc:
            screen = f"(API error: {exc})"
            body = {}
        if screen != last or sys.stdout.isatty():
            _redraw(screen)
            last = screen
        if body and report.condition_status(body, "Degraded") == "True":
            return 1, screen
        if body and report.condition_status(body, "Available") == "True":
            return 0, screen
        time.sleep(interval)
    return 1, last + f"\n\ntimed out after {timeout:.0f}s"


def _agents_log(path: Path) -> logging.FileHandler:
    """The in-process agents log to `path`, not the terminal: their warnings while a simulated kubelet
    restarts ("kubelet metrics unavailable: ... connection refused") are expected, and they broke up the
    rollout's screen."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    product = logging.getLogger("eventedpleg")
    product.addHandler(handler)
    product.propagate = False
    return handler


def run(
    options: DemoOptions, log: Callable[[str], None] = lambda m: print(m, file=sys.stderr, flush=True)
) -> int:
    started = time.monotonic()
    log("[demo] evented-pleg-operator demo: real control plane, kwok nodes, simulated hosts, real agents")
    build.ensure((*build.CONTROL_PLANE, "helm"), log=log)
    with tempfile.TemporaryDirectory(prefix="eventedpleg-demo-") as scratch:
        work = options.directory or Path(scratch)
        cluster = LocalCluster(work / "cluster", log=log)
        operator: OperatorProcess | None = None
        agents: SimulatedAgents | None = None
        try:
            cluster.start()
            mix = default_mix(options.nodes)
            cluster.add_nodes(mix)
            log(f"[demo] {len(mix)} kwok nodes Ready; installing the CRD and the chart's RBAC")
            sa_kubeconfig = install_operator(cluster, log=log)
            operator = OperatorProcess(sa_kubeconfig, NAMESPACE, work / "operator.log").start()
            # One connection per agent thread and a few for the watcher: no "connection pool is full".
            api = api_client(str(cluster.kubeconfig), pool_size=len(mix) + 4)
            handler = _agents_log(work / "agents.log")
            agents = SimulatedAgents(api, work / "hosts", NAMESPACE)
            agents.start(mix)
            who = f"{NAMESPACE}/{OPERATOR_SA}"
            log(f"[demo] operator running as ServiceAccount {who} (log: {operator.log_path})")
            log(f"[demo] {len(mix)} agents running in this process (log: {handler.baseFilename})")
            cluster.kubectl("apply", "-f", "-", stdin=json.dumps(DEMO_NODECONFIG), check=True)
            code, _ = watch(api, "cluster", options.timeout, started)
            verdict = "reached Available" if code == 0 else "did NOT reach Available"
            elapsed = time.monotonic() - started
            for args in (("nodes", "-L", protocol.LABEL_STATE), ("nodeconfig", "cluster", "-o", "wide")):
                shown = cluster.kubectl("get", *args).stdout.rstrip()
                print(f"\n[demo] kubectl get {' '.join(args)}\n{shown}")
            print(f"\n[demo] NodeConfig 'cluster' {verdict} in {elapsed:.0f}s (including start-up)")
            if options.keep:
                print(f"[demo] kept running: export KUBECONFIG={cluster.kubeconfig}")
                input("[demo] press Enter to tear down ")
            return code
        finally:
            if agents is not None:
                agents.stop()
            logging.getLogger("eventedpleg").propagate = True
            if operator is not None:
                operator.stop()
            cluster.stop()
