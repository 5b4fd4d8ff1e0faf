"""A node in our hands, between its cordon and its agent's verdict: the next step of a node Draining
(paused while its agent is away, given back when the agent does not return), or the deadline by which
its agent must report while it Applies and Verifies; a node tainted before its cordon is in flight too."""

from __future__ import annotations

from datetime import datetime, timedelta

from eventedpleg.core import hostcheck
from eventedpleg.core.rollout import actions
from eventedpleg.core.rollout.actions import Action, Drain, MarkFailed
from eventedpleg.core.rollout.planner.decider import Decider
from eventedpleg.core.rollout.planner.taking import before_cordon
from eventedpleg.core.rollout.planner.tally import Count
from eventedpleg.core.rollout.snapshot import NodeView, Target
from eventedpleg.protocol import NodeState, format_time

# The agent gets the verification timeout plus this much for restarts and reporting before we give up.
AGENT_GRACE = timedelta(seconds=120)


def tainted(d: Decider) -> None:
    """A selected, eligible node we chose and tainted: in progress."""
    d.count(Count.IN_FLIGHT)
    d.count(Count.UPDATING)
    if d.target.deleting and not d.target.reverting:
        d.act(actions.release(d.node, keep_current=True))  # onDelete: Keep stops before the cordon too
    else:
        before_cordon(d, d.want)


def in_flight_action(d: Decider, want: str) -> Action | None:
    """The next step for a node we already hold (Draining .. Verifying)."""
    node, marks, now = d.node, d.node.marks, d.now
    since = marks.since or now
    if marks.state is NodeState.DRAINING and (absent := d.agent_absence()):
        # Taken, but its agent is gone: nothing was asked of it yet, so the node is known unchanged. An
        # agent that just stopped (a rolling update of its DaemonSet) gets GONE_GRACE to come back; the
        # drain waits meanwhile, as the next step would ask the agent.
        back_by = hostcheck.back_by(marks.host_check)
        if back_by is not None and now < back_by:
            _drain_paused(d, back_by, absent)
            return None
        return actions.uncordon(node, agent_gone=absent)
    if marks.state is NodeState.DRAINING and (gone_at := d.pod_gone_at()) is not None:
        # Its agent pod is not Ready, not for GONE_GRACE yet: the drain waits likewise, so that a stuck
        # agent is never asked to apply; it goes on once the pod is Ready again.
        assert node.agent_pod is not None  # gone_at
        at = format_time(gone_at)
        _drain_paused(d, gone_at, f"{node.agent_pod.not_ready} (given back at {at} unless it is Ready again)")
        return None
    if marks.state is NodeState.DRAINING:
        drain_deadline = d.target.drain.deadline(since)
        if drain_deadline is not None:
            d.wakes += (drain_deadline,)
        reached = drain_deadline is not None and now >= drain_deadline
        return _drain(node, d.target, want, deadline_reached=reached)
    return _agent_deadline(d, since)


def _agent_deadline(d: Decider, since: datetime) -> MarkFailed | None:
    """Applying or Verifying: the agent reports within the verification timeout and AGENT_GRACE, else the
    node is marked Failed, left cordoned, as nobody knows whether its files changed."""
    node, marks, now = d.node, d.node.marks, d.now
    deadline = since + timedelta(seconds=d.target.spec.verification.timeout_seconds) + AGENT_GRACE
    d.wakes += (deadline,)
    if now < deadline:
        return None
    waited = int((deadline - since).total_seconds())
    seen = hostcheck.absence(marks.host_check, now) or "its agent's host check is fresh (the agent runs)"
    return MarkFailed(
        node.name,
        node.resource_version,
        f"no report from the agent within {waited}s of {marks.state} (since "
        f"{format_time(since)}); {seen}. Unknown whether its files changed, so it stays "
        f"cordoned: `kubectl get pods -A -l app.kubernetes.io/component=agent --field-selector "
        f"spec.nodeName={node.name}` finds its agent; once the agent runs it finishes or rolls back the "
        f"apply by itself; `eventedpleg retry {node.name}` takes the node again",
    )


def _drain_paused(d: Decider, until: datetime, why: str) -> None:
    """The drain waits for the node's agent until `until`, when the node is given back unless the agent
    is back: this note replaces the node's others (it says more), and the decision wakes then."""
    if until not in d.wakes:  # a not-Ready pod's is in already (agent_absence)
        d.wakes += (until,)
    d.notes = tuple(n for n in d.notes if n.name != d.node.name)
    d.note(NodeState.DRAINING, f"drain paused, waiting for its agent: {why}")


def _drain(node: NodeView, target: Target, want: str, *, deadline_reached: bool) -> Drain:
    return Drain(
        node.name,
        node.resource_version,
        hash=want,
        agent_options=target.agent_options,
        include_control_plane=target.spec.include_control_plane,
        deadline_reached=deadline_reached,
        drain=target.drain,
        was_unschedulable=node.marks.was_unschedulable,
        reason=node.marks.reason,
        autoscaler_hold=node.marks.autoscaler_hold,
        drain_timeouts=node.marks.drain_timeouts,
        cordoned=node.unschedulable,
        taints=node.our_taints,
    )


def progress_text(state: NodeState) -> str:
    return {
        NodeState.DRAINING: "evicting pods",
        NodeState.APPLYING: "agent is writing drop-ins and restarting the runtime and kubelet",
        NodeState.VERIFYING: "agent is verifying that Evented PLEG is in use",
    }.get(state, "")
