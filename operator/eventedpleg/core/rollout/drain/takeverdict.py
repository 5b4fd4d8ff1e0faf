"""Whether the node the planner chose is taken now, and how: a classification of the node and its pod
survey. Pure.

The Cordon step (core.rollout.steps) acts on this verdict and `eventedpleg preflight` shows it, so
the two cannot disagree about a node. The checks go in the step's order: what is known without asking
the API (the agent's refusal, InPlace that can never be safe) comes before the survey of its pods."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from eventedpleg.core import compat
from eventedpleg.core.rollout.drain.pods import DrainResult
from eventedpleg.core.rollout.drain.policy import DrainPolicy
from eventedpleg.core.rollout.drain.survey import PodSurvey
from eventedpleg.models.nodeconfig import OnDrainTimeout

# Said when onTimeout: ForceDelete is asked for but this installation does not grant `pods delete`.
FORCE_DELETE_DISABLED = (
    "onTimeout: ForceDelete is not enabled in this installation "
    "(Helm value drain.allowForceDelete=true grants the operator pods delete)"
)


# What a node whose drain timed out says while its automatic retry waits for a budget to allow a disruption.
RETRY_WAITS = "its drain timed out; the automatic retry waits until this allows a disruption: "


class TakeKind(StrEnum):
    SKIP = "skip"  # never cordoned: marked Skipped
    HOLD = "hold"  # something holds the node for now: left in service, looked at again
    BLOCK = "block"  # its drain could never finish as things are: spec.drain.onBlocked decides
    IN_PLACE = "in_place"  # drain.mode: InPlace, safe here: the apply request alone
    TAINT = "taint"  # drain.taintBeforeCordon: tainted now, cordoned once the wait is over
    TAKE = "take"  # cordoned and drained


class SkipCause(StrEnum):
    HOST = "host"  # the node's agent would refuse the change (its host check)
    NOT_IN_PLACE = "not_in_place"  # drain.mode: InPlace, inPlace.onIneligible: Skip, not safe here
    STATIC_PODS = "static_pods"  # runs static pods and includeControlPlane is off


@dataclass(frozen=True)
class NodeToTake:
    """What the classification reads of a node besides its pods: the Cordon action's own fields
    (core.rollout.planner.taking.cordon_action) and whether this installation grants `pods delete`."""

    drain: DrainPolicy
    include_control_plane: bool
    host_refusal: str = ""  # its agent would refuse the change (core.hostcheck)
    in_place: bool = False  # drain.mode: InPlace and nothing known against it before the survey
    drained_because: str = ""  # drain.mode: InPlace, but why this node is drained first
    tainted: bool = False  # drain.taintBeforeCordon: our taint went on (NodeTaints.since)
    allow_force_delete: bool = False  # chart value drain.allowForceDelete
    retrying: bool = False  # an automatic retry after a drain timeout (eventedpleg.io/drain-timeouts)

    @property
    def forced(self) -> bool:
        return forced_at_timeout(self.drain, self.allow_force_delete)


def forced_at_timeout(policy: DrainPolicy, allow_force_delete: bool) -> bool:
    """onTimeout: ForceDelete, granted: every drain finishes at its timeout (deletes bypass PDBs and the
    drain options), so none is blocked for good."""
    return policy.on_timeout is OnDrainTimeout.FORCE_DELETE and allow_force_delete


def never_finishes(found: PodSurvey | DrainResult, *, forced: bool) -> str:
    """What keeps the drain from ever finishing, as the step acts on it: with a forced delete at the
    timeout (`forced`) only the pods that asked not to be disrupted, which no delete of ours touches."""
    return found.protected if forced else found.never


@dataclass(frozen=True)
class TakeVerdict:
    kind: TakeKind
    # SKIP: the refusal, or why not in place; HOLD: what holds the node; BLOCK: what the drain can never
    # get past; TAKE: why the node is drained although InPlace was asked ("" when it was not).
    why: str = ""
    cause: SkipCause | None = None  # SKIP only
    pods: tuple[str, ...] = ()  # SKIP for static pods: those pods
    hint: str = ""  # BLOCK: onTimeout: ForceDelete asked, not granted (FORCE_DELETE_DISABLED)


def unsurveyed(node: NodeToTake) -> TakeVerdict | None:
    """The verdict known without asking the API anything (None: the pods decide)."""
    if node.host_refusal:
        return TakeVerdict(TakeKind.SKIP, node.host_refusal, SkipCause.HOST)
    if node.drained_because and node.drain.in_place_strict:
        return TakeVerdict(TakeKind.SKIP, node.drained_because, SkipCause.NOT_IN_PLACE)
    return None


def classify(node: NodeToTake, found: PodSurvey) -> TakeVerdict:
    """What the Cordon step does with `node`, its pods as `found` (the survey before the cordon)."""
    known = unsurveyed(node)
    if known is not None:
        return known
    if found.mirror_pods and not node.include_control_plane:
        return TakeVerdict(TakeKind.SKIP, cause=SkipCause.STATIC_PODS, pods=found.mirror_pods)
    if node.in_place and found.mirror_pods and node.drain.in_place_strict:
        return TakeVerdict(TakeKind.SKIP, compat.IN_PLACE_STATIC_PODS, SkipCause.NOT_IN_PLACE)
    if found.holding:
        return TakeVerdict(TakeKind.HOLD, found.holding)
    if node.in_place and not found.mirror_pods:  # no eviction ahead: no taint to warn of one either
        return TakeVerdict(TakeKind.IN_PLACE)
    never = never_finishes(found, forced=node.forced)
    if never:
        asked = node.drain.on_timeout is OnDrainTimeout.FORCE_DELETE and not node.forced  # not granted
        return TakeVerdict(TakeKind.BLOCK, never, hint=FORCE_DELETE_DISABLED if asked else "")
    if node.retrying and found.exhausted:  # the cause of the timeout has not changed: no second cordon
        return TakeVerdict(TakeKind.HOLD, f"{RETRY_WAITS}{found.exhausted}")
    if node.drain.taint is not None and not node.tainted:
        return TakeVerdict(TakeKind.TAINT)
    why = node.drained_because or (compat.IN_PLACE_STATIC_PODS if node.in_place else "")
    return TakeVerdict(TakeKind.TAKE, why)
