"""`eventedpleg demo --lab`: the main job on real nodes. The lab comes up (systemd-nspawn nodes running
real kubelets, containerd and CRI-O), the image is built from the Dockerfile and pushed with the packaged
chart to the lab's registry, the chart is installed from there with helm (each node pulls the image by
digest), a Deployment guarded by a PodDisruptionBudget runs, and a NodeConfig rolls out live. Exit 0
only when the NodeConfig is Available and every node ended as expected (chart.expected_outcome); then the
lab is taken down."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass

from eventedpleg import protocol
from eventedpleg.k8s.client import api_client
from eventedpleg_lab.demo.run import watch
from eventedpleg_lab.lab import chart, nodes
from eventedpleg_lab.localcluster.build import Log


@dataclass(frozen=True)
class LabDemoOptions:
    timeout: float = 1200.0
    keep: bool = False


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run(options: LabDemoOptions, log: Log = _stderr) -> int:
    started = time.monotonic()
    timings: dict[str, float] = {}
    specs = nodes.parse(nodes.DEFAULT_SPEC)
    log("[demo] evented-pleg-operator on real nodes: kubelet, containerd, CRI-O in systemd-nspawn machines")
    with chart.product_lab(specs, log, timings) as lab:
        log(f"[demo] chart installed; export KUBECONFIG={lab.kubeconfig}")
        for line in chart.helm_test(lab).splitlines():
            log(f"[demo] helm test: {line}")
        chart.apply_nodeconfig(lab, evented_pleg=True)
        api = api_client(str(lab.kubeconfig))
        code, _ = watch(api, chart.NODECONFIG, options.timeout, started)
        timings["rollout"] = round(time.monotonic() - started - sum(timings.values()), 1)
        problems = chart.missing_benefits(lab, specs) if code == 0 else []
        problems += chart.outcome_problems(
            specs, lab.nodes(), chart.get_json(lab, "nodeconfig", chart.NODECONFIG)
        )
        for problem in problems:
            print(f"[demo] unexpected: {problem}")
        for args in (("nodes", "-L", protocol.LABEL_STATE), ("nodeconfig", chart.NODECONFIG, "-o", "wide")):
            print(f"\n[demo] kubectl get {' '.join(args)}\n{lab.kubectl('get', *args).stdout.rstrip()}")
        ok = code == 0 and not problems
        verdict = "reached Available, every node as expected" if ok else "did NOT reach the expected end"
        print(f"\n[demo] NodeConfig '{chart.NODECONFIG}' {verdict} in {time.monotonic() - started:.0f}s")
        print(f"[demo] times: {json.dumps(timings)}")
        if options.keep:
            print(f"[demo] kept running: export KUBECONFIG={lab.kubeconfig}")
            input("[demo] press Enter to take the lab down ")
        return 0 if ok else 1
