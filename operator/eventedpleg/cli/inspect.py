"""`eventedpleg preflight | status | render`: look before (and while) rolling out. They change nothing.
Exit codes: eventedpleg.cli.failures (API and kubeconfig failures are reported there, in one line)."""

from __future__ import annotations

import json
import sys
import threading
from datetime import UTC, datetime
from typing import Any

import click
from pydantic import ValidationError

from eventedpleg import constants as c
from eventedpleg.cli import report
from eventedpleg.cli.examples import examples
from eventedpleg.cli.failures import (
    EXIT_DEGRADED,
    EXIT_NONE,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_PARTIAL,
    fail,
    verbose_option,
)
from eventedpleg.cli.kubeflags import Kube, kube_options
from eventedpleg.core import compat, runtimes
from eventedpleg.core.rollout import selector
from eventedpleg.core.rollout.drain.policy import DrainPolicy
from eventedpleg.core.rollout.snapshot import NodeView, node_view
from eventedpleg.k8s import drain as drainer
from eventedpleg.k8s import nodeconfigs, nodes
from eventedpleg.k8s.client import PAGE
from eventedpleg.k8s.errors import ApiError, Forbidden, NotFound, NotServed
from eventedpleg.models.nodeconfig import DrainSpec, KubeletConfigMode, NodeConfigSpec


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


def _views(api: Any, chunk_size: int = PAGE) -> list[NodeView]:
    return [node_view(body) for body in nodes.list_nodes(api, limit=chunk_size)]


def _maintenances(api: Any) -> dict[str, list[str]]:
    """Other maintenance owners' claims by node, as the operator reads them before a cordon; none when
    this user may not list them (the operator's own role may)."""
    try:
        return drainer.maintenances(api)
    except Forbidden:
        return {}


chunk_size_option = click.option(
    "--chunk-size",
    default=PAGE,
    show_default=True,
    type=click.IntRange(min=1),
    help="Read LISTs in pages of this many items (limit/continue), as kubectl's --chunk-size.",
)


@click.command(
    epilog=examples(
        ("every node, as a NodeConfig with the defaults would see it", "eventedpleg preflight"),
        (
            "as NodeConfig gpu would, with each reason in full",
            "eventedpleg preflight --nodeconfig gpu -o wide",
        ),
        (
            "control-plane nodes and Risky versions too, as JSON",
            "eventedpleg preflight --include-control-plane --allow-risky -o json",
        ),
        before="""\b
What it judges, per node:
  - versions: the kubelet's and the container runtime's (node status) against the compatibility matrix
    (README "Compatibility"): Supported, Risky (only with --allow-risky / spec.allowRisky) or Unsupported;
  - the host: the check the node's agent last reported on its Node (eventedpleg.io/host-check): whether
    it would refuse the change in the NodeConfig's kubeletConfig mode, and why; `?` until an agent checked;
  - the drain: what draining the node now would meet: the pods it would evict, static pods, and pods no
    PodDisruptionBudget or drain option would ever let go.

\b
Columns:
  NODE      the node, in the order the rollout would take it (spec.rollout.order)
  KUBELET   the kubelet's version (node status)
  RUNTIME   the container runtime and its version (node status)
  VERDICT   Supported, Risky or Unsupported; "(eligible)" when a Risky node would still be taken
  WRITES    what the agent would write there: the kubelet drop-in, and the CRI-O drop-in on CRI-O
  HOST      ok, refuses (the agent would not write there: skipped), or ? (no agent has checked it yet)
  DRAIN     pods the drain would evict, "never finishes" (a PodDisruptionBudget or pod blocks it),
            "held" (drain.blockingPodSelector, a NodeMaintenance) or "in place" (drain.mode: InPlace)
  REASON    why, in one line (-o wide: in full)

\b
Exit codes: 0 every selected node eligible, 3 some would be skipped, 4 none is eligible.""",
    ),
)
@click.option("--nodeconfig", "name", default=None, help="Judge with this NodeConfig's selector and opt-ins.")
@click.option("--include-control-plane", is_flag=True, help="As spec.includeControlPlane: true.")
@click.option("--allow-risky", is_flag=True, help="As spec.allowRisky: true.")
@click.option("--no-guard", is_flag=True, help="As spec.guard.enabled: false (kubelets 1.32-1.36 are Risky).")
@click.option(
    "-o", "--output", type=click.Choice(["table", "wide", "json"]), default="table", show_default=True
)
@chunk_size_option
@kube_options
@verbose_option
def preflight(
    name: str | None,
    include_control_plane: bool,
    allow_risky: bool,
    no_guard: bool,
    output: str,
    chunk_size: int,
    kube: Kube,
    verbose: bool,
) -> None:
    """Per-node verdicts from the compatibility matrix: what would be changed, skipped, and why."""
    with kube.client() as api:
        spec = _spec(api, name)
        all_nodes = _views(api, chunk_size)
        pods = nodes.all_pods(api, limit=chunk_size)
        pdbs = drainer.all_pdbs(api, limit=chunk_size)
        agents = nodes.agent_pods(api, limit=chunk_size)
        held = _maintenances(api)
        drain = DrainPolicy.of(spec.drain if spec is not None else DrainSpec())
        namespaces = drainer.namespace_labels(api, drain)
    policy = compat.Policy(include_control_plane, allow_risky, guard=not no_guard)
    chosen = all_nodes
    if spec is not None:
        policy = compat.Policy.of(spec)
        chosen = [n for n in all_nodes if selector.matches(spec.node_selector, n.labels)]
    mode = (spec.kubelet_config if spec is not None else KubeletConfigMode.DROP_IN_ONLY).value
    order = spec.rollout.order if spec is not None else None
    rows = report.preflight_rows(
        chosen,
        policy,
        pods,
        pdbs,
        drain,
        mode,
        now=datetime.now(UTC),
        order=order,
        agent_pods=agents,
        health_gate=spec.rollout.health_gate if spec is not None else None,
        turning_on=spec is None or spec.evented_pleg,
        maintenance=held,
        namespaces=namespaces,
        cluster=all_nodes,
    )
    click.echo(
        report.preflight_json(rows, policy)
        if output == "json"
        else report.preflight_table(rows, policy, drain, wide=output == "wide")
    )
    eligible = sum(1 for row in rows if row.taken(policy, drain))
    sys.exit(EXIT_OK if rows and eligible == len(rows) else EXIT_NONE if eligible == 0 else EXIT_PARTIAL)


