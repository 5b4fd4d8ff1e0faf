"""A node's pods looked at before its cordon, as the step policy and preflight read them. Pure.

One function makes the survey from the pods as listed, so the operator (controller.executor) and
`eventedpleg preflight` cannot see a different node in the same pods: both give it the other nodes and
the Pending pods of a namespace (budgets.Elsewhere), asked only for a budget the drain needs more
evictions of than it allows now."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from eventedpleg.core.rollout.drain import budgets
from eventedpleg.core.rollout.drain import pods as drainpods
from eventedpleg.core.rollout.drain import rules as drainrules
from eventedpleg.core.rollout.drain.policy import DrainPolicy

# The PodDisruptionBudgets of these namespaces (asked only when the drain would evict something).
Budgets = Callable[[tuple[str, ...]], Iterable[Mapping[str, Any]]]


@dataclass(frozen=True)
class PodSurvey:
    mirror_pods: tuple[str, ...]  # static (mirror) pods as "namespace/name"
    nothing_to_evict: bool  # a drain with the step's options would be done at once
    never: str = ""  # what would keep the drain from ever finishing as things are (drainpods.never)
    holding: str = ""  # what holds the node where it is for now (drainpods.holding): it is not taken
    protected: str = ""  # pods that asked not to be disrupted (drainpods.protected), also in `never`
    exhausted: str = ""  # a PodDisruptionBudget of the pods to evict that allows no disruption now


def mirror_pods(pods: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """Static pods among these (mirror pods carry kubernetes.io/config.mirror)."""
    selection = drainpods.select_pods(pods, drainpods.Options(delete_empty_dir_data=True, force=True))
    return tuple(str(ref) for ref in selection.mirror_pods)


def survey(
    pods: Sequence[Mapping[str, Any]],
    policy: DrainPolicy,
    *,
    now: datetime,
    pdbs: Budgets,
    maintenance: Sequence[str] = (),
    namespaces: drainrules.NamespaceLabels = drainrules.NO_NAMESPACES,
    elsewhere: budgets.Elsewhere | None = None,
) -> PodSurvey:
    """The node's `pods` as a drain with `policy` would meet them now; `maintenance`: other maintenance
    owners' claims on the node (drainpods.holding); `namespaces`: the labels of the pods' namespaces
    (read when `policy.reads_namespaces`); `elsewhere`: where the evicted pods' replacements could go."""
    selection = drainpods.select_pods(pods, policy.options(now, namespaces=namespaces))
    drained = selection.drained  # every order: a later one's budget can hold the drain as well
    covering = list(pdbs(budgets.namespaces(drained))) if drained else []
    found = budgets.never_allowed(pods, drained, covering, elsewhere) if drained else ()
    return PodSurvey(
        mirror_pods(pods),
        nothing_to_evict=selection.done,
        never=drainpods.never(selection, [str(n) for n in found]),
        holding=drainpods.holding(pods, policy.blocking_pods, maintenance),
        protected=drainpods.protected(selection),
        exhausted=budgets.exhausted(pods, drained, covering),
    )
