"""The demo: everything the product does, end to end, on this machine, then torn down.

1. build (first run only) and start a real control plane: etcd, kube-apiserver (RBAC), kcm, scheduler, kwok;
2. create kwok nodes with a realistic mix of kubelet/runtime versions, each backed by a simulated host
   with a real agent;
3. install the CRD, the chart's RBAC, and run the operator under its ServiceAccount token;
4. apply a NodeConfig and show the rollout live until Available (exit 0) or Degraded/timeout (exit 1).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from eventedpleg import constants as c
from eventedpleg import crdgen
from eventedpleg.core import report
from eventedpleg.core.snapshot import node_view
from eventedpleg.demo.simnodes import SimulatedAgents
from eventedpleg.k8s import nodeconfigs, nodes
from eventedpleg.k8s.client import api_client
from eventedpleg.k8s.errors import ApiError
from eventedpleg.localcluster import build
from eventedpleg.localcluster.cluster import LocalCluster, default_mix

NAMESPACE = "evented-pleg-system"
OPERATOR_SA = "evented-pleg-operator"
DEMO_NODECONFIG: dict[str, Any] = {
    "apiVersion": f"{c.GROUP}/{c.VERSION}",
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


def chart_dir() -> Path:
    """The Helm chart: inside the wheel (eventedpleg/chart) or the source tree (manifests/)."""
    packaged = Path(str(resources.files("eventedpleg"))) / "chart"
    if (packaged / "Chart.yaml").exists():
        return packaged
    return Path(__file__).resolve().parents[3] / "manifests" / "evented-pleg-operator"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def install_operator(cluster: LocalCluster, log: Callable[[str], None]) -> Path:
    """CRD + the chart's operator RBAC (rendered by the real helm); returns the operator SA kubeconfig."""
    cluster.kubectl("apply", "-f", "-", stdin=crdgen.render_crd(), check=True)
    cluster.kubectl("wait", "--for=condition=Established", f"crd/{c.CRD_NAME}", "--timeout=60s", check=True)
    cluster.kubectl("create", "namespace", NAMESPACE)
    helm = build.ensure(("helm",), log=log)["helm"]
    rendered = subprocess.run(
        [str(helm), "template", "demo", str(chart_dir()), "-n", NAMESPACE,
         "--show-only", "templates/operator-rbac.yaml"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    cluster.kubectl("apply", "-f", "-", stdin=rendered, check=True)
    return cluster.service_account_kubeconfig(NAMESPACE, OPERATOR_SA, create=False)


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


def run(
    options: DemoOptions, log: Callable[[str], None] = lambda m: print(m, file=sys.stderr, flush=True)
) -> int:
    started = time.monotonic()
    log("[demo] evented-pleg-operator demo: real control plane, kwok nodes, simulated hosts, real agents")
    build.ensure((*build.CONTROL_PLANE, "helm"), log=log)
    with tempfile.TemporaryDirectory(prefix="eventedpleg-demo-") as scratch:
        work = options.directory or Path(scratch)
        cluster = LocalCluster(work / "cluster", log=log)
        operator: subprocess.Popen[bytes] | None = None
        agents: SimulatedAgents | None = None
        try:
            cluster.start()
            mix = default_mix(options.nodes)
            cluster.add_nodes(mix)
            log(f"[demo] {len(mix)} kwok nodes Ready; installing the CRD and the chart's RBAC")
            sa_kubeconfig = install_operator(cluster, log)
            log_path = work / "operator.log"
            env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
            with log_path.open("ab") as out:
                operator = subprocess.Popen(
                    [
                        sys.executable, "-m", "eventedpleg", "operator", "--namespace", NAMESPACE,
                        "--kubeconfig", str(sa_kubeconfig), "--no-leader-elect",
                        "--metrics-port", str(_free_port()),
                    ],
                    stdout=out, stderr=subprocess.STDOUT, env=env,
                )  # fmt: skip
            # One connection per agent thread and a few for the watcher: no "connection pool is full".
            api = api_client(str(cluster.kubeconfig), pool_size=len(mix) + 4)
            agents = SimulatedAgents(api, work / "hosts", NAMESPACE)
            agents.start(mix)
            log(f"[demo] operator running as ServiceAccount {NAMESPACE}/{OPERATOR_SA} (log: {log_path})")
            cluster.kubectl("apply", "-f", "-", stdin=json.dumps(DEMO_NODECONFIG), check=True)
            code, _ = watch(api, "cluster", options.timeout, started)
            verdict = "reached Available" if code == 0 else "did NOT reach Available"
            elapsed = time.monotonic() - started
            print(f"\n[demo] NodeConfig 'cluster' {verdict} in {elapsed:.0f}s (including start-up)")
            if options.keep:
                print(f"[demo] kept running: export KUBECONFIG={cluster.kubeconfig}")
                input("[demo] press Enter to tear down ")
            return code
        finally:
            if agents is not None:
                agents.stop()
            if operator is not None:
                operator.terminate()
                try:
                    operator.wait(20)
                except subprocess.TimeoutExpired:
                    operator.kill()
            cluster.stop()
