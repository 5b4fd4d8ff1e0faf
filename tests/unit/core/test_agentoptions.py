"""agent-options (operator -> agent) and when the agent acts (the node protocol in eventedpleg.protocol)."""

from __future__ import annotations

import pytest

from eventedpleg import protocol
from eventedpleg.core.agentoptions import AgentOptions, AgentOptionsError
from eventedpleg.core.node.phases.agentdecide import AgentAction, next_action
from eventedpleg.models.nodeconfig import NodeConfigSpec, OnFailure


def test_round_trip_is_compact_camel_case() -> None:
    options = AgentOptions(verify_timeout_seconds=120, heal_fallback=False, on_failure=OnFailure.HALT)
    text = options.to_json()
    assert text == (
        '{"allowStaticPods":false,"guard":true,"guardIncidents":2,"guardWindowSeconds":86400,'
        '"healFallback":false,"onFailure":"Halt","verifyTimeoutSeconds":120}'
    )
    assert AgentOptions.from_json(text) == options


def test_absent_means_defaults_and_bad_input_is_a_clear_error() -> None:
    assert AgentOptions.from_json(None) == AgentOptions()
    with pytest.raises(AgentOptionsError, match="verifyTimeoutSeconds"):
        AgentOptions.from_json('{"verifyTimeoutSeconds": 5}')
    with pytest.raises(AgentOptionsError, match="unknown"):
        AgentOptions.from_json('{"unknown": 1}')
    with pytest.raises(AgentOptionsError):
        AgentOptions.from_json("not json")


def test_from_spec() -> None:
    spec = NodeConfigSpec.model_validate(
        {
            "eventedPleg": True,
            "healFallback": False,
            "includeControlPlane": True,
            "verification": {"timeoutSeconds": 90},
            "rollout": {"onFailure": "Halt"},
        }
    )
    assert AgentOptions.from_spec(spec) == AgentOptions(
        verify_timeout_seconds=90, heal_fallback=False, on_failure=OnFailure.HALT, allow_static_pods=True
    )


def test_from_spec_carries_the_guard() -> None:
    on = AgentOptions.from_spec(NodeConfigSpec.model_validate({"eventedPleg": True}))
    assert (on.guard, on.guard_incidents, on.guard_window_seconds) == (True, 2, 86400)
    guard = {"enabled": False, "incidentsBeforeRollback": 5, "windowSeconds": 3600}
    spec = NodeConfigSpec.model_validate({"eventedPleg": True, "guard": guard})
    off = AgentOptions.from_spec(spec)
    assert (off.guard, off.guard_incidents, off.guard_window_seconds) == (False, 5, 3600)
    assert AgentOptions.from_json(off.to_json()) == off  # what the agent reads back is what was meant


@pytest.mark.parametrize(
    ("state", "desired", "current", "action"),
    [
        ("Applying", "h2", "h1", AgentAction.APPLY),
        ("Applying", "h1", "h1", AgentAction.APPLY),  # re-apply after Drifted: verify again, never assume
        ("Verifying", "h2", "h1", AgentAction.APPLY),  # we were interrupted: finish from the host journal
        ("Verifying", "h1", "h1", AgentAction.IDLE),
        ("Done", "h1", "h1", AgentAction.WATCH),
        ("Done", "h2", "h1", AgentAction.IDLE),
        ("Draining", "h2", "h1", AgentAction.IDLE),
        ("Cordoned", "", "", AgentAction.IDLE),
        ("RolledBack", "h2", "h1", AgentAction.IDLE),
        ("Applying", "", "", AgentAction.IDLE),
    ],
)
def test_next_action(state: str, desired: str, current: str, action: AgentAction) -> None:
    annotations = {protocol.ANN_STATE: state, protocol.ANN_DESIRED: desired, protocol.ANN_CURRENT: current}
    assert next_action({k: v for k, v in annotations.items() if v}) is action
