"""The chart installed on the shared test cluster (helm, kwok nodes), as the cluster tests install it: one
release per module, with names of its own since the cluster is shared."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eventedpleg_lab.localcluster.cluster import LocalCluster
from tests.chart.chartlib import CHART, REPO, helm, helm_env, parse, set_json_args


@dataclass
class Release:
    cluster: LocalCluster
    name: str
    namespace: str  # the release's (the operator's), labelled "restricted" by the test
    agent_ns: str
    prefix: str  # nameOverride: the cluster is shared, so cluster-wide names must not collide
    nodes: list[str]
    env: dict[str, str]
    install_output: str

    @property
    def operator(self) -> str:
        return f"{self.prefix}-operator"

    @property
    def agent(self) -> str:
        return f"{self.prefix}-agent"

    def helm(self, *args: str) -> str:
        done = helm(*args, f"--kubeconfig={self.cluster.kubeconfig}", env=self.env)
        assert done.returncode == 0, f"helm {' '.join(args)}: {done.stderr}"
        return done.stdout

    def kubectl(self, *args: str, kubeconfig: Path | None = None, stdin: str | None = None) -> str:
        done = self.cluster.kubectl(*args, kubeconfig=kubeconfig, stdin=stdin)
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done.stdout

    def get(self, *args: str) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.kubectl("get", *args, "-o", "json"))
        return doc

    def manifest(self) -> list[dict[str, Any]]:
        return parse(self.helm("get", "manifest", self.name, "-n", self.namespace))

    def pods(self, namespace: str, component: str) -> list[dict[str, Any]]:
        selector = f"app.kubernetes.io/instance={self.name},app.kubernetes.io/component={component}"
        items: list[dict[str, Any]] = self.get("pods", "-n", namespace, "-l", selector)["items"]
        return items


@contextmanager
def install(
    cluster: LocalCluster,
    home: Path,
    *,
    tag: str,
    suffix: str,
    nodes: list[str],
    values: Mapping[str, Any],
    uninstall: Sequence[str] = (),
) -> Iterator[Release]:
    """`helm install` into `<tag>-<suffix>` (agents in `<tag>-<suffix>-agent`, nameOverride `<tag>-<suffix>`)
    with `values` over the CRD-less defaults; on exit `helm uninstall` (plus `uninstall`'s flags), both
    namespaces and `nodes` deleted. The shared cluster's CRD was applied with kubectl by other tests (an
    administrator who manages the CRD outside the chart): the chart leaves it alone (tests/lab installs it
    through the chart)."""
    namespace = prefix = f"{tag}-{suffix}"
    agent_ns = f"{namespace}-agent"
    env = helm_env(home)
    cluster.kubectl("apply", "--server-side", "-f", str(REPO / "crds"), check=True)
    merged = {"crds": {"enabled": False, "keep": True}, "nameOverride": prefix, "agent.namespace": agent_ns}
    merged.update(values)
    name = f"epo-{suffix}"
    done = helm(
        "install", name, str(CHART), "-n", namespace, "--create-namespace",
        f"--kubeconfig={cluster.kubeconfig}", *set_json_args(merged), env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    try:
        yield Release(cluster, name, namespace, agent_ns, prefix, nodes, env, done.stdout)
    finally:
        helm("uninstall", name, "-n", namespace, *uninstall, f"--kubeconfig={cluster.kubeconfig}", env=env)
        for ns in (namespace, agent_ns):
            cluster.kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=false")
        cluster.delete_nodes(nodes)
