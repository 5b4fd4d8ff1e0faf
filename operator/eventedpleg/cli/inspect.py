"""`eventedpleg preflight | status | render`: look before (and while) rolling out. They change nothing.
Exit codes: eventedpleg.cli.failures (API and kubeconfig failures are reported there, in one line)."""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from typing import Any

import click
from pydantic import ValidationError

from eventedpleg import constants as c
from eventedpleg.cli import report as views
from eventedpleg.cli.failures import (
    EXIT_DEGRADED,
    EXIT_NONE,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_PARTIAL,
    fail,
    verbose_option,
)
from eventedpleg.core import compat
from eventedpleg.core.rollout import selector
from eventedpleg.core.rollout.drain.policy import DrainPolicy
from eventedpleg.core.rollout.snapshot import NodeView, node_view
from eventedpleg.k8s import drain as drainer
from eventedpleg.k8s import nodeconfigs, nodes
from eventedpleg.k8s.client import api_client
from eventedpleg.k8s.errors import NotFound, NotServed
from eventedpleg.models.nodeconfig import DrainSpec, KubeletConfigMode, NodeConfigSpec

kubeconfig_option = click.option(
    "--kubeconfig", envvar="KUBECONFIG", default=None, help="Default: $KUBECONFIG."
)


def _nodeconfig(api: Any, name: str) -> dict[str, Any]:
    """The NodeConfig, or exit 6 naming it; a missing CRD goes on to the one-line CRD hint."""
    try:
        return nodeconfigs.get(api, name)
    except NotServed:
        raise
    except NotFound:
        fail(f"NodeConfig {name!r} not found (kubectl get nodeconfigs)", EXIT_NOT_FOUND)


def _spec(api: Any, name: str | None) -> NodeConfigSpec | None:
    if name is None:
        return None
    body = _nodeconfig(api, name)
    try:
        return NodeConfigSpec.model_validate(body.get("spec") or {})
    except ValidationError as exc:
        fail(f"NodeConfig {name!r} has an invalid spec: {exc}")


def _views(api: Any) -> list[NodeView]:
    return [node_view(body) for body in nodes.list_nodes(api)]


@click.command()
@click.option("--nodeconfig", "name", default=None, help="Judge with this NodeConfig's selector and opt-ins.")
@click.option("--include-control-plane", is_flag=True, help="As spec.includeControlPlane: true.")
@click.option("--allow-risky", is_flag=True, help="As spec.allowRisky: true.")
@click.option(
    "-o", "--output", type=click.Choice(["table", "wide", "json"]), default="table", show_default=True
)
@kubeconfig_option
@verbose_option
def preflight(
    name: str | None,
    include_control_plane: bool,
    allow_risky: bool,
    output: str,
    kubeconfig: str | None,
    verbose: bool,
) -> None:
    """Per-node verdicts from the compatibility matrix: what would be changed, skipped, and why."""
    with api_client(kubeconfig) as api:
        spec = _spec(api, name)
        all_nodes = _views(api)
        pods, pdbs, agents = nodes.all_pods(api), drainer.all_pdbs(api), nodes.agent_pods(api)
    policy = compat.Policy(include_control_plane, allow_risky)
    chosen = all_nodes
    if spec is not None:
        policy = compat.Policy(spec.include_control_plane, spec.allow_risky, spec.runtime.value)
        chosen = [n for n in all_nodes if selector.matches(spec.node_selector, n.labels)]
    drain = DrainPolicy.of(spec.drain if spec is not None else DrainSpec())
    mode = (spec.kubelet_config if spec is not None else KubeletConfigMode.DROP_IN_ONLY).value
    order = spec.rollout.order if spec is not None else None
    rows = views.preflight_rows(
        chosen, policy, pods, pdbs, drain, mode, now=datetime.now(UTC), order=order, agent_pods=agents
    )
    click.echo(
        views.preflight_json(rows, policy)
        if output == "json"
        else views.preflight_table(rows, policy, drain, wide=output == "wide")
    )
    eligible = sum(1 for row in rows if row.taken(policy, drain))
    sys.exit(EXIT_OK if rows and eligible == len(rows) else EXIT_NONE if eligible == 0 else EXIT_PARTIAL)


def _status_code(body: dict[str, Any]) -> int:
    """Degraded 1; complete (Ready, or Available from an operator that predates Ready) 0; else 3. A status
    older than the spec (observedGeneration behind) is still in progress, whatever it says."""
    if views.condition_status(body, "Degraded") == "True":
        return EXIT_DEGRADED
    status = body.get("status") or {}
    if int(status.get("observedGeneration") or 0) < int(body["metadata"].get("generation") or 0):
        return EXIT_PARTIAL
    ready = views.condition_status(body, "Ready")
    done = ready == "True" if ready != "Unknown" else views.condition_status(body, "Available") == "True"
    return EXIT_OK if done else EXIT_PARTIAL


