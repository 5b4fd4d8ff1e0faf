"""What the operator tells an agent besides the rendered files: the `eventedpleg.io/agent-options` annotation.

The operator writes it (with desired-config) from the NodeConfig spec; the agent reads it when it acts. The
rendered files themselves, and the kubeletConfig mode, travel in the hash-named ConfigMap instead.
"""

from __future__ import annotations

import json
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from eventedpleg.models.nodeconfig import NodeConfigSpec, OnFailure


class AgentOptionsError(ValueError):
    """The annotation is not valid JSON for AgentOptions; the agent reports it and changes nothing."""


class AgentOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, alias_generator=to_camel)

    # Time from the kubelet restart to a verdict (spec.verification.timeoutSeconds).
    verify_timeout_seconds: Annotated[int, Field(ge=10, le=3600)] = 300
    # After Done: restart the kubelet when it has silently fallen back to generic PLEG (k8s#129827).
    heal_fallback: bool = True
    # Rollback: restore and re-verify (-> RolledBack). Halt: leave the node as it failed (-> Failed).
    on_failure: OnFailure = OnFailure.ROLLBACK
    # spec.includeControlPlane: static-pod nodes get duplicate containers (k8s#121349, #123087,
    # docs/compatibility.md §5 guardrail 2), so the agent refuses a node with static pod manifests
    # unless true.
    allow_static_pods: bool = False
    # The guard (core.node.phases.guardphase): on a Done node, heal a wedged kubelet by restarting it, and
    # take the gate off once `guard_incidents` incidents fell within `guard_window_seconds`. Off: it only
    # detects and says so (Event, Node condition, metric).
    guard: bool = True
    guard_incidents: Annotated[int, Field(ge=1)] = 2
    guard_window_seconds: Annotated[int, Field(ge=1)] = 86400

    def to_json(self) -> str:
        """Compact annotation value."""
        return json.dumps(self.model_dump(mode="json", by_alias=True), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> AgentOptions:
        """Parse the annotation; absent means defaults."""
        if not text:
            return cls()
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "value"
            raise AgentOptionsError(f"agent-options annotation is invalid: {where}: {first['msg']}") from exc

    @classmethod
    def from_spec(cls, spec: NodeConfigSpec) -> AgentOptions:
        return cls(
            verify_timeout_seconds=spec.verification.timeout_seconds,
            heal_fallback=spec.heal_fallback,
            on_failure=spec.rollout.on_failure,
            allow_static_pods=spec.include_control_plane,
            guard=spec.guard.enabled,
            guard_incidents=spec.guard.incidents_before_rollback,
            guard_window_seconds=spec.guard.window_seconds,
        )
