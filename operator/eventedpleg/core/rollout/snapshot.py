"""Frozen views of the cluster that the planner reads, parsed from plain API dicts (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg.core.compat import NodeFacts
from eventedpleg.core.rollout.agentpod import AgentPod
from eventedpleg.core.rollout.drain.policy import DrainPolicy
from eventedpleg.core.rollout.drain.taints import NodeTaints, Taint, taints_of
from eventedpleg.models.nodeconfig import LabelSelector, NodeConfigSpec
from eventedpleg.protocol import NodeState, parse_time


@dataclass(frozen=True)
class NodeMarks:
    """Our annotations on a node (protocol.ANN_*), parsed; unknown or missing values become defaults."""

    owner: str = ""
    desired: str = ""
    current: str = ""
    state: NodeState | None = None
    since: datetime | None = None
    reason: str = ""
    evidence: str = ""
    cordoned_by_us: bool = False
    was_unschedulable: bool = False
    agent_options: str = ""
    benefit: str = ""
    autoscaler_hold: tuple[str, ...] = ()  # the autoscaler keys our cordon added (only known keys)
    drain_timeouts: int = 0  # drains of this node that timed out in a row
    blocked: str = ""  # why the node is left in service (spec.drain.onBlocked: Wait)
    cause: protocol.Cause | None = None  # the kind of the operator's last state or `blocked` (ANN_CAUSE)
    host_check: str = ""  # the agent's pre-cordon verdict, raw (core.hostcheck parses it when needed)
    tainted_since: datetime | None = None  # chosen and tainted, waiting for its cordon (taintBeforeCordon)
    taint: str = ""  # the key of the taint we added ("" when none of ours is on)
    awaiting_approval: str = ""  # the config hash we asked approval for (its Event was sent)

    @property
    def waiting_for_cordon(self) -> bool:
        """Chosen and tainted (drain.taintBeforeCordon), not cordoned yet."""
        return self.tainted_since is not None and not self.cordoned_by_us

    @classmethod
    def parse(cls, annotations: Mapping[str, str]) -> NodeMarks:
        raw_state = annotations.get(protocol.ANN_STATE, "")
        state = NodeState(raw_state) if raw_state in NodeState.__members__.values() else None
        return cls(
            owner=annotations.get(protocol.ANN_OWNER, ""),
            desired=annotations.get(protocol.ANN_DESIRED, ""),
            current=annotations.get(protocol.ANN_CURRENT, ""),
            state=state,
            since=parse_time(annotations.get(protocol.ANN_STATE_SINCE)),
            reason=annotations.get(protocol.ANN_REASON, ""),
            evidence=annotations.get(protocol.ANN_EVIDENCE, ""),
            cordoned_by_us=annotations.get(protocol.ANN_CORDONED_BY_US) == "true",
            was_unschedulable=annotations.get(protocol.ANN_WAS_UNSCHEDULABLE) == "true",
            agent_options=annotations.get(protocol.ANN_AGENT_OPTIONS, ""),
            benefit=annotations.get(protocol.ANN_BENEFIT, ""),
            autoscaler_hold=_hold_keys(annotations.get(protocol.ANN_AUTOSCALER_HOLD, "")),
            drain_timeouts=_count(annotations.get(protocol.ANN_DRAIN_TIMEOUTS, "")),
            blocked=annotations.get(protocol.ANN_BLOCKED, ""),
            cause=_cause(annotations.get(protocol.ANN_CAUSE, "")),
            host_check=annotations.get(protocol.ANN_HOST_CHECK, ""),
            tainted_since=parse_time(annotations.get(protocol.ANN_TAINTED_SINCE)),
            taint=annotations.get(protocol.ANN_TAINT, ""),
            awaiting_approval=annotations.get(protocol.ANN_AWAITING_APPROVAL, ""),
        )


def _cause(text: str) -> protocol.Cause | None:
    return protocol.Cause(text) if text in protocol.Cause.__members__.values() else None


def _count(text: str) -> int:
    return int(text) if text.isdigit() else 0


def _hold_keys(text: str) -> tuple[str, ...]:
    """Only the autoscaler keys we know: a hand-edited value never makes us remove anything else."""
    named = {part.strip() for part in text.split(",")}
    return tuple(key for key in protocol.AUTOSCALER_ANNOTATIONS if key in named)


@dataclass(frozen=True)
class NodeView:
    name: str
    facts: NodeFacts
    ready: bool
    unschedulable: bool
    marks: NodeMarks
    resource_version: str = ""
    autoscaler_present: frozenset[str] = frozenset()  # autoscaler keys on the node, whoever set them
    uid: str = ""  # for Events: `kubectl describe node` shows only those whose involvedObject.uid matches
    taints: tuple[Taint, ...] = ()  # whole, as a write of spec.taints must give them back
    # Its agent DaemonSet pod as the operator's pod watch last saw it (None: none known; the node cache
    # puts it here, so a node whose agent pod changes is a changed node, planned again).
    agent_pod: AgentPod | None = None

    @property
    def autoscaler_user(self) -> frozenset[str]:
        """Autoscaler keys present that our cordon did not add: the user's, never touched."""
        return self.autoscaler_present - set(self.marks.autoscaler_hold)

    @property
    def our_taints(self) -> NodeTaints:
        return NodeTaints(self.taints, self.marks.taint, self.marks.tainted_since)

    @property
    def labels(self) -> Mapping[str, str]:
        return self.facts.labels

    @property
    def zone(self) -> str:
        return self.facts.labels.get(c.LABEL_ZONE, "")

    @cached_property
    def order(self) -> tuple[str, str]:
        """The default rollout order (zone, then name; nodeorder.py has the others); cached because every
        pass sorts every node by it."""
        return (self.zone, self.name)

    @property
    def skip_labelled(self) -> bool:
        value = self.facts.labels.get(c.LABEL_SKIP)
        return value is not None and value.lower() != "false"


