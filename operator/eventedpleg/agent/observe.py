"""Gather what verification looks at: kubelet metrics and journal, CRI-O's running config, Node Ready."""

from __future__ import annotations

from datetime import datetime

from eventedpleg.core import runtimes
from eventedpleg.core.node.facts import crioconfig, kubeletlog
from eventedpleg.core.node.facts.promtext import Metrics, parse_metrics
from eventedpleg.core.node.facts.verify import Observation
from eventedpleg.core.node.phases.host import Host, KubeletEndpoint
from eventedpleg.core.node.phases.nodeapi import AgentApi

KUBELET_UNIT = "kubelet"


class Observer:
    def __init__(self, host: Host, api: AgentApi, node: str) -> None:
        self.host = host
        self.api = api
        self.node = node

    def metrics(self, only: frozenset[str] | None = None) -> Metrics | None:
        result = self.host.kubelet_get(KubeletEndpoint.METRICS)
        return parse_metrics(result.body, only) if result.ok else None

    def crio_pod_events(self) -> tuple[bool | None, str]:
        """The running daemon's enable_pod_events: `crio status config` (1.28+), `crio-status config` before
        that, else `crio config` — only what a fresh start loads, valid because we just restarted crio
        (docs/compatibility.md §2)."""
        for argv in runtimes.CRIO.config_commands:
            result = self.host.run(list(argv), timeout=30)
            if result.ok:
                value = crioconfig.running_pod_events(result.stdout, runtimes.CRIO_DROPIN.setting)
                if value is not None:
                    return value, " ".join(argv)
        return None, " ".join(runtimes.CRIO.config_commands[0])

    def observe(self, *, baseline: Metrics | None, window: float, since: datetime, crio: bool) -> Observation:
        health = self.host.kubelet_get(KubeletEndpoint.HEALTHZ)
        node = self.api.get_node(self.node)
        pod_events, source = self.crio_pod_events() if crio else (None, "")
        return Observation(
            window_seconds=window,
            healthz=health.ok,
            healthz_detail="/healthz ok" if health.ok else f"/healthz: {health.error or health.status}",
            node_ready=None if node is None else node.ready,
            baseline=baseline,
            metrics=self.metrics(),
            log=kubeletlog.scan(self.host.journal(KUBELET_UNIT, since)),
            crio_pod_events=pod_events,
            crio_source=source,
        )