def _status_code(body: dict[str, Any]) -> int:
    """Degraded 1; complete (Ready, or Available from an operator that predates Ready) 0; else 3. A status
    older than the spec (observedGeneration behind) is still in progress, whatever it says."""
    if report.condition_status(body, "Degraded") == "True":
        return EXIT_DEGRADED
    status = body.get("status") or {}
    if int(status.get("observedGeneration") or 0) < int(body["metadata"].get("generation") or 0):
        return EXIT_PARTIAL
    ready = report.condition_status(body, "Ready")
    done = ready == "True" if ready != "Unknown" else report.condition_status(body, "Available") == "True"
    return EXIT_OK if done else EXIT_PARTIAL


def _agents(api: Any, body: dict[str, Any], chunk_size: int) -> list[dict[str, Any]] | None:
    """The agent pods, read only when the status names a node waiting for its agent."""
    return nodes.agent_pods(api, limit=chunk_size) if report.needs_agent_pods(body) else None


def _status_text(
    body: dict[str, Any],
    views: list[NodeView],
    output: str,
    watching: bool,
    agents: list[dict[str, Any]] | None = None,
) -> str:
    if output == "json":
        return json.dumps(report.status_document(body, views, agents), indent=2)
    if output == "yaml":
        import yaml  # noqa: PLC0415

        return "---\n" + yaml.safe_dump(report.status_document(body, views, agents), sort_keys=False).rstrip()
    stamp = datetime.now(UTC).strftime("%H:%M:%S") if watching else ""
    return report.status_view(body, views, now_text=stamp, agent_pods=agents, wide=output == "wide")


def _show(text: str, output: str, watching: bool) -> None:
    if watching and output in ("table", "wide") and sys.stdout.isatty():
        click.echo("\x1b[H\x1b[2J" + text)  # redraw in place
    else:
        click.echo(text + ("\n" if watching and output in ("table", "wide") else ""))


@click.command(
    epilog=examples(
        ("NodeConfig cluster: conditions and a per-node table", "eventedpleg status"),
        (
            "redrawn at each change until it is Ready, for at most ten minutes",
            "eventedpleg status cluster --watch --timeout 600",
        ),
        (
            "NodeConfig gpu as YAML, through kubectl, in another context",
            "kubectl eventedpleg status gpu -o yaml --context prod",
        ),
    )
)
@click.argument("name", default="cluster")
@click.option(
    "-o", "--output", type=click.Choice(["table", "wide", "json", "yaml"]), default="table", show_default=True
)
@click.option(
    "-w",
    "--watch",
    is_flag=True,
    help="Show it again at each change it shows (a watch on the NodeConfig and the nodes) until it is Ready "
    "or Degraded; -o json|yaml print one document per change.",
)
@click.option(
    "--timeout",
    default=0.0,
    type=click.FloatRange(min=0),
    help="With --watch: stop after this many seconds (0: no limit); the exit code is the last state's.",
)
@chunk_size_option
@kube_options
@verbose_option
def status(
    name: str, output: str, watch: bool, timeout: float, chunk_size: int, kube: Kube, verbose: bool
) -> None:
    """Conditions and per-node progress of a NodeConfig (default: `cluster`).

    \b
    Exit codes: 0 Ready, 1 Degraded, 3 still progressing (or paused, or the status is older than the
    spec); 6 no such NodeConfig."""
    with kube.client() as api:
        body = _nodeconfig(api, name)
        views = _views(api, chunk_size)
        code = _status_code(body)
        if not watch or code != EXIT_PARTIAL:
            click.echo(_status_text(body, views, output, False, _agents(api, body, chunk_size)))
            sys.exit(code)
        from eventedpleg.k8s.follow import follow  # noqa: PLC0415 - only a watch needs the informers

        stop = threading.Event()
        timer = threading.Timer(timeout, stop.set) if timeout else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        shown = ""
        try:
            for seen in follow(api, name, stop, page=chunk_size):
                if seen.nodeconfig is None:
                    fail(f"NodeConfig {name!r} was deleted", EXIT_NOT_FOUND)
                body, views = seen.nodeconfig, [node_view(n) for n in seen.nodes]
                code = _status_code(body)
                agents = _agents(api, body, chunk_size)
                # Most events change nothing shown (a node's heartbeat, a status write that repeats itself).
                now = _status_text(body, views, output, False, agents)
                if now != shown:
                    shown = now
                    _show(_status_text(body, views, output, True, agents), output, watching=True)
                if code != EXIT_PARTIAL:
                    break
        except KeyboardInterrupt:
            pass
        finally:
            stop.set()
            if timer is not None:
                timer.cancel()
        sys.exit(code)


