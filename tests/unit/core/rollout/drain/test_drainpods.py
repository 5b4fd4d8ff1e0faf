"""kubectl drain's filters, table-tested (k8s.io/kubectl/pkg/drain/filters.go)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from eventedpleg.core.rollout.drain import pods as drainpods
from eventedpleg.core.rollout.drain.pods import PodRef
from eventedpleg.models.nodeconfig import LabelSelector


def pod(name: str, *, owner: str | None = "ReplicaSet", **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns"}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "o", "controller": True}]
    meta.update(extra.pop("meta", {}))
    return {
        "metadata": meta,
        "spec": extra.pop("spec", {}),
        "status": extra.pop("status", {"phase": "Running"}),
    }


def test_kubectl_filters() -> None:
    pods = [
        pod("web"),
        pod("ds", owner="DaemonSet"),
        pod("static", owner="Node", meta={"annotations": {"kubernetes.io/config.mirror": "abc"}}),
        pod("bare", owner=None),
        pod("scratch", spec={"volumes": [{"name": "tmp", "emptyDir": {}}]}),
        pod("done", owner=None, status={"phase": "Succeeded"}),
        pod("going", meta={"deletionTimestamp": "2026-11-01T00:00:00Z"}),
    ]
    strict = drainpods.select_pods(pods, drainpods.Options(delete_empty_dir_data=False, force=False))
    assert strict.evict == (PodRef("ns", "web"), PodRef("ns", "done"))
    assert strict.terminating == (PodRef("ns", "going"),)
    assert [str(ref) for ref, _ in strict.skipped] == ["ns/ds", "ns/static"]
    assert strict.mirror_pods == (PodRef("ns", "static"),)
    blocked = dict(strict.blocked)
    assert "drain.force" in blocked[PodRef("ns", "bare")]
    assert "deleteEmptyDirData" in blocked[PodRef("ns", "scratch")]
    assert not strict.done

    loose = drainpods.select_pods(pods, drainpods.Options(delete_empty_dir_data=True, force=True))
    assert {r.name for r in loose.evict} == {"web", "bare", "scratch", "done"}
    assert loose.blocked == ()


def test_a_node_with_only_daemonsets_and_mirror_pods_is_drained() -> None:
    pods = [
        pod("ds", owner="DaemonSet"),
        pod("m", meta={"annotations": {"kubernetes.io/config.mirror": "x"}}),
    ]
    assert drainpods.select_pods(pods, drainpods.Options(delete_empty_dir_data=True, force=False)).done


def test_the_users_choices_of_what_a_drain_evicts() -> None:
    now = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
    stuck = {"deletionTimestamp": (now - timedelta(seconds=120)).isoformat().replace("+00:00", "Z")}
    fresh = {"deletionTimestamp": (now - timedelta(seconds=5)).isoformat().replace("+00:00", "Z")}
    pods = [
        pod("web", meta={"labels": {"tier": "web"}}),
        pod("db", meta={"labels": {"tier": "db"}}),
        pod("pinned", meta={"labels": {"tier": "web"}, "annotations": {"eventedpleg.io/drain": "skip"}}),
        pod("stuck", meta={"labels": {"tier": "web"}, **stuck}),
        pod("leaving", meta={"labels": {"tier": "web"}, **fresh}),
    ]
    options = drainpods.Options(
        delete_empty_dir_data=True,
        force=False,
        pods=LabelSelector(match_labels={"tier": "web"}),
        stalled_delete_seconds=60,
        now=now,
    )
    chosen = drainpods.select_pods(pods, options)
    assert chosen.evict == (PodRef("ns", "web"),)
    assert chosen.terminating == (PodRef("ns", "leaving"),)  # deleted 5 s ago: waited for
    assert dict(chosen.skipped) == {
        PodRef("ns", "db"): drainpods.SkipKind.NOT_SELECTED,
        PodRef("ns", "pinned"): drainpods.SkipKind.OPTED_OUT,
        PodRef("ns", "stuck"): drainpods.SkipKind.STALLED_DELETE,  # 120 s past its deletion: not waited for
    }
    # the defaults: every pod kubectl drain evicts, every terminating pod waited for; the opt-out stands
    default = drainpods.select_pods(pods, drainpods.Options(delete_empty_dir_data=True, force=False, now=now))
    assert set(default.evict) == {PodRef("ns", "web"), PodRef("ns", "db")}
    assert set(default.terminating) == {PodRef("ns", "stuck"), PodRef("ns", "leaving")}
    assert dict(default.skipped) == {PodRef("ns", "pinned"): drainpods.SkipKind.OPTED_OUT}


KARPENTER = {"karpenter.sh/do-not-disrupt": "true"}
AUTOSCALER = {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}


def test_pods_that_ask_not_to_be_disrupted_block_the_drain_whatever_the_options() -> None:
    pods = [
        pod("batch", meta={"annotations": KARPENTER}),
        pod("cache", meta={"annotations": AUTOSCALER}),
        pod("fine", meta={"annotations": {"karpenter.sh/do-not-disrupt": "false"}}),  # asks nothing
        pod("evictable", meta={"annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"}}),
        pod("finished", meta={"annotations": KARPENTER}, status={"phase": "Succeeded"}),  # may go
        pod("agent", owner="DaemonSet", meta={"annotations": KARPENTER}),  # skipped as ever
    ]
    # a forced delete's options (onTimeout: ForceDelete at the deadline) included
    for options in (
        drainpods.Options(delete_empty_dir_data=False, force=False),
        drainpods.Options(delete_empty_dir_data=True, force=True),
    ):
        chosen = drainpods.select_pods(pods, options)
        assert dict(chosen.blocked) == {
            PodRef("ns", "batch"): drainpods.Blocker.DO_NOT_DISRUPT,
            PodRef("ns", "cache"): drainpods.Blocker.NOT_SAFE_TO_EVICT,
        }
        assert chosen.evict == (PodRef("ns", "fine"), PodRef("ns", "evictable"), PodRef("ns", "finished"))
        named = (
            'ns/batch annotated karpenter.sh/do-not-disrupt: "true"; '
            'ns/cache annotated cluster-autoscaler.kubernetes.io/safe-to-evict: "false"'
        )
        assert drainpods.protected(chosen) == named
        assert drainpods.never(chosen) == named  # never finishes: onBlocked decides, before the cordon
        result = drainpods.result(chosen)
        assert (result.done, result.protected, result.never) == (False, named, named)
    # a pod kept by drain.podSelector or our own opt-out is not evicted anyway: it blocks nothing
    kept = pod("kept", meta={"annotations": {**KARPENTER, "eventedpleg.io/drain": "skip"}})
    assert drainpods.protected(drainpods.select_pods([kept], drainpods.Options(True, False))) == ""


def test_protected_names_only_the_pods_that_asked_and_the_blocker_kinds_say_which() -> None:
    pods = [pod("bare", owner=None), pod("batch", meta={"annotations": KARPENTER})]
    chosen = drainpods.select_pods(pods, drainpods.Options(delete_empty_dir_data=True, force=False))
    assert drainpods.protected(chosen) == 'ns/batch annotated karpenter.sh/do-not-disrupt: "true"'
    assert drainpods.result(chosen).blockers == {
        drainpods.Blocker.NO_CONTROLLER,
        drainpods.Blocker.DO_NOT_DISRUPT,
    }
    assert drainpods.PROTECTED <= drainpods.PERMANENT and drainpods.PROTECTED <= drainpods.NEEDS_ATTENTION
