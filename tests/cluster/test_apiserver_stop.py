"""Timeouts everywhere: kube-apiserver SIGSTOPped for 60 s in the middle of a rollout, then SIGCONT.

A stopped API server keeps its sockets open (the kernel still accepts and ACKs), so without client-side
timeouts every call in flight would wait for ever. The rollout must resume and complete, apply no node
twice, and never have more than maxUnavailable nodes cordoned. The test samples the nodes every 0.5 s
through a client with its own short timeouts; samples during the stop fail (expected) and the assertions
use the ones that succeeded. Its own control plane: the other cluster tests must not see the stop.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg.k8s.client import api_client
from eventedpleg_lab.demo.harness import http_status
from eventedpleg_lab.kube.fakenodes import FakeNode
from eventedpleg_lab.localcluster.cluster import LocalCluster
from tests.cluster.rollout_harness import (
    OperatorProcess,
    ProtocolAgents,
    install_operator_rbac,
    nodeconfig,
    plain,
    wait_for,
)

pytestmark = pytest.mark.cluster
NS = "evented-pleg-system"
STOP_SECONDS = 60
MAX_UNAVAILABLE = 2
NODES = 12


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("apiserver-stop")) as local:
        yield local


@dataclass(frozen=True)
class Sample:
    at: float
    ok: bool
    cordoned: int = 0
    not_ready: int = 0
    done: int = 0
    error: str = ""


def _sample(api: client.ApiClient, selector: str) -> Sample:
    at = time.time()
    try:
        items = plain(client.CoreV1Api(api).list_node(label_selector=selector))["items"]
    except Exception as exc:  # a failed sample is data, not a test error
        return Sample(at, False, error=type(exc).__name__)
    cordoned = sum(1 for n in items if n["spec"].get("unschedulable"))
    ready = {
        n["metadata"]["name"]
        for n in items
        for cond in n.get("status", {}).get("conditions") or []
        if cond["type"] == "Ready" and cond["status"] == "True"
    }
    done = sum(1 for n in items if (n["metadata"].get("annotations") or {}).get(protocol.ANN_STATE) == "Done")
    return Sample(at, True, cordoned, len(items) - len(ready), done)


def test_rollout_survives_a_stopped_apiserver(own_cluster: LocalCluster, tmp_path: Path) -> None:
    cluster = own_cluster
    cluster.apply_crd(path=Path(__file__).resolve().parents[2] / "crds", name=c.CRD_NAME)
    kubeconfig = install_operator_rbac(cluster, NS)
    prefix = f"stop{uuid.uuid4().hex[:4]}"
    names = cluster.add_nodes(
        [FakeNode(name=f"{prefix}-{i:02d}", labels={"rollout-test": prefix}) for i in range(NODES)]
    )
    admin = cluster.api()
    sampler = api_client(str(cluster.kubeconfig), request_timeout=(1.0, 2.0))
    samples: list[Sample] = []
    sampling = threading.Event()

    probes: list[tuple[float, int]] = []  # the operator's /healthz: its loops keep moving meanwhile

    def sample_loop() -> None:
        while not sampling.is_set():
            samples.append(_sample(sampler, f"rollout-test={prefix}"))
            probes.append((time.time(), http_status(op.port, "/healthz")))
            sampling.wait(0.5)

    apiserver = next(p for p in cluster.procs if p.name == "kube-apiserver")
    op = OperatorProcess(kubeconfig, NS, tmp_path / "operator.log", identity="stop-0")
    body = nodeconfig("stop", prefix, rollout={"maxUnavailable": MAX_UNAVAILABLE, "canary": {"nodes": 0}})
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(body), check=True)
    thread = threading.Thread(target=sample_loop, daemon=True)
    stopped = False
    try:
        op.start()
        thread.start()
        with ProtocolAgents(admin, prefix, delay=3.0) as agents:
            wait_for(lambda: len(agents.applied) >= 3, what="the rollout under way", timeout=120)
            stop_at = time.time()
            os.kill(apiserver.pid, signal.SIGSTOP)
            stopped = True
            time.sleep(STOP_SECONDS)
            os.kill(apiserver.pid, signal.SIGCONT)
            stopped = False
            resume_at = time.time()
            waited = cluster.kubectl("wait", "--for=condition=Available", "nodeconfig/stop", "--timeout=300s")
            assert waited.returncode == 0, op.log()[-4000:]
            finished_at = time.time()
            applied = dict(agents.applied)
    finally:
        if stopped:
            os.kill(apiserver.pid, signal.SIGCONT)
        sampling.set()
        thread.join(10)
        op.stop()
        cluster.kubectl("delete", "nodeconfig", "stop", "--wait=false")
    assert op.proc is not None and op.proc.returncode in (0, -signal.SIGTERM), op.log()[-3000:]
    assert applied == dict.fromkeys(names, 1), applied  # every node once, none twice
    final = _sample(sampler, f"rollout-test={prefix}")
    assert final.ok and final.cordoned == 0 and final.done == NODES

    good = [s for s in samples if s.ok]
    during = [s for s in samples if stop_at + 1 <= s.at <= resume_at - 1]
    after = [s for s in good if s.at > resume_at]
    assert during and not any(s.ok for s in during), "samples through a stopped API server cannot succeed"
    assert after, "no sample succeeded after SIGCONT"
    worst = max(s.cordoned for s in good)
    assert worst <= MAX_UNAVAILABLE, [(round(s.at - stop_at, 1), s.cordoned) for s in good]
    # An API server outage is not a hang of ours: with timeouts the loops keep passing, and liveness
    # (which would restart the pod) stays green throughout.
    answered = [code for at, code in probes if at > stop_at and code]
    assert answered and set(answered) == {200}, probes
    timeline = " ".join(
        f"{s.at - stop_at:+.0f}s:{s.cordoned}c/{s.done}d" if s.ok else f"{s.at - stop_at:+.0f}s:x"
        for s in samples[:: max(1, len(samples) // 40)]
    )
    print(
        f"\napiserver SIGSTOP {STOP_SECONDS}s: {len(samples)} samples every 0.5 s, {len(good)} ok, "
        f"{len(samples) - len(good)} failed ({len(during)} during the stop, all failed); "
        f"max cordoned {worst} (maxUnavailable {MAX_UNAVAILABLE}); "
        f"max NotReady {max(s.not_ready for s in good)}; "
        f"rollout finished {finished_at - resume_at:.1f}s after SIGCONT; "
        f"operator /healthz during and after the stop: {len(answered)} x 200\n"
        f"timeline (cordoned c / done d): {timeline}"
    )
    sampler.close()  # type: ignore[no-untyped-call]
    admin.close()
