"""The NodeConfig API (eventedpleg.io/v1alpha1): the single source of the CRD.

`eventedpleg.crdgen` turns these models into crds/nodeconfig.yaml. Every cross-field rule lives twice by
necessity: as a pydantic validator (the operator re-validates what it reads) and as a CEL rule attached with
`cel()` (so the API server rejects it at admission). They sit side by side so they cannot drift unnoticed;
tests/unit/models/test_models.py feeds the same bad specs to both.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic.alias_generators import to_camel

from eventedpleg.constants import ConditionType
from eventedpleg.protocol import Cause, NodeState

# CEL rules go into the schema under this key; crdgen renames it to x-kubernetes-validations.
CEL_KEY = "x-kubernetes-validations"
PERCENT_RE = re.compile(r"^(100|[1-9][0-9]?)%$")
HHMM_RE = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"
MAX_NODE_STATUSES = 50
# A label key as Kubernetes validates it: an optional DNS-subdomain prefix and "/", then a name of at most
# 63 characters (alphanumerics, "-", "_", "." inside). RE2 and Python read it alike.
LABEL_KEY_RE = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)


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
    DROP_IN_ONLY = "DropInOnly"  # --config-dir (KEP-3983); kubeadm nodes get it from our unit drop-in
    EDIT_CONFIG_FILE = "EditConfigFile"  # opt-in: edit --config in place, backed up and restored


class OnFailure(StrEnum):
    ROLLBACK = "Rollback"
    HALT = "Halt"


class OnDrainTimeout(StrEnum):
    FAIL = "Fail"  # uncordon, mark the node Failed, count it against maxFailedNodes
    SKIP = "Skip"  # uncordon, mark the node Skipped, go on with the next one
    FORCE_DELETE = "ForceDelete"  # delete the remaining pods, bypassing PodDisruptionBudgets


class OnDrainBlocked(StrEnum):
    SKIP = "Skip"  # never cordon the node (give it back at once if cordoned), mark it Skipped, go on
    WAIT = "Wait"  # leave the node in service and take it when the blocker is gone; the rollout waits
    FAIL = "Fail"  # as Skip, but mark the node Failed (counts against maxFailedNodes)


class OnNoAgent(StrEnum):
    SKIP = "Skip"  # never cordon a node without a live agent; name it in status and go on with the others
    HOLD = "Hold"  # the same, and no further node starts while one such node waits


class DrainMode(StrEnum):
    CORDON_AND_DRAIN = "CordonAndDrain"  # the Kubernetes documentation's order: cordon, drain, restart
    IN_PLACE = "InPlace"  # restart under the running pods, where no known bug makes that unsafe


class Approval(StrEnum):
    AUTOMATIC = "Automatic"  # nodes are taken as the gates allow
    MANUAL = "Manual"  # each node also waits, in service, for `eventedpleg approve NODE`


class OnInPlaceIneligible(StrEnum):
    DRAIN = "Drain"  # cordon and drain the node first, saying why (an Event)
    SKIP = "Skip"  # fail closed: never cordon or drain it; mark it Skipped, naming why


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
    """One label rule, as in a Kubernetes LabelSelector."""

    key: Annotated[LabelKey, Field(description="The label key the rule applies to.")]
    operator: Annotated[
        SelectorOperator,
        Field(description="How the label's value relates to `values`: In, NotIn, Exists, DoesNotExist."),
    ]
    values: Annotated[
        list[LabelValue],
        Field(
            max_length=64,
            description="Label values: non-empty for In and NotIn, empty for Exists and DoesNotExist.",
        ),
    ] = []

    @model_validator(mode="after")
    def _values_match_operator(self) -> LabelSelectorRequirement:
        needs_values = self.operator in (SelectorOperator.IN, SelectorOperator.NOT_IN)
        if needs_values != bool(self.values):
            raise ValueError("values must be non-empty for In/NotIn and empty for Exists/DoesNotExist")
        return self


class LabelSelector(_Model):
    """A Kubernetes LabelSelector."""

    match_labels: Annotated[
        dict[LabelKey, LabelValue],
        Field(max_length=64, description="Labels an object must carry with exactly these values."),
    ] = {}
    match_expressions: Annotated[
        list[LabelSelectorRequirement],
        Field(max_length=32, description="Label rules an object must satisfy, all of them."),
    ] = []

    @property
    def empty(self) -> bool:
        return not (self.match_labels or self.match_expressions)

    def __hash__(self) -> int:  # frozen, but its dict and lists are not hashable: DrainPolicy.of caches
        return hash(self.model_dump_json())


class Canary(_Model):
    """The first `nodes` nodes go alone and must stay healthy for `soakSeconds` before the rest start."""

    nodes: Annotated[int, Field(ge=0, le=1000, description="Nodes that go first, alone.")] = 1
    soak_seconds: Annotated[
        int, Field(ge=0, le=86400, description="How long the canaries must stay Done before the rest start.")
    ] = 120


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

    days: Annotated[
        list[Weekday], Field(max_length=7, description="Days the window opens (empty: every day).")
    ] = []
    start: Annotated[
        str,
        Field(
            pattern=f"{HHMM_RE}|^$",
            max_length=5,
            description="`HH:MM`; with `end`; an end before the start wraps midnight.",
        ),
    ] = ""
    end: Annotated[str, Field(pattern=f"{HHMM_RE}|^$", max_length=5, description="`HH:MM`.")] = ""
    time_zone: Annotated[
        str,
        Field(
            min_length=1,
            max_length=64,
            pattern=r"^[A-Za-z0-9_+\-/]+$",
            description="IANA name of the time zone `start` and `end` are in.",
            # CEL's getHours(zone) fails on a zone the API server's tzdata does not know, which rejects the
            # object: the admission-time twin of _known_zone below. Go also knows "Local" (the API server's
            # own zone), which is no IANA name and which the operator could not read.
            json_schema_extra=cel(
                (
                    "self != 'Local' && timestamp('2000-01-01T00:00:00Z').getHours(self) >= 0",
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


class AlertGate(_Model):
    """No new node is taken while a matching Prometheus alert fires (kured's `--prometheus-url` and
    `--alert-filter-regexp`, inverted: here the pattern names the alerts that block)."""

    prometheus_url: Annotated[
        str,
        Field(
            max_length=2048,
            pattern=r"^(https?://[^\s]+)?$",
            description="Base URL of a Prometheus-compatible API (`GET /api/v1/alerts`), e.g. "
            "`http://prometheus-operated.monitoring:9090`. Empty (the default): the gate is off. An "
            "answer that cannot be read holds the rollout too, saying why.",
        ),
    ] = ""
    alert_name_regexp: Annotated[
        str,
        Field(
            min_length=1,
            max_length=1024,
            description="Firing alerts whose `alertname` this regular expression matches (anywhere; "
            "anchor it with ^...$) hold the rollout. Default: any firing alert.",
        ),
    ] = ".*"

    @field_validator("alert_name_regexp")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from exc
        return value


class HealthGate(_Model):
    """Workloads guard their nodes: a node is taken only while the matching pods on it are Ready, and the
    rollout halts when they are not Ready again `afterSeconds` after the node was Done and given back."""

    pod_selector: Annotated[
        LabelSelector,
        Field(
            description="The pods that guard their node (`matchLabels`, `matchExpressions`). A node is "
            "not cordoned while one of them scheduled on it is not Ready: it waits in service, named in "
            "status with those pods, and the rollout goes on with the other nodes. Empty (the default): "
            "the gate is off."
        ),
    ] = LabelSelector()
    namespaces: Annotated[
        list[Annotated[str, Field(max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]],
        Field(
            max_length=32,
            description="Only pods in these namespaces count. Empty (the default): every namespace.",
        ),
    ] = []
    after_seconds: Annotated[
        int,
        Field(
            ge=10,
            le=86400,
            description="A node Done and given back must have every matching pod on it Ready this many "
            "seconds after it was Done (pods evicted elsewhere are not looked at); else it is marked "
            "Failed, left as it is, with those pods named, and the rollout halts whatever "
            "`maxFailedNodes` says (a Warning `WorkloadNotReady` Event on the NodeConfig). Checked then and "
            "for 2 minutes after (not later: a pod failing hours later for reasons of its own fails no "
            "node); `eventedpleg retry NODECONFIG --node NODE` takes the node again once the workload "
            "is fixed.",
        ),
    ] = 300

    @property
    def enabled(self) -> bool:
        return not self.pod_selector.empty


class OrderBy(StrEnum):
    NAME = "Name"
    OLDEST_FIRST = "OldestFirst"
    LABEL = "Label"


ORDER_LABEL_RULE = "rollout.order.label is required with by: Label, and only then"


class RolloutOrder(
    _Model,
    json_schema_extra=cel(
        ("(self.by == 'Label') == (has(self.label) && self.label != '')", ORDER_LABEL_RULE)
    ),
):
    """Which nodes are taken first within each zone (zones go one after the other, by zone label)."""

    by: Annotated[
        OrderBy,
        Field(
            description="The order nodes are taken in within each zone (zones go one after the other, "
            "so a batch stays in one zone): `Name`; `OldestFirst`: by the Node's creationTimestamp; "
            "`Label`: by the value of the node label `label` (values of digits only compare as numbers), "
            "nodes without it last. Ties go by name."
        ),
    ] = OrderBy.NAME
    label: Annotated[
        str,
        Field(
            max_length=317,
            pattern=f"{LABEL_KEY_RE}|^$",
            description="With `by: Label` (and only then): the label key, e.g. `example.com/rollout-rank`.",
        ),
    ] = ""

    @model_validator(mode="after")
    def _label_with_label_order(self) -> RolloutOrder:
        if (self.by is OrderBy.LABEL) != (self.label != ""):
            raise ValueError(ORDER_LABEL_RULE)
        return self


INT_OR_PERCENT_RULE = "type(self) == int ? self >= 1 : self.matches('^(100|[1-9][0-9]?)%$')"
IntOrPercent = Annotated[
    int | str,
    Field(
        json_schema_extra=cel(
            (
                INT_OR_PERCENT_RULE,
                "must be an integer >= 1 or a percentage from 1% to 100% (use rollout.paused to stop)",
            )
        )
    ),
]
# maxFailedNodes and rollout.steps: the same form and resolution (planner.int_or_percent), their own
# message. maxLength (of the string form, "100%") bounds the rule's cost: the API server rejected the CRD
# for rollout.steps' items without it ("estimated rule cost exceeds budget", kube-apiserver v1.36.4).
NodeCount = Annotated[
    int | str,
    Field(
        json_schema_extra={
            **cel((INT_OR_PERCENT_RULE, "must be an integer >= 1 or a percentage from 1% to 100%")),
            "maxLength": 4,
        }
    ),
]


WINDOWS_RULE = (
    "rollout.window and rollout.windows are exclusive: move rollout.window into rollout.windows as one entry"
)


class Rollout(
    _Model,
    json_schema_extra=cel(
        (
            "!has(self.window) || !has(self.window.start) || self.window.start == '' || "
            "!has(self.windows) || size(self.windows) == 0",
            WINDOWS_RULE,
        )
    ),
):
    """How nodes are taken: batch size, order, canaries, pause, failure budget and maintenance windows."""

    max_unavailable: Annotated[
        IntOrPercent,
        Field(
            description="Integer >= 1, or 1% to 100% of selected nodes (rounded down, min 1); "
            "nodes already NotReady or cordoned count."
        ),
    ] = 1
    canary: Canary = Canary()
    steps: Annotated[
        list[NodeCount],
        Field(
            max_length=20,
            description="Growing batches after the canary: each entry is how many nodes (an integer, or "
            "1% to 100% of selected nodes, rounded down, min 1) are Done in all once that step is over, "
            'e.g. `[1, "5%", "25%", "100%"]`. A step starts only when every node of the previous ones '
            "(the canary's included) is Done and has stayed so for `canary.soakSeconds`; `maxUnavailable` "
            "still bounds each batch. A step smaller than an earlier one adds nothing. After the last step "
            "the rest go as `maxUnavailable` allows. Empty (the default): no steps.",
        ),
    ] = []
    order: RolloutOrder = RolloutOrder()
    paused: Annotated[bool, Field(description="No new node starts; nodes in progress finish.")] = False
    max_failed_nodes: Annotated[
        NodeCount,
        Field(
            description="Halt (Degraded) once this many nodes failed or rolled back: an integer >= 1, or "
            "1% to 100% of selected nodes (rounded down, min 1), as `maxUnavailable` is resolved."
        ),
    ] = 1
    on_failure: Annotated[
        OnFailure,
        Field(description="`Rollback` restores the node's previous files; `Halt` leaves it as it failed."),
    ] = OnFailure.ROLLBACK
    window: Annotated[
        Window,
        Field(
            description="One maintenance window (the single form, kept as it was): as `windows` with this "
            "one entry. Not together with `windows`."
        ),
    ] = Window()
    windows: Annotated[
        list[Window],
        Field(
            max_length=16,
            description="Maintenance windows: new nodes start only while one of them is open (a node "
            "already in progress finishes), each with its own `days`, `start`, `end` and `timeZone`. "
            "Empty (the default): `window` decides. Not together with `window`.",
        ),
    ] = []
    alert_gate: AlertGate = AlertGate()
    health_gate: Annotated[
        HealthGate,
        Field(
            description="Workloads guard their nodes: the matching pods on a node must be Ready before "
            "it is taken, and again `afterSeconds` after it is given back."
        ),
    ] = HealthGate()
    approval: Annotated[
        Approval,
        Field(
            description="`Automatic` (the default): nodes are taken as the other gates allow. `Manual`: "
            "each node also waits, in service and not cordoned, until a person approves it with "
            "`eventedpleg approve NODE` (the NodeConfig's annotation `eventedpleg.io/approved`, a JSON "
            "map node -> config hash, so an approval holds for one config and needs `patch` on the "
            "NodeConfig); status lists the nodes `AwaitingApproval` and each gets an `AwaitingApproval` "
            "Event."
        ),
    ] = Approval.AUTOMATIC
    post_node_delay_seconds: Annotated[
        int,
        Field(
            ge=0,
            le=86400,
            description="After a node (or batch) is Done, wait this long before the next node starts, "
            "as rancher's system-upgrade-controller does: time for alerts and workloads to settle.",
        ),
    ] = 0
    on_no_agent: Annotated[
        OnNoAgent,
        Field(
            description="A selected node whose eventedpleg agent shows no sign of life (no fresh "
            "`eventedpleg.io/host-check`: the agent pod is not scheduled or never ran there; or its agent"
            " pod is not Ready, e.g. crash-looping) is never cordoned; status names it and why. `Skip` "
            "(default): the rollout goes on with the other nodes and takes it once its agent runs. "
            "`Hold`: no further node starts while one waits for its agent. A node whose agent stops after"
            " the cordon, before it is asked to change anything, is given back unchanged: 90 s after the "
            "agent marked its check stopped or its pod stopped being Ready (a rolling update of the agent"
            " brings the next one back sooner, and the node stays taken), or once a check left without a "
            "word goes stale."
        ),
    ] = OnNoAgent.SKIP
    take_cordoned_nodes: Annotated[
        bool,
        Field(
            description="Also take a node someone else cordoned: it is updated without taking more of "
            "`maxUnavailable` (it already counts) and stays cordoned afterwards. Default `false`: such a "
            "node may be in another tool's or a person's maintenance, so it is not taken until it is "
            "uncordoned, and the status says so."
        ),
    ] = False
    stall_after_seconds: Annotated[
        int,
        Field(
            ge=0,
            le=604800,
            description="How long the rollout may wait while only nodes made unavailable outside it "
            "(cordoned by someone else, NotReady; named in `status.budgetHeldBy`) use up `maxUnavailable`, "
            "before it reports `Stalled` (uncordon them or raise `maxUnavailable`); 0: at once.",
        ),
    ] = 1800

    @model_validator(mode="after")
    def _one_form_of_windows(self) -> Rollout:
        if self.window.enabled and self.windows:
            raise ValueError(WINDOWS_RULE)
        return self

    @field_validator("steps")
    @classmethod
    def _steps(cls, value: list[int | str], info: ValidationInfo) -> list[int | str]:
        for i, step in enumerate(value):
            try:
                cls._int_or_percent(step, info)
            except ValueError as exc:
                raise ValueError(f"steps[{i}]: {exc}") from exc
        return value

    @field_validator("max_unavailable", "max_failed_nodes")
    @classmethod
    def _int_or_percent(cls, value: int | str, info: ValidationInfo) -> int | str:
        if isinstance(value, bool):
            raise ValueError("must be an integer >= 1 or a percentage such as '10%'")
        if isinstance(value, int):
            if value < 1:
                hint = (
                    " (use rollout.paused to stop the rollout)"
                    if info.field_name == "max_unavailable"
                    else ""
                )
                raise ValueError(f"must be >= 1{hint}")
            return value
        if not PERCENT_RE.match(value):
            raise ValueError(f"{value!r} is not a percentage from 1% to 100%")
        return value


class TaintEffect(StrEnum):
    # NoExecute is not offered: it evicts pods at once, bypassing PodDisruptionBudgets and the drain.
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_SCHEDULE = "NoSchedule"


# Taint keys that belong to Kubernetes or to an autoscaler: their owners add and remove them and act on
# them (the node lifecycle controller's node.kubernetes.io/*, e.g. out-of-service, which deletes pods;
# cluster-autoscaler's ToBeDeletedByClusterAutoscaler/DeletionCandidateOfClusterAutoscaler; Karpenter's
# karpenter.sh/disrupted). Our taint must never be mistaken for one of theirs, nor take one of theirs off.
# The chart's operator ValidatingAdmissionPolicy (operator-vap.yaml) pins the same lists; a chart test
# checks they agree.
RESERVED_TAINT_PREFIXES = (
    "node.kubernetes.io/",
    "node-role.kubernetes.io/",
    "node.cloudprovider.kubernetes.io/",
    "karpenter.sh/",
    "cluster-autoscaler.kubernetes.io/",
)
RESERVED_TAINT_KEYS = ("ToBeDeletedByClusterAutoscaler", "DeletionCandidateOfClusterAutoscaler")
RESERVED_TAINT_MESSAGE = (
    "is a reserved taint key (node.kubernetes.io/*, node-role.kubernetes.io/*, "
    "node.cloudprovider.kubernetes.io/*, karpenter.sh/*, cluster-autoscaler.kubernetes.io/*, "
    "ToBeDeletedByClusterAutoscaler, DeletionCandidateOfClusterAutoscaler): Kubernetes and the autoscalers "
    "act on these; choose a key of your own such as eventedpleg.io/draining"
)


def _cel_strings(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


class TaintBeforeCordon(_Model):
    """A taint put on the node chosen `seconds` before its cordon (as MCO and kured do), so that operators
    watching for it (e.g. a database moving its primary away) act first. Removed whenever the node is
    given back; a taint with the same key already on the node is someone else's: left as it is."""

    key: Annotated[
        str,
        Field(
            max_length=317,
            pattern=LABEL_KEY_RE,
            description="The taint's key (label key syntax); not one Kubernetes or an autoscaler reserves "
            "(node.kubernetes.io/*, node-role.kubernetes.io/*, node.cloudprovider.kubernetes.io/*, "
            "karpenter.sh/*, cluster-autoscaler.kubernetes.io/*, ToBeDeletedByClusterAutoscaler, "
            "DeletionCandidateOfClusterAutoscaler).",
            json_schema_extra=cel(
                (
                    f"!(self in {_cel_strings(RESERVED_TAINT_KEYS)}) && "
                    f"!{_cel_strings(RESERVED_TAINT_PREFIXES)}.exists(p, self.startsWith(p))",
                    RESERVED_TAINT_MESSAGE,
                )
            ),
        ),
    ] = "eventedpleg.io/draining"
    value: Annotated[
        str,
        Field(
            max_length=63,
            pattern=r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$",
            description="The taint's value (label value syntax; may be empty).",
        ),
    ] = ""
    effect: Annotated[
        TaintEffect,
        Field(
            description="`PreferNoSchedule` or `NoSchedule` (the cordon that follows is NoSchedule anyway)."
        ),
    ] = TaintEffect.PREFER_NO_SCHEDULE
    seconds: Annotated[
        int, Field(ge=0, le=3600, description="How long the node carries the taint before it is cordoned.")
    ] = 30

    @field_validator("key")
    @classmethod
    def _not_reserved(cls, key: str) -> str:
        if key in RESERVED_TAINT_KEYS or key.startswith(RESERVED_TAINT_PREFIXES):
            raise ValueError(f"{key!r} {RESERVED_TAINT_MESSAGE}")
        return key


