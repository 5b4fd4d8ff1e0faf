"""The NodeConfig API (eventedpleg.io/v1alpha1): the single source of the CRD.

`eventedpleg.crdgen` turns these models into crds/nodeconfig.yaml. Every cross-field rule lives twice by
necessity: as a pydantic validator (the operator re-validates what it reads) and as a CEL rule attached with
`cel()` (so the API server rejects it at admission). They sit side by side so they cannot drift unnoticed;
tests/unit/test_models.py feeds the same bad specs to both.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from eventedpleg.constants import ConditionType, NodeState

# CEL rules go into the schema under this key; crdgen renames it to x-kubernetes-validations.
CEL_KEY = "x-kubernetes-validations"
PERCENT_RE = re.compile(r"^(100|[1-9][0-9]?)%$")
HHMM_RE = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"
MAX_NODE_STATUSES = 50


def cel(*rules: tuple[str, str]) -> dict[str, Any]:
    """Schema extra carrying CEL rules as (rule, message) pairs."""
    return {CEL_KEY: [{"rule": rule, "message": message} for rule, message in rules]}


class _Model(BaseModel):
    # extra="forbid": an unknown field is an error, never silently dropped (the API server rejects it too,
    # because kubectl uses strict server-side field validation).
    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        populate_by_name=True,
        alias_generator=to_camel,
        use_enum_values=False,
        validate_default=True,
    )

    def to_api(self) -> dict[str, Any]:
        """The object as the API server stores it (camelCase, enums as strings)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


# --- spec -------------------------------------------------------------------------------------------


class Runtime(StrEnum):
    AUTO = "auto"
    CONTAINERD = "containerd"
    CRIO = "cri-o"


class KubeletConfigMode(StrEnum):
    DROP_IN_ONLY = "DropInOnly"  # needs the kubelet's --config-dir (KEP-3983)
    EDIT_CONFIG_FILE = "EditConfigFile"  # opt-in: edit --config in place, backed up and restored


class OnFailure(StrEnum):
    ROLLBACK = "Rollback"
    HALT = "Halt"


class OnDrainTimeout(StrEnum):
    FAIL = "Fail"  # uncordon, mark the node Failed, count it against maxFailedNodes
    SKIP = "Skip"  # uncordon, mark the node Skipped, go on with the next one
    FORCE_DELETE = "ForceDelete"  # delete the remaining pods, bypassing PodDisruptionBudgets


class OnDelete(StrEnum):
    REVERT = "Revert"
    KEEP = "Keep"


class Weekday(StrEnum):
    MONDAY = "monday"
    TUESDAY = "tuesday"
    WEDNESDAY = "wednesday"
    THURSDAY = "thursday"
    FRIDAY = "friday"
    SATURDAY = "saturday"
    SUNDAY = "sunday"


class SelectorOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


LabelKey = Annotated[str, Field(min_length=1, max_length=317)]
LabelValue = Annotated[str, Field(max_length=63)]


class LabelSelectorRequirement(
    _Model,
    json_schema_extra=cel(
        (
            "self.operator in ['In', 'NotIn'] ? size(self.values) > 0 : size(self.values) == 0",
            "values must be non-empty for In/NotIn and empty for Exists/DoesNotExist",
        )
    ),
):
    key: LabelKey
    operator: SelectorOperator
    values: Annotated[list[LabelValue], Field(max_length=64)] = []

    @model_validator(mode="after")
    def _values_match_operator(self) -> LabelSelectorRequirement:
        needs_values = self.operator in (SelectorOperator.IN, SelectorOperator.NOT_IN)
        if needs_values != bool(self.values):
            raise ValueError("values must be non-empty for In/NotIn and empty for Exists/DoesNotExist")
        return self


class LabelSelector(_Model):
    """A Kubernetes LabelSelector; empty selects every node."""

    match_labels: Annotated[dict[LabelKey, LabelValue], Field(max_length=64)] = {}
    match_expressions: Annotated[list[LabelSelectorRequirement], Field(max_length=32)] = []


class Canary(_Model):
    """The first `nodes` nodes go alone and must stay healthy for `soakSeconds` before the rest start."""

    nodes: Annotated[int, Field(ge=0, le=1000)] = 1
    soak_seconds: Annotated[int, Field(ge=0, le=86400)] = 120


class Window(
    _Model,
    json_schema_extra=cel(
        ("(self.start == '') == (self.end == '')", "window.start and window.end must be set together"),
        (
            "size(self.days) == 0 || self.start != ''",
            "window.days needs window.start and window.end",
        ),
    ),
):
    """Maintenance window: new nodes start only inside it (a node already in progress finishes).

    `end` before `start` wraps past midnight. Empty `days` with start/end means every day.
    """

    days: Annotated[list[Weekday], Field(max_length=7)] = []
    start: Annotated[str, Field(pattern=f"{HHMM_RE}|^$", max_length=5)] = ""
    end: Annotated[str, Field(pattern=f"{HHMM_RE}|^$", max_length=5)] = ""
    time_zone: Annotated[
        str,
        Field(
            min_length=1,
            max_length=64,
            pattern=r"^[A-Za-z0-9_+\-/]+$",
            # CEL's getHours(zone) fails on a zone the API server's tzdata does not know, which rejects the
            # object: the admission-time twin of _known_zone below.
            json_schema_extra=cel(
                (
                    "timestamp('2000-01-01T00:00:00Z').getHours(self) >= 0",
                    "unknown time zone (use an IANA name such as Europe/Berlin)",
                )
            ),
        ),
    ] = "UTC"

    @model_validator(mode="after")
    def _start_end_together(self) -> Window:
        if (self.start == "") != (self.end == ""):
            raise ValueError("window.start and window.end must be set together")
        if self.days and not self.start:
            raise ValueError("window.days needs window.start and window.end")
        return self

    @field_validator("time_zone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown time zone {value!r} (use an IANA name such as Europe/Berlin)") from exc
        return value

    @property
    def enabled(self) -> bool:
        return self.start != ""


