"""One drain attempt on a node with kubectl semantics: the Eviction API (PodDisruptionBudgets respected,
HTTP 429 = try again later), or plain deletes when the user chose ForceDelete.

An attempt never waits: it lists the node's pods (one LIST with a field selector), requests what it can
and reports. The rollout calls it again on the next pass (kubectl retries every 5 s the same way).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from kubernetes import client

from eventedpleg.core.rollout.drain import budgets
from eventedpleg.core.rollout.drain import pods as drainpods
from eventedpleg.core.rollout.drain import survey as drainsurvey
from eventedpleg.core.rollout.drain.pods import Blocker, DrainResult, EvictionProblem, PodRef
from eventedpleg.core.rollout.drain.policy import DrainPolicy
from eventedpleg.k8s.client import PAGE, get_json, list_all
from eventedpleg.k8s.errors import ApiError, NotFound, TooManyRequests, translated


@translated
def node_pods(api: client.ApiClient, node: str) -> list[dict[str, Any]]:
    return list(get_json(api, "/api/v1/pods", {"fieldSelector": f"spec.nodeName={node}"})["items"])


@translated
def pdbs_in(api: client.ApiClient, namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """The PodDisruptionBudgets of these namespaces (one LIST each: drained pods are in few of them)."""
    found: list[dict[str, Any]] = []
    for namespace in namespaces:
        found.extend(_list(api, f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets"))
    return found


@translated
def pending_in(api: client.ApiClient, namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """The Pending pods of these namespaces (one LIST each), for a budget the drain needs more evictions
    of than it allows now (core.rollout.drain.budgets)."""
    found: list[dict[str, Any]] = []
    for namespace in namespaces:
        path = f"/api/v1/namespaces/{namespace}/pods"
        found.extend(get_json(api, path, {"fieldSelector": "status.phase=Pending"})["items"])
    return found


def namespace_labels(api: client.ApiClient, policy: DrainPolicy) -> dict[str, dict[str, str]]:
    """The labels of every Namespace, by name, for drain.rules' namespaceSelector; no request at all
    when no rule has one (`policy.reads_namespaces`), so other drains cost no more."""
    if not policy.reads_namespaces:
        return {}
    return {
        str(item["metadata"]["name"]): dict(item["metadata"].get("labels") or {})
        for item in _all_namespaces(api)
    }


@translated
def _all_namespaces(api: client.ApiClient) -> list[dict[str, Any]]:
    return list_all(api, "/api/v1/namespaces")


# medik8s NodeMaintenance (https://github.com/medik8s/node-maintenance-operator, api/v1beta1): one
# cluster-scoped object per node under maintenance, spec.nodeName; the shared convention for "this node
# is being maintained by someone". Not installed: nobody holds a node that way.
NODE_MAINTENANCES = "/apis/nodemaintenance.medik8s.io/v1beta1/nodemaintenances"


# Where the API is not installed (most clusters), asking again before every cordon would add a request per
# node to a rollout; it is asked again after this long (an install is seen within a minute).
NOT_SERVED_RECHECK = 60.0
_not_served_until = [0.0]  # monotonic time until which NODE_MAINTENANCES is known not to be served


def maintenance_of(api: client.ApiClient, node: str) -> list[str]:
    """The NodeMaintenance objects that hold `node`, as "NodeMaintenance NAME"."""
    return maintenances(api).get(node, [])


def maintenances(api: client.ApiClient) -> dict[str, list[str]]:
    """The NodeMaintenance objects by the node they hold, as "NodeMaintenance NAME"."""
    if time.monotonic() < _not_served_until[0]:
        return {}
    try:
        items = _list(api, NODE_MAINTENANCES)
    except NotFound:  # the CRD is not installed (the API server answers 404 for an unknown group)
        _not_served_until[0] = time.monotonic() + NOT_SERVED_RECHECK
        return {}
    held: dict[str, list[str]] = {}
    for item in items:
        node = str((item.get("spec") or {}).get("nodeName") or "")
        held.setdefault(node, []).append(f"NodeMaintenance {item['metadata']['name']}")
    return held


@translated
def _list(api: client.ApiClient, path: str) -> list[dict[str, Any]]:
    return list(get_json(api, path)["items"])


@translated
def all_pdbs(api: client.ApiClient, *, limit: int = PAGE) -> list[dict[str, Any]]:
    """Every PodDisruptionBudget of the cluster, for preflight, read in pages of `limit`."""
    return list_all(api, "/apis/policy/v1/poddisruptionbudgets", limit=limit)


def never_allowed(api: client.ApiClient, pods: list[dict[str, Any]], evict: Sequence[PodRef]) -> list[str]:
    """Which of `evict` no PodDisruptionBudget can let go as things are (core.rollout.drain.budgets)."""
    if not evict:
        return []
    return [str(n) for n in budgets.never_allowed(pods, evict, pdbs_in(api, budgets.namespaces(evict)))]


@translated
def _evict(api: client.ApiClient, ref: PodRef, policy: DrainPolicy) -> None:
    body = client.V1Eviction(
        metadata=client.V1ObjectMeta(name=ref.name, namespace=ref.namespace),
        delete_options=client.V1DeleteOptions(grace_period_seconds=policy.grace()),
    )
    client.CoreV1Api(api).create_namespaced_pod_eviction(ref.name, ref.namespace, body)


@translated
def _delete(api: client.ApiClient, ref: PodRef, policy: DrainPolicy) -> None:
    client.CoreV1Api(api).delete_namespaced_pod(ref.name, ref.namespace, grace_period_seconds=policy.grace())


def mirror_pods_in(pods: list[dict[str, Any]]) -> tuple[str, ...]:
    """Static pods among these (mirror pods carry kubernetes.io/config.mirror)."""
    return drainsurvey.mirror_pods(pods)


def attempt(
    api: client.ApiClient,
    node: str,
    policy: DrainPolicy,
    *,
    now: datetime,
    force_delete: bool = False,
    pods: list[dict[str, Any]] | None = None,
    namespaces: Mapping[str, Mapping[str, str]] | None = None,
) -> DrainResult:
    """One pass over the node's pods (`pods` when the caller has just listed them after cordoning;
    `namespaces`: the Namespaces' labels when the caller has read them, see `namespace_labels`)."""
    pods = node_pods(api, node) if pods is None else pods
    namespaces = namespace_labels(api, policy) if namespaces is None else namespaces
    options = policy.options(now, force_delete=force_delete, namespaces=namespaces)
    selection = drainpods.select_pods(pods, options)
    if selection.done:
        return drainpods.result(selection)
    problems: list[EvictionProblem] = []
    for ref in selection.evict:
        try:
            if force_delete:
                _delete(api, ref, policy)
            else:
                _evict(api, ref, policy)
        except NotFound:
            continue  # already gone
        except TooManyRequests as exc:  # a PodDisruptionBudget says not now (kubectl: retry)
            problems.append(EvictionProblem(ref, Blocker.EVICTION_REFUSED, exc.message))
        except ApiError as exc:
            problems.append(EvictionProblem(ref, Blocker.EVICTION_FAILED, str(exc)))
    refused = [p.pod for p in problems if p.kind is Blocker.EVICTION_REFUSED]
    return drainpods.result(selection, problems, never_allowed(api, pods, refused))
