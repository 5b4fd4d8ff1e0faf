"""When the agent acts, from its Node's annotations (the protocol in eventedpleg.protocol). Pure.

The rule, in order:
- no desired-config: IDLE (the node is not, or not yet, asked for anything);
- state=Applying: APPLY -- the operator's request, also when current-config already equals desired-config
  (a re-apply request, e.g. after Drifted: verify again, never report Done without looking);
- state=Verifying and desired-config != current-config: APPLY -- this agent was interrupted between writing
  the files and reporting; the host journal lets it finish exactly;
- state=Done and current-config == desired-config: WATCH for drift and silent fallback;
- anything else (Draining, RolledBack, Failed, Skipped, Drifted, Done at another hash, a state this
  version does not know): IDLE -- it is the operator's turn, or a human's.

Apart from that rule, the host check (core.node.phases.hostcheckphase) runs whenever the agent does not hold
the node (core.node.blocks.nodeapi.holds_node).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from eventedpleg import protocol
from eventedpleg.core.evidence import Evidence
from eventedpleg.core.node.blocks.effects import NodeEvent, Phase, Report, act
from eventedpleg.core.node.blocks.nodeapi import AgentNode, holds_node
from eventedpleg.protocol import NodeState
from eventedpleg.reasons import EventReason


class AgentAction(StrEnum):
    APPLY = "apply"  # apply desired-config, verify, report
    WATCH = "watch"  # Done: look for drift and silent fallback from time to time
    IDLE = "idle"  # nothing for the agent (the operator's turn, or not managed)


def next_action(annotations: Mapping[str, str]) -> AgentAction:
    state = annotations.get(protocol.ANN_STATE, "")
    desired = annotations.get(protocol.ANN_DESIRED, "")
    current = annotations.get(protocol.ANN_CURRENT, "")
    if not desired:
        return AgentAction.IDLE
    if state == NodeState.APPLYING.value:
        return AgentAction.APPLY
    if state == NodeState.VERIFYING.value and desired != current:
        return AgentAction.APPLY
    if state == NodeState.DONE.value and current == desired:
        return AgentAction.WATCH
    return AgentAction.IDLE


def unexpected(node: AgentNode, error: str, retry_in: float) -> Phase[None]:
    """An error of the agent's own (not a host fault: those end their phase in a report), said on the Node
    once by the loop (agent.runner): a warning Event, and Failed while an apply holds the node -- the
    operator would otherwise wait out its agent timeout and guess."""
    reason = (
        f"the agent failed: {error}; it retries with back-off (next in {retry_in:.0f}s); if this persists, "
        "read the log of the agent pod on this node and report it with that log"
    )
    if holds_node(node.annotations):
        yield from act(Report(NodeState.FAILED, reason, Evidence(result="error", error=error)))
    yield from act(NodeEvent(EventReason.AGENT_ERROR, reason, warning=True))
