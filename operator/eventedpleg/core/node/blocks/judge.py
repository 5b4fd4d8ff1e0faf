"""Whether an apply may go ahead on this host, and the kubelet version it verifies against. Pure.

The apply (core.node.phases.applyphase) and the host check (core.node.phases.hostcheckphase) both judge with
this, so the host check's verdict is the one an apply would reach.
"""

from __future__ import annotations

from eventedpleg.core import render
from eventedpleg.core.node.blocks.nodeapi import AgentNode
from eventedpleg.core.node.facts.hostplan import ApplyPlan, HostFacts, ManagedState, Refusal, plan_host
from eventedpleg.core.versions import Version, VersionError, parse_version


def node_version(node: AgentNode) -> Version | None:
    try:
        return parse_version(node.kubelet_version)
    except VersionError:
        return None


def kubelet_version(node: AgentNode, facts: HostFacts) -> Version | None:
    """The kubelet version verification goes by: the host's binary, else the Node's status."""
    return facts.kubelet_version or node_version(node)


def judge(
    node: AgentNode,
    facts: HostFacts,
    rendered: render.RenderedConfig,
    previous: ManagedState,
    *,
    allow_static_pods: bool,
) -> tuple[ApplyPlan, Version] | Refusal:
    """Go ahead (the host plan, and the kubelet version to verify against) or refuse (the node is Skipped
    with the refusal's message), before anything is touched. The host check (core.node.phases.hostcheckphase)
    judges with this too, so that its verdict is the one an apply would reach."""
    decision = plan_host(facts, rendered, previous, allow_static_pods=allow_static_pods)
    version = kubelet_version(node, facts)
    if isinstance(decision, Refusal) or version is None:
        return refusal_of(decision)
    return decision, version


def refusal_of(decision: ApplyPlan | Refusal) -> Refusal:
    """The decision's refusal, or (for a plan) the one for a kubelet version that could not be read."""
    if isinstance(decision, Refusal):
        return decision
    return Refusal("cannot read the kubelet version", "check `kubelet --version` on the host")
