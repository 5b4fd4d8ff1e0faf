"""Run the operator for real against the local control plane: as a subprocess (so it can be SIGKILLed),
under the chart's ServiceAccount and RBAC, with agents acknowledging the node protocol. The pieces are the
package's own (eventedpleg_lab.demo.harness / .protocolagents), shared with the demo and the benchmark."""

from __future__ import annotations

import itertools
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kubernetes import client

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg.k8s.nodes import node_patch, patch_node
from eventedpleg_lab.demo.harness import OperatorProcess, install_operator
from eventedpleg_lab.demo.protocolagents import Behaviour
from eventedpleg_lab.demo.protocolagents import ProtocolAgents as _ProtocolAgents
from eventedpleg_lab.localcluster.cluster import LocalCluster

__all__ = [
    "OperatorProcess",
    "ProtocolAgents",
    "install_operator_rbac",
    "nodeconfig",
    "passes",
    "plain",
    "planned_again",
    "wait_for",
]
_pokes = itertools.count()


def plain(obj: object) -> Any:
    """A kubernetes client model as the plain dicts the API sends (tests read fields, not Optionals)."""
    return client.ApiClient().sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]


def install_operator_rbac(cluster: LocalCluster, namespace: str) -> Path:
    return install_operator(cluster, namespace)


def ProtocolAgents(
    api: Any, prefix: str, *, delay: float = 0.5, behaviour: Behaviour | None = None
) -> _ProtocolAgents:
    """Stand-in agents for the nodes of one test (label rollout-test=<prefix>)."""
    return _ProtocolAgents(
        api, label_selector=f"rollout-test={prefix}", apply_seconds=delay, behaviour=behaviour
    )


def nodeconfig(name: str, prefix_label: str, **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "eventedPleg": True,
        "nodeSelector": {"matchLabels": {"rollout-test": prefix_label}},
        "rollout": {"canary": {"nodes": 0}},
    }
    base.update(spec)
    return {
        "apiVersion": f"{protocol.GROUP}/{c.VERSION}",
        "kind": c.KIND,
        "metadata": {"name": name},
        "spec": base,
    }


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


def _metric_sum(port: int, name: str) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    counts = [line.split()[-1] for line in text.splitlines() if line.startswith(name)]
    return int(sum(float(n) for n in counts))


def passes(port: int) -> int:
    """The plan-and-execute passes the operator has finished (its eventedpleg_reconcile_seconds count)."""
    return _metric_sum(port, "eventedpleg_reconcile_seconds_count")


def drain_retries(port: int) -> int:
    """Drain attempts that had to wait (eventedpleg_drain_retries_total, every NodeConfig)."""
    return _metric_sum(port, "eventedpleg_drain_retries_total")


def planned_again(api: Any, port: int, node: str) -> None:
    """Wait, on events rather than time, until the operator has planned twice more, each time pushed by a
    change to `node` (an annotation outside the protocol). The second of those passes began after the
    first ended, i.e. after this call started: whatever a test then finds unchanged, the operator looked at
    and left alone. This is what a test proving that nothing happens waits for, instead of a sleep."""
    start = passes(port)

    def pushed() -> bool:
        patch_node(api, node, node_patch(annotations={"tests.invalid/poke": str(next(_pokes))}))
        return passes(port) >= start + 2

    wait_for(pushed, interval=0.5, what="two more operator passes")
