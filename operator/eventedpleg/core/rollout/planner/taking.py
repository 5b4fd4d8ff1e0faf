"""A node to be taken: offered to the gates once its agent is live (and, with approval: Manual, once a
person approved it), taken again after a drain timeout's back-off, or cordoned after its taint's wait
(drain.taintBeforeCordon). The Cordon itself carries what the Cordon step classifies the node by."""

from __future__ import annotations

from eventedpleg.core import compat, hostcheck
from eventedpleg.core.rollout import actions
from eventedpleg.core.rollout.actions import AskApproval, Uncordon, approval_text
from eventedpleg.core.rollout.drain.policy import DrainPolicy
from eventedpleg.core.rollout.drain.takeverdict import NodeToTake
from eventedpleg.core.rollout.planner.decider import LEFT, Decider
from eventedpleg.core.rollout.planner.tally import Count
from eventedpleg.core.rollout.snapshot import NodeView, Target
from eventedpleg.models.nodeconfig import Approval
from eventedpleg.protocol import Cause, NodeState, format_time

# Status notes of a node not taken because its agent shows no sign of life start with this.
NO_AGENT = "not cordoned, no live agent: "

# Status notes of a node left in service by the Cordon step's last look (eventedpleg.io/blocked).
BLOCKED = "waiting, not cordoned: "


def offer(d: Decider, want: str) -> None:
    """The node may be taken towards `want`: a candidate while its agent is live. Without one it is not
    taken (named in status); a deletion gives it back as it is, as nothing can revert it."""
    absent = d.agent_absence()
    node, target = d.node, d.target
    if not absent and node.agent_pod is not None and not node.agent_pod.ready and not target.deleting:
        # Within its grace a not-Ready agent still counts as live for a node already taken; a node is
        # never taken while its agent pod is not Ready at all (its Ready event plans the node again).
        d.count(Count.NO_AGENT)
        d.note(NodeState.PENDING, NO_AGENT + node.agent_pod.not_ready, cause=Cause.NO_AGENT)
        return
    if not absent:
        _candidate(d, want)
        return
    if target.deleting:
        if node.marks.owner == target.name:
            d.count(Count.IN_FLIGHT)
            left = f"not reverted: {absent}; {LEFT}"
            d.note(node.marks.state or NodeState.PENDING, left)
            d.act(actions.release(node, keep_current=True, left=left))
        return
    d.count(Count.NO_AGENT)
    d.note(NodeState.PENDING, NO_AGENT + absent, cause=Cause.NO_AGENT)


def _candidate(d: Decider, want: str) -> None:
    """The node may start towards `want`, once a person approved it for `want` (approval: Manual; a
    node being reverted on deletion needs none). Until then it stays in service, untouched but for the
    mark that its Event was sent."""
    node, marks, target = d.node, d.node.marks, d.target
    if (
        target.spec.rollout.approval is Approval.MANUAL
        and not target.deleting
        and target.approved.get(node.name) != want
    ):
        d.count(Count.AWAITING_APPROVAL)
        d.note(NodeState.AWAITING_APPROVAL, approval_text(node.name, want))
        if marks.awaiting_approval != want:
            d.act(AskApproval(node.name, node.resource_version, want))
        return
    d.candidate = want
    d.count(Count.OFFERED)
    if marks.blocked:  # left in service when last looked at; the Cordon step looks again
        stuck = marks.cause is Cause.DRAIN_BLOCKED  # a drain that could never finish: waiting alone won't do
        d.count(Count.STUCK, stuck)
        d.note(NodeState.PENDING, f"{BLOCKED}{marks.blocked}", stuck=stuck)


def drain_retry(d: Decider) -> bool:
    """A node given back Failed after a drain timeout, with automatic retries left (spec.drain.retries):
    not a failure; taken again once its back-off has passed. True when this decides the node."""
    marks, drain = d.node.marks, d.target.drain
    attempt = marks.drain_timeouts
    if not (
        marks.state is NodeState.FAILED
        and not marks.cordoned_by_us
        and marks.desired == d.want
        and drain.retried(attempt)
    ):
        return False
    due = (marks.since or d.now) + drain.backoff(attempt)
    d.count(Count.RETRY_PENDING)
    if d.now < due:
        d.wakes += (due,)
        d.note(NodeState.FAILED, f"{marks.reason}; taken again at {format_time(due)}")
        d.retrying += (d.notes[-1],)
        return True
    offer(d, d.want)
    return True


