"""`eventedpleg release-nodes`: what this product left on a Node, undone in one write once no operator is
left to do it (after `helm uninstall`; the chart's cleanup.onUninstall hook runs it). Pure.

The write is the operator's own release (steps.giveback.release_write, protocol step 7) with nothing kept:
our cordon undone unless the node was cordoned before us (was-unschedulable), our taint
(drain.taintBeforeCordon) taken off, the autoscaler keys our cordon added (autoscaler-hold) removed and
the user's kept. On top of it go every other `eventedpleg.io/*` annotation the node carries (the agent's
host check, keys of a newer or older version) and the state label. Only what is on the node is named, so
a node with nothing of ours needs no write."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from eventedpleg import protocol
from eventedpleg.core.rollout import actions
from eventedpleg.core.rollout.snapshot import node_view
from eventedpleg.core.rollout.steps.giveback import release_write
from eventedpleg.core.rollout.steps.requests import Write

PREFIX = f"{protocol.GROUP}/"


@dataclass(frozen=True)
class NodeRelease:
    """One node's write and what it changes, in words (for --dry-run and the log)."""

    node: str
    resource_version: str
    write: Write
    changes: tuple[str, ...]


def release_node(body: Mapping[str, Any]) -> NodeRelease | None:
    """The write that removes every mark of ours from the Node `body` (API dict form); None when it
    carries none."""
    view = node_view(body)
    meta = body.get("metadata") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    planned = release_write(actions.release(view, keep_current=False), keep_host_check=False)
    ours = {key for key in annotations if key.startswith(PREFIX)}
    drop: dict[str, str | None] = dict.fromkeys(sorted({*planned.annotations, *ours} & set(annotations)))
    if protocol.LABEL_STATE in labels:
        drop[protocol.ANN_STATE] = None  # nodes.node_patch removes the label with the annotation it mirrors
    unschedulable = planned.unschedulable
    if unschedulable is not None and unschedulable == view.unschedulable:
        unschedulable = None
    changes: list[str] = []
    if unschedulable is False:
        changes.append("uncordon")
    if planned.taints is not None:
        changes.append(f"remove taint {view.marks.taint}")
    if removed := [key for key in drop if key in annotations]:
        changes.append("remove annotations " + ", ".join(removed))
    if protocol.LABEL_STATE in labels:
        changes.append(f"remove label {protocol.LABEL_STATE}")
    if not changes:
        return None
    return NodeRelease(
        view.name,
        view.resource_version,
        Write(drop, unschedulable, planned.taints),
        tuple(changes),
    )
