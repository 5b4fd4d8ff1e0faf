"""When the agent acts, from its Node's annotations (the protocol in eventedpleg.constants). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from eventedpleg import constants as c
from eventedpleg.constants import NodeState


class Action(StrEnum):
    APPLY = "apply"  # apply desired-config, verify, report
    WATCH = "watch"  # Done: look for drift and silent fallback from time to time
    IDLE = "idle"  # nothing for the agent (the operator's turn, or not managed)


def next_action(annotations: Mapping[str, str]) -> Action:
    state = annotations.get(c.ANN_STATE, "")
    desired = annotations.get(c.ANN_DESIRED, "")
    current = annotations.get(c.ANN_CURRENT, "")
    if not desired:
        return Action.IDLE
    # Applying: the operator's request (step 3). Verifying with desired != current: we were interrupted
    # between writing files and reporting (agent restart); the host journal lets us finish exactly.
    # Applying with desired == current is a re-apply request (e.g. after Drifted): verify again, never
    # report Done without looking.
    if state == NodeState.APPLYING.value:
        return Action.APPLY
    if state == NodeState.VERIFYING.value and desired != current:
        return Action.APPLY
    if state == NodeState.DONE.value and current == desired:
        return Action.WATCH
    return Action.IDLE