IntOrPercent = Annotated[
    int | str,
    Field(
        json_schema_extra=cel(
            (
                "type(self) == int ? self >= 1 : self.matches('^(100|[1-9][0-9]?)%$')",
                "must be an integer >= 1 or a percentage from 1% to 100% (use rollout.paused to stop)",
            )
        )
    ),
]


class Rollout(_Model):
    max_unavailable: IntOrPercent = 1
    canary: Canary = Canary()
    paused: bool = False
    max_failed_nodes: Annotated[int, Field(ge=1, le=100000)] = 1
    on_failure: OnFailure = OnFailure.ROLLBACK
    window: Window = Window()
    # How long the rollout may wait while only nodes made unavailable outside it (cordoned by someone
    # else, NotReady) use up maxUnavailable, before it reports Stalled with what to do. They still count.
    stall_after_seconds: Annotated[int, Field(ge=0, le=604800)] = 1800

    @field_validator("max_unavailable")
    @classmethod
    def _int_or_percent(cls, value: int | str) -> int | str:
        if isinstance(value, bool):
            raise ValueError("must be an integer >= 1 or a percentage such as '10%'")
        if isinstance(value, int):
            if value < 1:
                raise ValueError("must be >= 1 (use rollout.paused to stop the rollout)")
            return value
        if not PERCENT_RE.match(value):
            raise ValueError(f"{value!r} is not a percentage from 1% to 100%")
        return value


class DrainSpec(_Model):
    """kubectl drain semantics (k8s.io/kubectl/pkg/drain): eviction API, PDBs respected, DaemonSets skip."""

    timeout_seconds: Annotated[int, Field(ge=0, le=86400)] = 600  # 0 = wait forever (kubectl)
    grace_period_seconds: Annotated[int, Field(ge=-1, le=86400)] = -1  # -1 = the pod's own
    delete_empty_dir_data: bool = True
    force: bool = False  # evict pods without a controller
    on_timeout: OnDrainTimeout = OnDrainTimeout.FAIL
    # onTimeout: Fail gives the node back; it is taken again this many times (a PDB that blocked it may
    # allow the eviction later), after retryBackoffSeconds, doubled each time.
    retries: Annotated[int, Field(ge=0, le=10)] = 2
    retry_backoff_seconds: Annotated[int, Field(ge=10, le=86400)] = 300


class Verification(_Model):
    timeout_seconds: Annotated[int, Field(ge=10, le=3600)] = 300


class NodeConfigSpec(_Model):
    evented_pleg: bool
    node_selector: LabelSelector = LabelSelector()
    include_control_plane: bool = False
    # Risky nodes (see core/compat.py: e.g. containerd 1.7, kubelet 1.29.1-1.31) are skipped unless true.
    allow_risky: bool = False
    runtime: Runtime = Runtime.AUTO
    kubelet_config: KubeletConfigMode = KubeletConfigMode.DROP_IN_ONLY
    heal_fallback: bool = True
    rollout: Rollout = Rollout()
    drain: DrainSpec = DrainSpec()
    verification: Verification = Verification()
    on_delete: OnDelete = OnDelete.REVERT


# --- status -----------------------------------------------------------------------------------------


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(_Model):
    type: ConditionType
    status: ConditionStatus
    reason: Annotated[str, Field(max_length=1024)]
    message: Annotated[str, Field(max_length=32768)] = ""
    observed_generation: int = 0
    last_transition_time: datetime


class NodeCounts(_Model):
    total: int = 0
    eligible: int = 0
    updated: int = 0
    updating: int = 0
    failed: int = 0
    skipped: int = 0


class NodeStatus(_Model):
    """One node that needs attention: in progress, failed or skipped (Done nodes are only counted)."""

    name: str
    state: NodeState
    reason: str = ""
    since: datetime | None = None
    evidence: str = ""


class NodeConfigStatus(_Model):
    observed_generation: int = 0
    rendered_hash: str = ""
    conditions: list[Condition] = []
    nodes: NodeCounts = NodeCounts()
    node_statuses: Annotated[list[NodeStatus], Field(max_length=MAX_NODE_STATUSES)] = []
    # Set when the list above was cut to MAX_NODE_STATUSES entries.
    node_statuses_truncated: int = 0
    # While waiting for capacity: the nodes made unavailable outside this rollout that use the budget
    # ("name (cordoned|NotReady)"), and since when only they have held it (the Stalled clock).
    budget_held_by: Annotated[list[str], Field(max_length=MAX_NODE_STATUSES)] = []
    budget_held_since: datetime | None = None


class NodeConfig(_Model):
    api_version: Literal["eventedpleg.io/v1alpha1"] = "eventedpleg.io/v1alpha1"
    kind: Literal["NodeConfig"] = "NodeConfig"
    metadata: dict[str, Any] = {}
    spec: NodeConfigSpec
    status: NodeConfigStatus | None = None
