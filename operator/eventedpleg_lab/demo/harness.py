"""Installing and running the operator against a local control plane, the way a cluster runs it: the CRD,
the chart's RBAC (rendered by the real helm), and the operator process under its ServiceAccount token.
Shared by the demo, the rollout benchmark and the end-to-end tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from eventedpleg import constants as c
from eventedpleg import crdgen
from eventedpleg_lab.localcluster import build
from eventedpleg_lab.localcluster.cluster import LocalCluster

NAMESPACE = "evented-pleg-system"
OPERATOR_SA = "evented-pleg-operator"
AGENT_NAMESPACE = "evented-pleg-agent"  # the chart's agent.namespace: where the operator watches agent pods


def chart_dir() -> Path:
    """The Helm chart: inside the wheel (eventedpleg/chart) or the source tree (manifests/)."""
    packaged = Path(str(resources.files("eventedpleg"))) / "chart"
    if (packaged / "Chart.yaml").exists():
        return packaged
    return Path(__file__).resolve().parents[3] / "manifests" / "evented-pleg-operator"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def install_operator(
    cluster: LocalCluster, namespace: str = NAMESPACE, log: Callable[[str], None] | None = None
) -> Path:
    """CRD + the chart's operator RBAC (its Roles in the release namespace, AGENT_NAMESPACE and `default`);
    returns a kubeconfig for the operator's ServiceAccount."""
    cluster.apply_crd(stdin=crdgen.render_crd(), name=c.CRD_NAME)
    for name in (namespace, AGENT_NAMESPACE):
        cluster.kubectl("create", "namespace", name)  # may exist already
    helm = (build.ensure(("helm",), log=log) if log else build.ensure(("helm",)))["helm"]
    rendered = subprocess.run(
        [str(helm), "template", "epo", str(chart_dir()), "-n", namespace,
         "--show-only", "templates/operator-rbac.yaml"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    cluster.kubectl("apply", "-f", "-", stdin=rendered, check=True)
    return cluster.service_account_kubeconfig(namespace, OPERATOR_SA, create=False)


def http_status(port: int, path: str) -> int:
    """Status of GET http://127.0.0.1:port/path; 0 when nothing listens (yet)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


@dataclass
class OperatorProcess:
    """`eventedpleg operator` as a child process (so it can be SIGKILLed), logging to `log_path`."""

    kubeconfig: Path
    namespace: str
    log_path: Path
    identity: str = "op-0"
    leader_elect: bool = False
    agent_namespace: str = AGENT_NAMESPACE
    proc: subprocess.Popen[bytes] | None = None
    port: int = field(default_factory=free_port)

    def start(self) -> OperatorProcess:
        argv = [
            sys.executable, "-m", "eventedpleg", "operator",
            "--namespace", self.namespace,
            "--kubeconfig", str(self.kubeconfig),
            "--metrics-port", str(self.port),
            "--identity", self.identity,
            "--leader-elect" if self.leader_elect else "--no-leader-elect",
            "--agent-namespace", self.agent_namespace,
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def kill(self) -> None:
        """SIGKILL: no cleanup, no Lease release, exactly like a node dying."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")
