"""Which nodes a NodeConfig selects, whether each is eligible and who owns it (pure), and a memo of those
answers. They depend only on the node's facts and the NodeConfig's selector, policy and peers, so a
caller that plans again and again decides selection only for nodes whose facts changed."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from eventedpleg.core import compat
from eventedpleg.core.rollout import selector
from eventedpleg.core.rollout.snapshot import NodeView, Peer, Target


@dataclass(frozen=True)
class Selection:
    """How the target sees one node: selected by it, eligible (and owned by it), the owner, the verdict."""

    selected: bool
    eligible: bool
    owner: str
    verdict: compat.Verdict | None


def select(node: NodeView, target: Target, policy: compat.Policy) -> Selection:
    selected = selector.matches(target.spec.node_selector, node.labels)
    verdict = compat.verdict(node.facts, policy) if selected else None
    owner = _owner_of(node, target) if selected else target.name
    eligible = (
        verdict is not None and verdict.eligible(policy) and not node.skip_labelled and owner == target.name
    )
    return Selection(selected, eligible, owner, verdict)


class SelectionMemo:
    """`select` answers of earlier passes, per node, valid while the node's facts and the target's
    selection inputs (name, age, selector, policy, peers) stay equal. Not thread-safe: one per loop."""

    def __init__(self) -> None:
        self._inputs: tuple[str, datetime, object, compat.Policy, tuple[Peer, ...]] | None = None
        self._entries: dict[str, tuple[object, Selection]] = {}

    def select(self, node: NodeView, target: Target, policy: compat.Policy) -> Selection:
        entry = self._entries.get(node.name)
        if entry is not None and (entry[0] is node.facts or entry[0] == node.facts):
            return entry[1]
        selection = select(node, target, policy)
        self._entries[node.name] = (node.facts, selection)
        return selection

    def begin(self, target: Target, policy: compat.Policy, names: int) -> None:
        """Before a pass: forget everything when what selection depends on changed (or nodes went)."""
        inputs = (target.name, target.created, target.spec.node_selector, policy, target.peers)
        if inputs != self._inputs or len(self._entries) > 2 * names:
            self._inputs, self._entries = inputs, {}


def _owner_of(node: NodeView, target: Target) -> str:
    """The NodeConfig that may manage this node: the oldest of those selecting it."""
    contenders = [(target.created, target.name)]
    contenders += [
        (peer.created, peer.name) for peer in target.peers if selector.matches(peer.selector, node.labels)
    ]
    return min(contenders)[1]


def skip_reason(node: NodeView, selection: Selection, target: Target, policy: compat.Policy) -> str:
    if node.skip_labelled:
        return "labelled eventedpleg.io/skip"
    if selection.owner != target.name:
        owner = selection.owner
        return f"conflict: also selected by NodeConfig {owner!r}, which is older and manages this node"
    verdict = selection.verdict
    if verdict is not None and not verdict.eligible(policy):
        hint = " (set allowRisky: true to include)" if verdict.level is compat.Level.RISKY else ""
        return f"{verdict.level}: {verdict.summary}{hint}"
    return "not eligible"