@click.command()
@click.argument("name", default="cluster")
@click.option("-w", "--watch", is_flag=True, help="Redraw until Available or Degraded (Ctrl-C to stop).")
@click.option("--interval", default=1.0, show_default=True, type=float, help="Seconds between redraws.")
@kubeconfig_option
@verbose_option
def status(name: str, watch: bool, interval: float, kubeconfig: str | None, verbose: bool) -> None:
    """Conditions and per-node progress of a NodeConfig (default: `cluster`)."""
    with api_client(kubeconfig) as api:
        while True:
            body = _nodeconfig(api, name)
            stamp = datetime.now(UTC).strftime("%H:%M:%S")
            agents = nodes.agent_pods(api) if views.needs_agent_pods(body) else None
            text = views.status_view(body, _views(api), now_text=stamp if watch else "", agent_pods=agents)
            if watch and sys.stdout.isatty():
                click.echo("\x1b[H\x1b[2J" + text)  # redraw in place
            else:
                click.echo(text + ("\n" if watch else ""))
            code = _status_code(body)
            if not watch or code != EXIT_PARTIAL:
                sys.exit(code)
            time.sleep(interval)


@click.command("render")
@click.option("--node", default=None, help="Render for this node (reads its versions from the cluster).")
@click.option("--kubelet-version", default=None, help="Offline: render for this kubelet version…")
@click.option("--runtime", "runtime_version", default=None, help="…and this runtime, e.g. cri-o://1.34.1")
@click.option(
    "--nodeconfig", "name", default="cluster", show_default=True, help="Spec to render (if it exists)."
)
@click.option("--disable", is_flag=True, help="Show what turning Evented PLEG off does instead.")
@kubeconfig_option
@verbose_option
def render_cmd(
    node: str | None,
    kubelet_version: str | None,
    runtime_version: str | None,
    name: str,
    disable: bool,
    kubeconfig: str | None,
    verbose: bool,
) -> None:
    """The exact drop-ins a node would get, and where they go."""
    spec = NodeConfigSpec.model_validate({"eventedPleg": not disable})
    source = "defaults"
    if node is not None:
        with api_client(kubeconfig) as api:
            try:
                facts = node_view(nodes.get_node(api, node)).facts
            except NotFound:
                fail(f"node {node!r} not found (kubectl get nodes)", EXIT_NOT_FOUND)
            try:
                spec = NodeConfigSpec.model_validate(nodeconfigs.get(api, name).get("spec") or {})
                source = f"NodeConfig {name!r}"
            except NotServed:
                source = "defaults (the NodeConfig CRD is not installed)"
            except NotFound:
                source = f"defaults (no NodeConfig {name!r})"
    elif kubelet_version and runtime_version:
        facts = compat.NodeFacts("offline", kubelet_version, runtime_version)
    else:
        fail("give --node NAME, or --kubelet-version and --runtime for an offline render")
    enabled = spec.evented_pleg and not disable
    verdict = compat.verdict(
        facts, compat.Policy(spec.include_control_plane, spec.allow_risky, spec.runtime.value)
    )
    from eventedpleg.core import render  # noqa: PLC0415 - jinja2 and tomlkit only once there is work

    rendered = render.render(enabled=enabled, owner=name, kubelet_config_mode=spec.kubelet_config.value)
    click.echo(f"# node {facts.name}: kubelet {facts.kubelet_version}, runtime {facts.runtime_version}")
    click.echo(f"# spec: {source}")
    click.echo(f"# verdict: {verdict.level} — {verdict.summary}")
    click.echo(f"# config {rendered.hash} (ConfigMap {rendered.configmap_name})")
    if verdict.targets is None:
        click.echo("# this node would be skipped: nothing is written")
        sys.exit(EXIT_NONE)
    if not enabled:
        click.echo(
            f"# turning off removes our files: <kubelet --config-dir>/{c.KUBELET_DROPIN_NAME}"
            + (f" and /{c.CRIO_DROPIN_DIR}/{c.CRIO_DROPIN_NAME}" if verdict.targets.crio_dropin else "")
        )
        click.echo("# then restarts the runtime and the kubelet and checks relisting is back to 1 s")
        return
    click.echo(
        f"\n# <kubelet --config-dir>/{c.KUBELET_DROPIN_NAME}   (the agent finds the directory on the node)"
    )
    click.echo(rendered.file(c.CM_KEY_KUBELET) or "", nl=False)
    if verdict.targets.crio_dropin:
        click.echo(f"\n# /{c.CRIO_DROPIN_DIR}/{c.CRIO_DROPIN_NAME}")
        click.echo(rendered.file(c.CM_KEY_CRIO) or "", nl=False)
    else:
        click.echo(f"\n# runtime: {verdict.targets.runtime_note}")
