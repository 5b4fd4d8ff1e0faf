"""The host check before any node is taken: for each kubeletConfig mode, the refusal the agent would report
if asked now to turn Evented PLEG on, published as the `eventedpleg.io/host-check` annotation (core.hostcheck)
for the operator to read before the cordon. A phase that yields effects (core.node.blocks.effects). Pure.

It looks as the apply phase looks (ReadHost(True), ReadApplied()), judges with its own judge
(core.node.blocks.judge) and reads the backups the apply would take first (Backup), but changes nothing on
the host: no files, no restarts, no transaction. The one
write is the annotation, and only when it would say something new.
"""

from __future__ import annotations

from datetime import timedelta

from eventedpleg import protocol
from eventedpleg.core import hostcheck, render
from eventedpleg.core.hostcheck import HostCheck
from eventedpleg.core.node.blocks.effects import (
    Backup,
    Now,
    Phase,
    PublishHostCheck,
    ReadApplied,
    ReadHost,
    act,
    ask,
)
from eventedpleg.core.node.blocks.hostfault import Faulted
from eventedpleg.core.node.blocks.judge import judge
from eventedpleg.core.node.blocks.nodeapi import AgentNode
from eventedpleg.core.node.facts.hostplan import ApplyPlan, HostFacts, ManagedState, Refusal
from eventedpleg.models.nodeconfig import KubeletConfigMode

# A verdict that has not changed is written again this often, so that its time (which the operator's Skipped
# reason and preflight show) stays recent: one API write per node an hour, not one per look. The check says
# so (`every`): the operator takes a check older than three of these as an agent that is not running.
REFRESH = timedelta(hours=1)
# The operator renders with the NodeConfig's name as owner, which the agent learns only once a NodeConfig
# has taken the node (eventedpleg.io/owner). The owner only fills the comment on each rendered file's first
# line, after the marker by which decide knows our files (hostplan.MANAGED_MARKER), and no refusal depends
# on a rendered file's bytes: any owner gives the verdict the real apply gives.
OWNER = "host-check"


def look(node: AgentNode, clock: Now) -> Phase[HostCheck]:
    """What an apply turning Evented PLEG on would decide now, per kubeletConfig mode ("" = go ahead). A
    host fault reading the host is what an apply would report, in every mode."""
    try:
        facts = yield from ask(ReadHost(True), HostFacts)
        previous = yield from ask(ReadApplied(), ManagedState)
    except Faulted as exc:
        return HostCheck(clock(), {mode.value: exc.fault.line() for mode in KubeletConfigMode})
    owner = node.annotations.get(protocol.ANN_OWNER) or OWNER
    refusals: dict[str, str] = {}
    for mode in KubeletConfigMode:
        rendered = render.render(enabled=True, owner=owner, kubelet_config_mode=mode.value)
        # Static pods are allowed here: whether a node with static pods may be taken is the operator's call
        # (spec.includeControlPlane, judged from the node's mirror pods), not a verdict on the host.
        verdict = judge(node, facts, rendered, previous, allow_static_pods=True)
        refusals[mode.value] = (
            verdict.message if isinstance(verdict, Refusal) else (yield from _backs_up(verdict[0]))
        )
    return HostCheck(clock(), refusals, REFRESH.total_seconds())


def _backs_up(plan: ApplyPlan) -> Phase[str]:
    """The apply's first host step is an exact copy of each file it will change (read only, bounded): a
    path that is not a regular file (a directory or a FIFO where a drop-in goes), or cannot be read, would
    end the apply after the cordon; here it is the refusal, so the node is never taken for it."""
    try:
        yield from ask(Backup(tuple(change.path for change in plan.changes)), tuple)
    except Faulted as exc:
        return exc.fault.line()
    return ""


def is_news(check: HostCheck, published: HostCheck | None) -> bool:
    """Whether `check` must be written over what the Node says: other refusals, or a stale time."""
    if published is None or published.stopped is not None or dict(published.refusals) != dict(check.refusals):
        return True
    if published.at.tzinfo is None:  # not written by an agent (ours are in UTC): write ours
        return True
    age = check.at - published.at
    return not timedelta(0) <= age < REFRESH  # a time in the future is no better than an old one


def host_check(node: AgentNode, clock: Now) -> Phase[HostCheck]:
    """Look, and publish the verdict on our Node when it is news (`node` as read just before)."""
    check = yield from look(node, clock)
    if is_news(check, hostcheck.parse(node.annotations.get(protocol.ANN_HOST_CHECK))):
        yield from act(PublishHostCheck(check))
    return check
