"""spec.rollout.healthGate, the whole-cluster half's part (pure): a node is taken only while the gate's
pods on it are Ready, and a node given back must have them Ready again `afterSeconds` after it was Done.

The pods' readiness comes in `Target.health`, read by the caller for the nodes the previous pass named
(`watch`): a node not read yet is not taken on this pass, only named, so the next pass reads it. Nothing is
remembered between passes: the after-check runs on the passes from the deadline (the node's Done
state-since plus afterSeconds) until LATE after it; a node whose pods are not Ready then is marked Failed
(a write on the node), which is what keeps the rollout halted afterwards."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from eventedpleg.core.rollout.actions import Action, MarkFailed
from eventedpleg.core.rollout.snapshot import NodeView, Target
from eventedpleg.protocol import Cause

# The first words of the reason of a node the after-check marks Failed, for people; the planner counts it
# `unhealthy` by its cause, WorkloadNotReady (Decider.failure).
UNHEALTHY = "workload not Ready after the node was given back"
# A node not read yet is read for the next pass: plan again this soon.
RECHECK = timedelta(seconds=5)
# How long after its deadline a given-back node is still checked: passes are at most 30 s apart, so the
# check is made (a deadline pass names the node, the next one reads it), yet a pod that fails much later,
# for reasons of its own, never fails the node.
LATE = timedelta(minutes=2)
MAX_NAMED = 5


def names(pods: Sequence[str]) -> str:
    shown = ", ".join(pods[:MAX_NAMED])
    return shown + (f" and {len(pods) - MAX_NAMED} more" if len(pods) > MAX_NAMED else "")


def held(node: NodeView, target: Target) -> str:
    """Why the gate keeps `node` in service now ("" when it may be taken)."""
    pods = target.health.get(node.name)
    if pods is None:
        return "waiting, not cordoned: reading its pods' readiness (rollout.healthGate)"
    if pods:
        return f"waiting, not cordoned: pods not Ready (rollout.healthGate): {names(pods)}"
    return ""


def after(
    done: Sequence[NodeView], target: Target, now: datetime, actions: list[Action], wakes: list[datetime]
) -> list[str] | None:
    """Over the nodes Done at the wanted config: a MarkFailed into `actions` for each node given back whose
    pods are not Ready at its deadline, its wakes into `wakes`; returns the nodes to read for the next pass
    (None: the gate is off, a deletion included)."""
    gate = target.spec.rollout.health_gate
    if not gate.enabled or target.deleting:
        return None
    watch: list[str] = []
    wait = timedelta(seconds=gate.after_seconds)
    for node in done:
        since = node.marks.since
        if since is None:
            continue
        deadline = since + wait
        if now < deadline:
            wakes.append(deadline)
            continue
        if now >= deadline + LATE:
            continue
        watch.append(node.name)
        pods = target.health.get(node.name)
        if pods is None:
            wakes.append(now + RECHECK)
        elif pods and not node.marks.cordoned_by_us:  # still ours to give back: checked after that
            actions.append(
                MarkFailed(
                    node.name,
                    node.resource_version,
                    f"{UNHEALTHY}: {gate.after_seconds}s after it was Done, pods not Ready "
                    f"(rollout.healthGate): {names(pods)}; left as it is, the rollout halts; "
                    f"`eventedpleg retry {target.name} --node {node.name}` takes it again once they are",
                    cause=Cause.WORKLOAD_NOT_READY,
                )
            )
    return watch