def node_view(body: Mapping[str, Any]) -> NodeView:
    """A NodeView from a Node object as the API returns it (dict form)."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    info = status.get("nodeInfo") or {}
    conditions = status.get("conditions") or []
    ready = any(cond.get("type") == "Ready" and cond.get("status") == "True" for cond in conditions)
    taints = taints_of(spec.get("taints"))
    labels = dict(meta.get("labels") or {})
    annotations = meta.get("annotations") or {}
    facts = NodeFacts(
        name=str(meta.get("name", "")),
        kubelet_version=str(info.get("kubeletVersion", "")),
        runtime_version=str(info.get("containerRuntimeVersion", "")),
        operating_system=str(info.get("operatingSystem", "linux")),
        os_image=str(info.get("osImage", "")),
        labels=labels,
        taint_keys=tuple(t.key for t in taints),
        created=parse_time(meta.get("creationTimestamp")),
    )
    return NodeView(
        name=facts.name,
        facts=facts,
        ready=ready,
        unschedulable=bool(spec.get("unschedulable", False)),
        marks=NodeMarks.parse(annotations),
        resource_version=str(meta.get("resourceVersion", "")),
        autoscaler_present=frozenset(key for key in protocol.AUTOSCALER_ANNOTATIONS if key in annotations),
        uid=str(meta.get("uid", "")),
        taints=taints,
    )


@dataclass(frozen=True)
class Peer:
    """Another NodeConfig, for overlap detection: the oldest NodeConfig selecting a node owns it."""

    name: str
    created: datetime
    selector: LabelSelector


@dataclass(frozen=True)
class Target:
    """The NodeConfig being reconciled, with what its spec renders to."""

    name: str
    spec: NodeConfigSpec
    created: datetime
    generation: int
    hash_on: str  # what selected, eligible nodes must end up with
    hash_off: str  # "our drop-ins removed": for deselected nodes, eventedPleg=false and delete+Revert
    agent_options: str = ""  # JSON the agent reads from ANN_AGENT_OPTIONS
    deleting: bool = False
    peers: tuple[Peer, ...] = field(default_factory=tuple)
    retry: Mapping[str, datetime] = field(default_factory=dict)  # node -> failure to retry (retry.py)
    approved: Mapping[str, str] = field(default_factory=dict)  # node -> config approved (approval.py)
    alerts: str = ""  # why spec.rollout.alertGate holds new nodes now ("" when it does not)
    # spec.rollout.healthGate: the gate's pods not Ready on the nodes the previous pass asked about
    # (podhealth.PodsNotReady), read for this pass. Left out of equality: only the whole-cluster half of
    # a pass reads it (planner.healthgate), never a node's decision, so a PassMemo keeps its decisions
    # when it changes.
    health: Mapping[str, tuple[str, ...]] = field(default_factory=dict, compare=False)

    @cached_property
    def drain(self) -> DrainPolicy:
        return DrainPolicy.of(self.spec.drain)

    @property
    def reverting(self) -> bool:
        return self.deleting and self.spec.on_delete.value == "Revert"
