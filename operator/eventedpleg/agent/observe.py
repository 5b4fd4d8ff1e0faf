"""Gather what verification looks at: kubelet metrics and journal, the runtime's running config, Ready."""

from __future__ import annotations

import logging
from datetime import datetime

from eventedpleg.core.node.blocks.host import Host, KubeletEndpoint
from eventedpleg.core.node.blocks.nodeapi import AgentApi
from eventedpleg.core.node.facts import crioconfig, kubeletlog
from eventedpleg.core.node.facts.promtext import Metrics, parse_metrics
from eventedpleg.core.node.facts.verify import Observation
from eventedpleg.core.runtimes import RuntimeProfile

log = logging.getLogger(__name__)
KUBELET_UNIT = "kubelet"
UNTRUSTED_FIX = (
    "the token was not sent; give the kubelet a serving certificate for this node's name or addresses "
    "(approve its own CSR), or find what else answers on its port"
)


class UntrustedKubeletError(Exception):
    """The kubelet's port answered with a certificate that does not name this node (the mismatch)."""


class Observer:
    def __init__(self, host: Host, api: AgentApi, node: str) -> None:
        self.host = host
        self.api = api
        self.node = node

    def metrics(self, only: frozenset[str] | None = None) -> Metrics | None:
        return self.scrape(only)[0]

    def scrape(self, only: frozenset[str] | None = None) -> tuple[Metrics | None, str]:
        """The kubelet's metrics, or None and why (one line); raises UntrustedKubeletError when what answered
        is not this node's kubelet (the interpreter makes it a host fault)."""
        result = self.host.kubelet_get(KubeletEndpoint.METRICS)
        if result.ok:
            return parse_metrics(result.body, only), ""
        if result.untrusted:
            raise UntrustedKubeletError(result.untrusted)
        why = result.error or f"HTTP {result.status}"
        log.warning("kubelet metrics unavailable: %s", why)
        return None, why

    def runtime_events(self, runtime: RuntimeProfile) -> tuple[bool | None, str]:
        """The running daemon's drop-in setting, from the first of the profile's config commands that prints
        it. CRI-O: `crio status config` (1.28+), `crio-status config` before that, else `crio config` — only
        what a fresh start loads, valid because we just restarted crio (docs/compatibility.md §2)."""
        setting = runtime.dropin.setting if runtime.dropin is not None else ()
        for argv in runtime.config_commands if setting else ():
            result = self.host.run(list(argv), timeout=30)
            if result.ok:
                value = crioconfig.running_pod_events(result.stdout, setting)
                if value is not None:
                    return value, " ".join(argv)
        return None, " ".join(runtime.config_commands[0]) if runtime.config_commands else ""

    def observe(
        self, *, baseline: Metrics | None, window: float, since: datetime, runtime: RuntimeProfile | None
    ) -> Observation:
        health = self.host.kubelet_get(KubeletEndpoint.HEALTHZ)
        node = self.api.get_node(self.node)
        events, source = self.runtime_events(runtime) if runtime is not None else (None, "")
        metrics, metrics_error = self.scrape()
        return Observation(
            window_seconds=window,
            healthz=health.ok,
            healthz_detail="/healthz ok" if health.ok else f"/healthz: {health.error or health.status}",
            node_ready=None if node is None else node.ready,
            baseline=baseline,
            metrics=metrics,
            metrics_error=metrics_error,
            log=kubeletlog.scan(self.host.journal(KUBELET_UNIT, since)),
            runtime_events=events,
            runtime_source=source,
        )
