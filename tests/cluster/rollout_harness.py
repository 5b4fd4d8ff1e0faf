"""Run the operator for real against the local control plane: as a subprocess (so it can be SIGKILLed),
under the chart's ServiceAccount and RBAC, with agents acknowledging the node protocol."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client

from eventedpleg import constants as c
from eventedpleg.localcluster import build
from eventedpleg.localcluster.cluster import LocalCluster

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "manifests" / "evented-pleg-operator"
OPERATOR_SA = "evented-pleg-operator"


def plain(obj: object) -> Any:
    """A kubernetes client model as the plain dicts the API sends (tests read fields, not Optionals)."""
    return client.ApiClient().sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]


def helm() -> str:
    found = build.locate("helm")
    if found is None:
        build.ensure(("helm",))
        found = build.locate("helm")
    assert found is not None
    return str(found)


def install_operator_rbac(cluster: LocalCluster, namespace: str) -> Path:
    """Apply the chart's operator RBAC (rendered by the real helm) and return a kubeconfig for its SA."""
    cluster.kubectl("create", "namespace", namespace)
    rendered = subprocess.run(
        [
            helm(),
            "template",
            "epo",
            str(CHART),
            "-n",
            namespace,
            "--show-only",
            "templates/operator-rbac.yaml",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    cluster.kubectl("apply", "-f", "-", stdin=rendered, check=True)
    return cluster.service_account_kubeconfig(namespace, OPERATOR_SA, create=False)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class OperatorProcess:
    kubeconfig: Path
    namespace: str
    log_path: Path
    identity: str = "op-0"
    leader_elect: bool = False
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
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        return self

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


Behaviour = Callable[[str], str]  # node name -> "Done" | "RolledBack" | "Silent"


class ProtocolAgents:
    """A stand-in for the per-node agents that follows the protocol in constants.py: for a node in
    Applying with desired != current, after `delay` seconds write current-config and Done (or RolledBack).

    Used where a test is about the operator, not the agent; agent behaviour has its own tests."""

    def __init__(
        self, api: client.ApiClient, prefix: str, *, delay: float = 0.5, behaviour: Behaviour | None = None
    ):
        self.core = client.CoreV1Api(api)
        self.prefix, self.delay = prefix, delay
        self.behaviour = behaviour or (lambda _: "Done")
        self.applied: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> ProtocolAgents:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        pending: dict[str, float] = {}
        while not self._stop.wait(0.1):
            try:
                nodes = plain(self.core.list_node())["items"]
            except client.ApiException:
                continue
            for node in nodes:
                name = str(node["metadata"]["name"])
                ann = node["metadata"].get("annotations") or {}
                if not name.startswith(self.prefix) or ann.get(c.ANN_STATE) != "Applying":
                    pending.pop(name, None)
                    continue
                if ann.get(c.ANN_DESIRED) == ann.get(c.ANN_CURRENT):
                    continue
                due = pending.setdefault(name, time.monotonic() + self.delay)
                if time.monotonic() < due:
                    continue
                self._finish(name, ann)
                pending.pop(name, None)

    def _finish(self, name: str, ann: dict[str, str]) -> None:
        verdict = self.behaviour(name)
        if verdict == "Silent":
            return
        marks = {
            c.ANN_STATE: verdict,
            c.ANN_STATE_SINCE: time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
            c.ANN_EVIDENCE: json.dumps({"checks": [{"name": "test-agent", "ok": verdict == "Done"}]}),
            c.ANN_REASON: "verified"
            if verdict == "Done"
            else "kubelet did not become healthy; previous files restored",
        }
        if verdict == "Done":
            marks[c.ANN_CURRENT] = ann[c.ANN_DESIRED]
        self.core.patch_node(name, {"metadata": {"annotations": marks}})
        self.applied[name] = self.applied.get(name, 0) + 1


def nodeconfig(name: str, prefix_label: str, **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "eventedPleg": True,
        "nodeSelector": {"matchLabels": {"rollout-test": prefix_label}},
        "rollout": {"canary": {"nodes": 0}},
    }
    base.update(spec)
    return {"apiVersion": f"{c.GROUP}/{c.VERSION}", "kind": c.KIND, "metadata": {"name": name}, "spec": base}


def wait_for(check: Callable[[], Any], timeout: float = 90.0, interval: float = 0.3, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or check}: last={last!r}")


@contextmanager
def operator_running(
    cluster: LocalCluster, namespace: str, tmp: Path, **kw: Any
) -> Iterator[OperatorProcess]:
    kubeconfig = install_operator_rbac(cluster, namespace)
    op = OperatorProcess(kubeconfig, namespace, tmp / "operator.log", **kw).start()
    try:
        yield op
    finally:
        op.stop()
