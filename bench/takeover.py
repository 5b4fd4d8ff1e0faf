"""Leader takeover benchmark: how long a standby needs to take the operator's Lease over (a benchmark, not
a test; tests/cluster/test_leader_election.py proves the ordering).

On the real local control plane, under the operator's ServiceAccount, two electors (eventedpleg.k8s.lease,
default timings: 15 s lease, 10 s renew deadline, 2 s retry, 5 s request timeout) run in this process.
Each run cuts the leader off one of two ways:

- killed: the leader stops renewing without releasing the Lease (a crashed or SIGKILLed pod);
- hung:   every request of the leader goes through a TCP proxy that is paused (a wedged connection).

and reports, from the cut: when the leader's own gate closed (it starts no step after that), and when the
standby led. The gap between the two is the safety margin.

    .venv/bin/python bench/takeover.py --runs 5
Writes bench/results/takeover.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

from eventedpleg.core.leaderelection import ElectionTimings
from eventedpleg.k8s.client import api_client
from eventedpleg.k8s.lease import LeaseConfig, LeaseLock
from eventedpleg_lab.demo.harness import NAMESPACE, install_operator
from eventedpleg_lab.localcluster.cluster import LocalCluster
from eventedpleg_lab.tcpproxy import PausableProxy

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"


def _elect(lock: LeaseLock, stop: threading.Event) -> None:
    while not stop.is_set():
        lock.try_acquire_or_renew()
        stop.wait(lock.timings.retry_period)


def one_run(cluster: LocalCluster, kubeconfig: Path, mode: str, timings: ElectionTimings) -> dict[str, float]:
    name = f"bench-{uuid.uuid4().hex[:6]}"
    proxy = PausableProxy(cluster.ports["apiserver"])
    leader_config = kubeconfig
    if mode == "hung":
        config = yaml.safe_load(kubeconfig.read_text())
        for entry in config["clusters"]:
            entry["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
        leader_config = kubeconfig.with_name("takeover-leader.kubeconfig")
        leader_config.write_text(yaml.safe_dump(config))
    leader_api = api_client(str(leader_config))
    standby_api = api_client(str(kubeconfig))
    leader = LeaseLock(leader_api, LeaseConfig(NAMESPACE, name, "leader", timings))
    standby = LeaseLock(standby_api, LeaseConfig(NAMESPACE, name, "standby", timings))
    stop_leader, stop_standby = threading.Event(), threading.Event()
    threading.Thread(target=_elect, args=(leader, stop_leader), daemon=True).start()
    while not leader.leading():
        time.sleep(0.05)
    threading.Thread(target=_elect, args=(standby, stop_standby), daemon=True).start()
    time.sleep(3 * timings.retry_period)  # the standby has observed a few renewals
    cut = time.monotonic()
    if mode == "killed":
        stop_leader.set()
    else:
        proxy.pause()
    gate_closed = took_over = None
    overlap = 0
    while took_over is None and time.monotonic() - cut < 120:
        now, leads, stands = time.monotonic(), leader.leading(), standby.leading()
        overlap += leads and stands
        if gate_closed is None and not leads:
            gate_closed = now - cut
        if stands:
            took_over = now - cut
        time.sleep(0.01)
    stop_leader.set()
    stop_standby.set()
    proxy.close()
    assert gate_closed is not None and took_over is not None, "no takeover within 120 s"
    return {"leader_stopped_s": gate_closed, "standby_led_s": took_over, "overlap_samples": overlap}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    timings = ElectionTimings()
    results: dict[str, Any] = {"timings": timings.__dict__, "runs": {}}
    with tempfile.TemporaryDirectory(prefix="takeover-") as tmp, LocalCluster(Path(tmp)) as cluster:
        kubeconfig = install_operator(cluster, NAMESPACE)
        for mode in ("killed", "hung"):
            runs = [one_run(cluster, kubeconfig, mode, timings) for _ in range(args.runs)]
            results["runs"][mode] = runs
            stopped = [r["leader_stopped_s"] for r in runs]
            led = [r["standby_led_s"] for r in runs]
            print(
                f"{mode:6} n={len(runs)}  leader stopped after the cut: "
                f"median {statistics.median(stopped):.1f}s "
                f"max {max(stopped):.1f}s | standby led: median {statistics.median(led):.1f}s "
                f"max {max(led):.1f}s | samples with two leaders: {sum(r['overlap_samples'] for r in runs)}",
                flush=True,
            )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "takeover.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
