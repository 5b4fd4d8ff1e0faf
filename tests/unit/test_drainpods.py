"""kubectl drain's filters, table-tested (k8s.io/kubectl/pkg/drain/filters.go)."""

from __future__ import annotations

from typing import Any

from eventedpleg.core.rollout import drainpods
from eventedpleg.core.rollout.drainpods import PodRef


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
    strict = drainpods.select(pods, delete_empty_dir_data=False, force=False)
    assert strict.evict == (PodRef("ns", "web"), PodRef("ns", "done"))
    assert strict.terminating == (PodRef("ns", "going"),)
    assert [str(ref) for ref, _ in strict.skipped] == ["ns/ds", "ns/static"]
    assert strict.mirror_pods == (PodRef("ns", "static"),)
    blocked = dict(strict.blocked)
    assert "drain.force" in blocked[PodRef("ns", "bare")]
    assert "deleteEmptyDirData" in blocked[PodRef("ns", "scratch")]
    assert not strict.done

    loose = drainpods.select(pods, delete_empty_dir_data=True, force=True)
    assert {r.name for r in loose.evict} == {"web", "bare", "scratch", "done"}
    assert loose.blocked == ()


def test_a_node_with_only_daemonsets_and_mirror_pods_is_drained() -> None:
    pods = [
        pod("ds", owner="DaemonSet"),
        pod("m", meta={"annotations": {"kubernetes.io/config.mirror": "x"}}),
    ]
    assert drainpods.select(pods, delete_empty_dir_data=True, force=False).done