def _configmap_note(kube: Kube, configmap: str) -> str:
    """Whether the operator has rendered that ConfigMap in its namespace yet."""
    from eventedpleg.k8s import configmaps  # noqa: PLC0415 - it imports the renderer (jinja2, tomlkit)

    namespace = kube.resolved_namespace()
    with kube.client() as api:
        try:
            configmaps.read(api, namespace, configmap)
        except NotFound:
            return f"namespace {namespace}: not there (not rendered yet, or the operator runs elsewhere: -n)"
        except ApiError as exc:
            return f"namespace {namespace}: cannot read it ({exc.reason or exc.status})"
    return f"namespace {namespace}: present"


@click.command(
    "render",
    epilog=examples(
        (
            "the drop-ins node-1 would get from NodeConfig cluster, and where they go",
            "eventedpleg render --node node-1",
        ),
        (
            "offline, for a kubelet and runtime version",
            "eventedpleg render --kubelet-version v1.36.4 --runtime cri-o://1.34.1",
        ),
        ("what turning Evented PLEG off writes on node-1", "eventedpleg render --node node-1 --disable"),
    ),
)
@click.option("--node", default=None, help="Render for this node (reads its versions from the cluster).")
@click.option("--kubelet-version", default=None, help="Offline: render for this kubelet version…")
@click.option("--runtime", "runtime_version", default=None, help="…and this runtime, e.g. cri-o://1.34.1")
@click.option(
    "--nodeconfig", "name", default="cluster", show_default=True, help="Spec to render (if it exists)."
)
@click.option("--disable", is_flag=True, help="Show what turning Evented PLEG off does instead.")
@kube_options
@verbose_option
def render_cmd(
    node: str | None,
    kubelet_version: str | None,
    runtime_version: str | None,
    name: str,
    disable: bool,
    kube: Kube,
    verbose: bool,
) -> None:
    """The exact drop-ins a node would get, and where they go."""
    spec = NodeConfigSpec.model_validate({"eventedPleg": not disable})
    source = "defaults"
    if node is not None:
        with kube.client() as api:
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
    verdict = compat.verdict(facts, compat.Policy.of(spec))
    from eventedpleg.core import render  # noqa: PLC0415 - jinja2 and tomlkit only once there is work

    rendered = render.render(enabled=enabled, owner=name, kubelet_config_mode=spec.kubelet_config.value)
    click.echo(f"# node {facts.name}: kubelet {facts.kubelet_version}, runtime {facts.runtime_version}")
    click.echo(f"# spec: {source}")
    click.echo(f"# verdict: {verdict.level} — {verdict.summary}")
    where = f"ConfigMap {rendered.configmap_name}"
    if node is not None:
        where += f" in {_configmap_note(kube, rendered.configmap_name)}"
    click.echo(f"# config {rendered.hash} ({where})")
    if verdict.targets is None:
        click.echo("# this node would be skipped: nothing is written")
        sys.exit(EXIT_NONE)
    profile = runtimes.profile_of(verdict.runtime)
    dropin = profile.dropin if profile is not None else None
    if not enabled:
        click.echo(
            f"# turning off removes our files: <kubelet --config-dir>/{c.KUBELET_DROPIN_NAME}"
            + (f" and {dropin.path}" if dropin is not None else "")
        )
        click.echo("# then restarts the runtime and the kubelet and checks relisting is back to 1 s")
        return
    click.echo(
        f"\n# <kubelet --config-dir>/{c.KUBELET_DROPIN_NAME}   (the agent finds the directory on the node)"
    )
    click.echo(rendered.file(c.CM_KEY_KUBELET) or "", nl=False)
    if dropin is not None:
        click.echo(f"\n# {dropin.path}")
        click.echo(rendered.file(dropin.configmap_key) or "", nl=False)
    else:
        click.echo(f"\n# runtime: {verdict.targets.runtime_note}")
