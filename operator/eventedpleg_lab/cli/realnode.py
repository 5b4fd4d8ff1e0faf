"""`eventedpleg realnode`: a real kubelet and containerd on this machine (test and benchmark rig).

Linux and root only; it changes kernel tunables and cgroups like any kubelet. Everything else stays in
<cache>/realnode ($EVENTEDPLEG_REALNODE_DIR). See docs/realnode.md.
"""

from __future__ import annotations

import json
import time

import click

from eventedpleg.cli.examples import examples
from eventedpleg_lab.cli.errors import LabGroup
from eventedpleg_lab.localcluster.build import BuildError
from eventedpleg_lab.realnode import config as cfg
from eventedpleg_lab.realnode import rig as rn
from eventedpleg_lab.realnode import wedge as wg


def _log(message: str) -> None:
    click.echo(message, err=True)


def _node() -> rn.RealNode:
    return rn.RealNode(log=_log)


@click.group(
    cls=LabGroup,
    epilog=examples(
        (
            "a real kubelet 1.36 and containerd here, with 3 static pods (root)",
            "eventedpleg realnode up --kubelet 1.36 --pods 3",
        ),
        ("stop them", "eventedpleg realnode down"),
    ),
)
def realnode() -> None:
    """A real node: kubelet v1.36/v1.37 + containerd 2.2 (or Debian's 1.6), static hostNetwork pods."""


@realnode.command(
    "build",
    epilog=examples(
        ("both kubelets and their runtimes", "eventedpleg realnode build --kubelet 1.36 --kubelet 1.37")
    ),
)
@click.option("--kubelet", "kubelets", multiple=True, type=click.Choice(sorted(rn.KUBELETS)))
def build_cmd(kubelets: tuple[str, ...]) -> None:
    """Install the Debian packages and compile (or find cached) kubelets, containerd 2.2 and crictl.

    Cold, right after `eventedpleg cluster build` (the v1.36 kubelet shares its module and build cache):
    7 min 16 s measured on 2 cores (v1.37 kubelet 273 s, containerd 72 s, crictl 42 s). Then: seconds."""
    start = time.monotonic()
    try:
        bins = _node().setup(kubelets or tuple(rn.KUBELETS))
    except (BuildError, rn.RigError) as exc:
        raise click.ClickException(str(exc)) from exc
    for key, path in bins.kubelet.items():
        click.echo(f"kubelet {key:8} {path}")
    for name, path in bins.containerd.items():
        click.echo(f"{name:16} {path}")
    click.echo(f"{'crictl':16} {bins.crictl}")
    _log(f"[realnode] ready in {time.monotonic() - start:.0f}s")


@realnode.command(
    "up",
    epilog=examples(
        (
            "kubelet 1.36 on containerd 2.2, 3 idle static pods, the gate left to the agent",
            "eventedpleg realnode up --kubelet 1.36 --pods 3",
        ),
        (
            "kubelet 1.37 on containerd 1.6 with the gate on",
            "eventedpleg realnode up --kubelet 1.37 --runtime containerd-1.6 --gate on",
        ),
    ),
)
@click.option("--kubelet", default="1.36", show_default=True, type=click.Choice(sorted(rn.KUBELETS)))
@click.option(
    "--runtime",
    default=cfg.RigRuntime.CONTAINERD_22.value,
    show_default=True,
    type=click.Choice([r.value for r in cfg.RigRuntime]),
)
@click.option("--pods", default=0, show_default=True, type=click.IntRange(0, 140), help="Idle static pods.")
@click.option(
    "--gate",
    type=click.Choice(["on", "off", "unset"]),
    default="unset",
    show_default=True,
    help="EventedPLEG in a rig drop-in; unset leaves it to the agent.",
)
def up(kubelet: str, runtime: str, pods: int, gate: str) -> None:
    """Start containerd and the kubelet (building what is missing first). Replaces a running rig."""
    node = _node()
    spec = rn.RigSpec(
        kubelet=kubelet,
        runtime=cfg.RigRuntime(runtime),
        pods=pods,
        gate={"on": True, "off": False, "unset": None}[gate],
    )
    start = time.monotonic()
    try:
        node.setup((kubelet,))
        node.up(spec)
    except (BuildError, rn.RigError) as exc:
        raise click.ClickException(str(exc)) from exc
    _log(f"[realnode] up in {time.monotonic() - start:.0f}s; stop it with `eventedpleg realnode down`")
    click.echo(json.dumps(node.status(), indent=2))


@realnode.command("down", epilog=examples(("stop the kubelet and the runtime", "eventedpleg realnode down")))
def down() -> None:
    """Stop the kubelet, remove the pods, stop containerd and clean up mounts (by PID, nothing else)."""
    for line in _node().down() or ["nothing was running"]:
        click.echo(line)


@realnode.command(
    "wedge",
    epilog=examples(
        ("fire it on a rig up with kubelet 1.36, gate on, then heal", "eventedpleg realnode wedge --heal")
    ),
)
@click.option("--containers", default=wg.CONTAINERS, show_default=True, type=click.IntRange(1, 5000))
@click.option(
    "--watch", default=wg.WATCH_SECONDS, show_default=True, type=float, help="Seconds to wait for it."
)
@click.option(
    "--heal/--no-heal", default=False, help="Restart the kubelet afterwards and remove our sandbox."
)
def wedge(containers: int, watch: float, heal: bool) -> None:
    """Fire the PLEG-channel wedge on the running rig (kubelet 1.36 with the gate on): stop the kubelet,
    churn containers through CRI, start it (eventedpleg_lab.realnode.wedge). Prints what happened."""
    node = _node()
    try:
        fired = wg.fire(node, containers=containers, watch=watch)
        doc = fired.to_json()
        if fired.wedged:
            pleg = wg.PlegMetrics.read(node)
            doc["discards"] = pleg.discards
        if heal:
            node.restart_kubelet()
            wg.clear(node)
            doc["restarted"] = True
    except rn.RigError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(json.dumps(doc, indent=2))


@realnode.command("status", epilog=examples(("what runs, as JSON", "eventedpleg realnode status")))
def status() -> None:
    """What runs (PIDs, health, pods) as JSON."""
    click.echo(json.dumps(_node().status(), indent=2))