class InPlace(_Model):
    """What `mode: InPlace` does with a node where a restart under running pods is not safe."""

    on_ineligible: Annotated[
        OnInPlaceIneligible,
        Field(
            description="`Drain` (the default): the node is cordoned and drained first, and a "
            "`NotInPlace` Event says why. `Skip`: fail closed, the node is never cordoned or drained; it "
            "is marked Skipped with the reason (a Warning `NotInPlace` Event names it)."
        ),
    ] = OnInPlaceIneligible.DRAIN


class DrainBehavior(StrEnum):
    DRAIN = "Drain"  # evicted, in `order`
    SKIP = "Skip"  # left on the node
    WAIT_COMPLETED = "WaitCompleted"  # never evicted: the drain waits until it completes


DRAIN_RULE_ORDER_RULE = "drain.rules[].order may only be set with behavior: Drain"
# Cluster API's MachineDrainRule order is an int32 as well.
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


class DrainRule(
    _Model,
    json_schema_extra=cel(("self.behavior == 'Drain' || !has(self.order)", DRAIN_RULE_ORDER_RULE)),
):
    """How the drain treats the pods a rule selects (Cluster API's MachineDrainRule, per NodeConfig)."""

    pod_selector: Annotated[
        LabelSelector,
        Field(
            description="The pods the rule applies to (`matchLabels`, `matchExpressions`). Empty: every pod."
        ),
    ] = LabelSelector()
    namespaces: Annotated[
        list[Annotated[str, Field(max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]],
        Field(
            max_length=32, description="Only pods in these namespaces. Empty (the default): every namespace."
        ),
    ] = []
    namespace_selector: Annotated[
        LabelSelector,
        Field(
            description="Only pods in namespaces whose labels match, as Cluster API's "
            "MachineDrainRule `pods[].namespaceSelector` (e.g. `kubernetes.io/metadata.name: monitoring`, "
            "or a team label). Combined with `podSelector` and `namespaces`: a pod must match all three. "
            "Empty (the default): every namespace."
        ),
    ] = LabelSelector()
    behavior: Annotated[
        DrainBehavior,
        Field(
            description="`Drain`: evicted, in `order`. `Skip`: left on the node, its containers running "
            "through the restarts. `WaitCompleted`: in order 0, never evicted; the drain, and the pods of "
            "higher orders, wait until the pod has completed (Succeeded or Failed) or is gone, e.g. a "
            "Job's pod."
        ),
    ]
    order: Annotated[
        int | None,
        Field(
            ge=INT32_MIN,
            le=INT32_MAX,
            description="With `behavior: Drain` (and only then): pods are evicted by increasing order, "
            "those of one order together, the next order only once every pod of the lower orders is "
            "gone from the node. Absent: 0, the order of pods no rule selects.",
        ),
    ] = None

    @model_validator(mode="after")
    def _order_with_drain(self) -> DrainRule:
        if self.order is not None and self.behavior is not DrainBehavior.DRAIN:
            raise ValueError(DRAIN_RULE_ORDER_RULE)
        return self

    def __hash__(self) -> int:  # frozen, but its lists are not hashable: DrainPolicy.of caches
        return hash(self.model_dump_json())


class DrainSpec(_Model):
    """kubectl drain semantics (k8s.io/kubectl/pkg/drain): eviction API, PDBs respected, DaemonSets skip."""

    mode: Annotated[
        DrainMode,
        Field(
            description="`CordonAndDrain` (the default, as the Kubernetes documentation says): cordon and "
            "drain before the restarts. `InPlace`: neither; the runtime and the kubelet restart under the "
            "running pods (containers keep running through both), only on Supported nodes without static "
            "pods (elsewhere the node is drained first and its status says why). The pods of a node whose "
            "verification fails see a second kubelet restart for the rollback."
        ),
    ] = DrainMode.CORDON_AND_DRAIN
    in_place: Annotated[
        InPlace, Field(description="With `mode: InPlace`: what a node that cannot be done in place gets.")
    ] = InPlace()

    timeout_seconds: Annotated[
        int, Field(ge=0, le=86400, description="How long a drain may take; 0 waits forever (like kubectl).")
    ] = 600
    grace_period_seconds: Annotated[
        int,
        Field(ge=-1, le=86400, description="Termination grace period for evicted pods; -1: the pod's own."),
    ] = -1
    delete_empty_dir_data: Annotated[bool, Field(description="Evict pods with emptyDir volumes.")] = True
    force: Annotated[bool, Field(description="Evict pods without a controller.")] = False
    on_timeout: Annotated[
        OnDrainTimeout,
        Field(
            description="`Fail` and `Skip` uncordon the node; `ForceDelete` deletes pods, bypassing PDBs "
            "(only with the chart value `drain.allowForceDelete: true`, else the node is Failed saying so)."
        ),
    ] = OnDrainTimeout.FAIL
    pod_selector: Annotated[
        LabelSelector,
        Field(
            description="Only pods matching this selector are evicted (kubectl drain `--pod-selector`); the "
            "others stay on the node, their containers running through the runtime and kubelet restarts. "
            "Empty (the default): every pod kubectl drain would evict. A pod annotated "
            "`eventedpleg.io/drain: skip` is never evicted, whatever this says."
        ),
    ] = LabelSelector()
    rules: Annotated[
        tuple[DrainRule, ...],
        Field(
            max_length=32,
            description="Drain order and exceptions, as Cluster API's MachineDrainRule: each pod "
            "kubectl drain would evict (and `podSelector` selects) takes the `behavior` of the first "
            "rule that selects it, or `Drain` in order 0 when none does. E.g. stateless pods first and "
            "databases last (`order: 10`), a Job's pods let finish (`WaitCompleted`). DaemonSet, static "
            "and opted-out pods stay as they are whatever a rule says. `timeoutSeconds` bounds the whole "
            "drain, waits included; at its end `onTimeout: ForceDelete` deletes the remaining pods order "
            "by order, `WaitCompleted` ones too. Empty (the default): every pod at once.",
        ),
    ] = ()
    skip_wait_for_delete_timeout_seconds: Annotated[
        int,
        Field(
            ge=0,
            le=86400,
            description="A pod whose deletion started more than this many seconds ago no longer holds the "
            "drain (kubectl drain `--skip-wait-for-delete-timeout`, e.g. a pod stuck terminating on a "
            "finalizer). 0 (the default): wait for every terminating pod.",
        ),
    ] = 0
    blocking_pod_selector: Annotated[
        LabelSelector,
        Field(
            description="A node running a pod that matches this selector (in any namespace, not Succeeded "
            "or Failed) is not taken until that pod is gone, as kured's `--blocking-pod-selector`; the "
            "node stays in service meanwhile and the rollout waits for it. Empty (the default): off."
        ),
    ] = LabelSelector()
    on_blocked: Annotated[
        OnDrainBlocked,
        Field(
            description="A drain that can never finish as things are: a PodDisruptionBudget that allows no "
            "eviction even with all its pods healthy (`maxUnavailable: 0`, `minAvailable` equal to the "
            "replicas), a PodDisruptionBudget the drain needs more evictions of than it allows now whose "
            "pods' replacements cannot become healthy (a pod of it Pending and unschedulable, or its pods "
            "fit no other node by nodeSelector, required node affinity, taints and cordons: e.g. two "
            "replicas with `minAvailable: 1` on a cluster's only worker), a pod matched by two PDBs, a pod "
            "without a controller and no `force`, emptyDir "
            "data without `deleteEmptyDirData`, a running pod annotated `karpenter.sh/do-not-disrupt: "
            '"true"` or `cluster-autoscaler.kubernetes.io/safe-to-evict: "false"` (never evicted nor '
            "deleted, not even by `onTimeout: ForceDelete`; named with its annotation). Checked before "
            "the cordon, and again whenever an eviction is refused. `Skip` never cordons the node (gives "
            "it back at once if the blocker appears after the cordon) and marks it Skipped; `Wait` leaves "
            "the node in service and takes it once the blocker is gone, holding the rollout (Stalled, "
            "reason NodesBlocked, once no other node can move); `Fail` is "
            "`Skip` marking the node Failed. Not used with `onTimeout: ForceDelete` where it is granted, "
            "except for those annotated pods: such a drain finishes at its timeout."
        ),
    ] = OnDrainBlocked.SKIP
    taint_before_cordon: Annotated[
        TaintBeforeCordon | None,
        Field(
            description="Taint the node chosen `seconds` before its cordon, as MCO and kured do, so that "
            "operators watching for the taint (e.g. a database moving its primary away) act first. The "
            "taint goes whenever the node is given back; one with the same key that was there before is "
            "someone else's and is left alone. `{}` takes every default "
            "(`eventedpleg.io/draining:PreferNoSchedule`, 30 s). Absent (the default): off."
        ),
    ] = None
    retries: Annotated[
        int,
        Field(
            ge=0,
            le=10,
            description="With `onTimeout: Fail`, a node whose drain timed out (e.g. a PDB allowed no "
            "eviction) is given back and taken again this many times before it counts as failed. Before "
            "each retry the cause is looked at again: while a PodDisruptionBudget of the pods to evict "
            "still allows 0 disruptions, the node stays in service, not cordoned, and its status names "
            "the budget it waits for; it is taken once the budget allows one.",
        ),
    ] = 2
    retry_backoff_seconds: Annotated[
        int,
        Field(
            ge=10, le=86400, description="Wait before the first automatic retry; doubled for each next one."
        ),
    ] = 300


class Verification(_Model):
    """How the agent proves, after restarting the kubelet, that Evented PLEG is in use."""

    timeout_seconds: Annotated[
        int,
        Field(ge=10, le=3600, description="How long the agent may take to prove Evented PLEG is in use."),
    ] = 300


class Guard(_Model):
    """After Done, the agent watches the node for the failures the gate itself brings (kubelet <= 1.36: the
    PLEG channel wedge; the event stream lost without fallback), heals them and rolls back a node that keeps
    failing."""

    enabled: Annotated[
        bool,
        Field(
            description="Watch every Done node: on the first sign of an incident the agent restarts the "
            "kubelet and proves it syncs pods again, with a `PLEGWedged` Event and the node condition "
            "`EventedPLEGHealthy`. `false`: the agent only reports incidents, and nodes with kubelet 1.32 to "
            "1.36 are Risky, as nothing then bounds how long such a node stops syncing pods: without "
            "`allowRisky: true` they are skipped, and those already Done are taken back to generic PLEG the "
            "same safe way."
        ),
    ] = True
    incidents_before_rollback: Annotated[
        int,
        Field(
            ge=1,
            le=100,
            description="After this many incidents within `windowSeconds` the agent rolls the node back to "
            "generic PLEG (the kubelet alone restarts), marks it RolledBack with the incidents as evidence "
            "(a `GuardRolledBack` Event), and it counts against `rollout.maxFailedNodes`.",
        ),
    ] = 2
    window_seconds: Annotated[
        int,
        Field(
            ge=600,
            le=2592000,
            description="The window `incidentsBeforeRollback` counts incidents in (default 24 h).",
        ),
    ] = 86400


class NodeConfigSpec(_Model):
    """The desired state: whether Evented PLEG is on, on which nodes, and how the change is rolled out."""

    evented_pleg: Annotated[
        bool,
        Field(
            description="`true` turns Evented PLEG on; `false` removes the operator's drop-ins "
            "(the same safe rollout)."
        ),
    ]
    node_selector: Annotated[
        LabelSelector,
        Field(description="A LabelSelector (`matchLabels`, `matchExpressions`); empty selects every node."),
    ] = LabelSelector()
    include_control_plane: Annotated[
        bool,
        Field(description="Also nodes with static pods or the control-plane role (duplicate containers)."),
    ] = False
    # Risky nodes: see core/compat.py (e.g. containerd 1.7, kubelet 1.29.1-1.31).
    allow_risky: Annotated[
        bool,
        Field(
            description="Roll out to Risky nodes too (see the compatibility matrix); else they are skipped."
        ),
    ] = False
    runtime: Annotated[
        Runtime,
        Field(description="`auto` reads containerRuntimeVersion; a fixed value skips nodes that differ."),
    ] = Runtime.AUTO
    kubelet_config: Annotated[
        KubeletConfigMode,
        Field(
            description="`DropInOnly` writes drop-ins only, in the kubelet's `--config-dir` (on kubeadm "
            "nodes without one, added by a kubelet.service drop-in of ours); `EditConfigFile` edits "
            "`--config` with a backup, restored on rollback."
        ),
    ] = KubeletConfigMode.DROP_IN_ONLY
    heal_fallback: Annotated[
        bool,
        Field(
            description="After Done, restart the kubelet when it silently fell back to polling (k8s#129827)."
        ),
    ] = True
    guard: Annotated[
        Guard,
        Field(
            description="The guard on Done nodes: detect the gate's own failures, heal them within "
            "seconds, roll back a node that keeps failing."
        ),
    ] = Guard()
    rollout: Rollout = Rollout()
    drain: DrainSpec = DrainSpec()
    verification: Verification = Verification()
    on_delete: Annotated[
        OnDelete,
        Field(
            description="`Revert` removes the operator's drop-ins from every node before the "
            "NodeConfig goes; `Keep` leaves them."
        ),
    ] = OnDelete.REVERT


# --- status -----------------------------------------------------------------------------------------


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(_Model):
    """One aspect of the state, as metav1.Condition (kstatus reads Ready, Reconciling and Stalled)."""

    type: Annotated[ConditionType, Field(description="The condition's type, unique in the list.")]
    status: Annotated[ConditionStatus, Field(description="True, False or Unknown.")]
    reason: Annotated[str, Field(max_length=1024, description="CamelCase word for the last transition.")]
    message: Annotated[str, Field(max_length=32768, description="One line for a human: what and why.")] = ""
    observed_generation: Annotated[
        int, Field(description="The metadata.generation this condition was computed from.")
    ] = 0
    last_transition_time: Annotated[datetime, Field(description="When the status last changed.")]


class NodeCounts(_Model):
    """Nodes by rollout state."""

    total: Annotated[int, Field(description="Nodes the selector matches.")] = 0
    eligible: Annotated[int, Field(description="Selected nodes the rollout may change.")] = 0
    updated: Annotated[int, Field(description="Nodes verified with the desired configuration.")] = 0
    updating: Annotated[int, Field(description="Nodes being drained, changed or verified now.")] = 0
    failed: Annotated[int, Field(description="Nodes that failed or rolled back.")] = 0
    skipped: Annotated[int, Field(description="Nodes left alone, each with its reason in nodeStatuses.")] = 0
    awaiting_approval: Annotated[
        int,
        Field(description="Nodes waiting, in service, for `eventedpleg approve` (rollout.approval: Manual)."),
    ] = 0


class NodeStatus(_Model):
    """One node that needs attention: in progress, failed or skipped (Done nodes are only counted)."""

    name: Annotated[str, Field(description="The node's name.")]
    state: Annotated[NodeState, Field(description="Where the node is in the rollout.")]
    reason: Annotated[str, Field(description="One line: why the node is in this state.")] = ""
    cause: Annotated[
        Cause | None,
        Field(description="The kind of `reason` as a fixed code (e.g. `NoAgent`, `DrainBlocked`) for tools."),
    ] = None
    since: Annotated[datetime | None, Field(description="When the node entered this state.")] = None
    evidence: Annotated[str, Field(description="What verification saw on the node (compact JSON).")] = ""


class NodeConfigStatus(_Model):
    """Observed state, written by the operator."""

    observed_generation: Annotated[
        int, Field(description="The metadata.generation the operator last acted on.")
    ] = 0
    rendered_hash: Annotated[
        str, Field(description="Hash of the rendered kubelet and CRI-O drop-ins nodes must carry.")
    ] = ""
    conditions: Annotated[
        list[Condition],
        Field(
            description="Ready, Reconciling and Stalled (kstatus), Available, Progressing, Degraded, Paused."
        ),
    ] = []
    nodes: NodeCounts = NodeCounts()
    node_statuses: Annotated[
        list[NodeStatus],
        Field(
            max_length=MAX_NODE_STATUSES,
            description="Nodes that need attention: in progress, failed or skipped.",
        ),
    ] = []
    node_statuses_truncated: Annotated[
        int,
        Field(description=f"How many entries nodeStatuses left out (it holds {MAX_NODE_STATUSES} at most)."),
    ] = 0
    budget_held_by: Annotated[
        list[str],
        Field(
            max_length=MAX_NODE_STATUSES,
            description="While waiting for capacity: the nodes made unavailable outside this rollout that "
            "use maxUnavailable, as `name (cordoned|NotReady)`.",
        ),
    ] = []
    budget_held_since: Annotated[
        datetime | None,
        Field(description="Since when only those nodes have held the budget (the Stalled clock)."),
    ] = None


class NodeConfig(_Model):
    """NodeConfig turns the kubelet's Evented PLEG on or off across the selected nodes, one node (or batch)
    at a time."""

    api_version: Literal["eventedpleg.io/v1alpha1"] = "eventedpleg.io/v1alpha1"
    kind: Literal["NodeConfig"] = "NodeConfig"
    metadata: dict[str, Any] = {}
    spec: NodeConfigSpec
    status: NodeConfigStatus | None = None