def before_cordon(d: Decider, want: str) -> None:
    """A node chosen and tainted (drain.taintBeforeCordon): it was started, so it is cordoned once its
    wait is over whatever the gates say now, as a node in progress finishes. A node that is not to be
    taken after all loses our taint with the write that gives it back (Release, Uncordon), never in a
    write of its own: a node untainted and then taken again would be tainted again, round and round."""
    node, marks, target = d.node, d.node.marks, d.target
    assert marks.tainted_since is not None  # waiting_for_cordon
    due = target.drain.cordon_at(marks.tainted_since)
    if d.now < due:
        d.wakes += (due,)
        d.note(NodeState.PENDING, f"tainted (drain.taintBeforeCordon); cordoned at {format_time(due)}")
    elif not node.ready:
        d.note(NodeState.PENDING, "tainted; waiting: node is NotReady")
    elif absent := d.agent_absence():  # our taint off again: it waits in service for its agent
        d.note(NodeState.PENDING, NO_AGENT + absent, cause=Cause.NO_AGENT)
        d.act(
            Uncordon(
                node.name,
                node.resource_version,
                node.unschedulable,  # not cordoned by us: whatever it is stays
                marks.autoscaler_hold,
                node.our_taints,
                agent_gone=absent,
            )
        )
    else:
        d.note(NodeState.PENDING, "tainted; cordoning")
        d.act(cordon_action(node, target, want, d.inputs.policy))


def cordon_action(node: NodeView, target: Target, want: str, policy: compat.Policy) -> actions.Cordon:
    """Take the node (the gates start it; a node tainted before its cordon comes back here)."""
    turning_on = want == target.hash_on and target.spec.evented_pleg  # taking our files off: never refused
    mode = target.spec.kubelet_config.value if turning_on else ""
    take = take_candidate(node, target.drain, policy, refusal_mode=mode)
    return actions.Cordon(
        node.name,
        node.resource_version,
        target.name,
        want,
        target.spec.include_control_plane,
        was_unschedulable=node.unschedulable,
        agent_options=target.agent_options,
        drain=target.drain,
        autoscaler_user=node.autoscaler_user,
        blocked=node.marks.blocked,
        host_refusal=take.host_refusal,
        taints=node.our_taints,
        in_place=take.in_place,
        drained_because=take.drained_because,
        retrying=take.retrying,
    )


def take_candidate(
    node: NodeView,
    drain: DrainPolicy,
    policy: compat.Policy,
    *,
    refusal_mode: str,
    allow_force_delete: bool = False,
) -> NodeToTake:
    """What the Cordon step's take classification (drain.takeverdict) reads of `node`: the planner's Cordon
    carries it, preflight classifies with it, so both judge a node alike. `refusal_mode`: the
    kubeletConfig mode the agent's host check is read for ("" when nothing is turned on)."""
    in_place, drained_because = _in_place(node, drain, policy)
    return NodeToTake(
        drain,
        policy.include_control_plane,
        host_refusal=_host_refusal(node, refusal_mode),
        in_place=in_place,
        drained_because=drained_because,
        tainted=node.our_taints.since is not None,
        allow_force_delete=allow_force_delete,
        retrying=node.marks.state is NodeState.FAILED and drain.retried(node.marks.drain_timeouts),
    )


def _in_place(node: NodeView, drain: DrainPolicy, policy: compat.Policy) -> tuple[bool, str]:
    """The Cordon's in_place and drained_because (spec.drain.mode: InPlace; compat.in_place_refusal)."""
    if not drain.in_place:
        return False, ""
    refusal = compat.in_place_refusal(node.facts, compat.verdict(node.facts, policy))
    return not refusal, refusal


def _host_refusal(node: NodeView, mode: str) -> str:
    """What the node's agent said it would refuse in kubeletConfig `mode`, before anything is taken; ""
    when it would go ahead or has not said, or nothing is turned on (`mode` "")."""
    if not mode or not node.marks.host_check:
        return ""
    check = hostcheck.parse(node.marks.host_check)
    if check is None:
        return ""
    refusal = check.refusal(mode)
    if not refusal:
        return ""
    return f"{refusal} (the agent's host check at {format_time(check.at)})"
