"""Pods whose kubelet status stops following their containers (core.node.facts.podsync)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventedpleg.core.node.facts import podsync
from eventedpleg.core.node.facts.podsync import (
    KubeletPod,
    LagKind,
    PodSyncLook,
    RuntimeContainer,
    RuntimeState,
    StatusContainer,
    StatusState,
)

T0 = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
UID = "b28bf30a6321f314b1dfe27a025447a1"


def _ctr(
    cid: str, attempt: int, state: RuntimeState = RuntimeState.RUNNING, created: float = 0.0, **kw: object
) -> RuntimeContainer:
    return RuntimeContainer(
        id=cid,
        pod_uid=kw.pop("uid", UID),  # type: ignore[arg-type]
        pod="default/idle-004",
        name=kw.pop("name", "idle"),  # type: ignore[arg-type]
        state=state,
        attempt=attempt,
        created_at=T0 + timedelta(seconds=created),
        **kw,  # type: ignore[arg-type]
    )


def _pod(*statuses: StatusContainer, deleting: bool = False, uid: str = UID) -> KubeletPod:
    return KubeletPod(uid=uid, pod="default/idle-004", deleting=deleting, containers=statuses)


def _status(cid: str, state: StatusState, restarts: int, reason: str = "") -> StatusContainer:
    return StatusContainer("idle", cid, state, restarts, reason)


def _look(
    runtime: tuple[RuntimeContainer, ...], pods: tuple[KubeletPod, ...], at: float, **kw: object
) -> PodSyncLook:
    return PodSyncLook(runtime, pods, T0 + timedelta(seconds=at), **kw)  # type: ignore[arg-type]


# The missed restart: attempt 3 runs, the status still shows attempt 2's container terminated.
RESTARTED = (_ctr("aaa2", 2, RuntimeState.EXITED, created=0), _ctr("aaa3", 3, created=10))
STALE = _pod(_status("aaa2", StatusState.TERMINATED, 2, "Error"))


def test_a_restart_the_status_has_not_followed_is_reported_once_older_than_the_bound() -> None:
    young = podsync.lags(_look(RESTARTED, (STALE,), at=35))
    assert len(young) == 1 and young[0].kind is LagKind.RESTART
    assert young[0].since == T0 + timedelta(seconds=10)  # the new container's creation
    assert podsync.overdue(young, T0 + timedelta(seconds=35)) == ()  # 25 s: within the bound
    late = podsync.lags(_look(RESTARTED, (STALE,), at=41))
    (lag,) = podsync.overdue(late, T0 + timedelta(seconds=41))
    assert lag.container_id == "aaa3" and lag.pod == "default/idle-004"
    assert lag.reason == (
        "default/idle-004 container idle: running in the runtime (aaa3, attempt 3), the kubelet's status "
        "says terminated (Error) (aaa2, restartCount 2)"
    )


@pytest.mark.parametrize(
    "shown",
    [
        (),  # a new pod the status never showed a container of
        (_status("", StatusState.WAITING, 2, "CrashLoopBackOff"),),
        (_status("aaa3", StatusState.WAITING, 3),),  # the right container, not shown running
        (_status("other", StatusState.RUNNING, 3),),  # another container shown running (a duplicate)
    ],
)
def test_every_status_but_the_running_container_itself_lags(shown: tuple[StatusContainer, ...]) -> None:
    assert (
        len(
            podsync.overdue(
                podsync.lags(_look(RESTARTED, (_pod(*shown),), at=100)), T0 + timedelta(seconds=100)
            )
        )
        == 1
    )


def test_a_status_that_shows_the_newest_container_running_is_in_sync() -> None:
    synced = _pod(_status("aaa3", StatusState.RUNNING, 3))
    assert podsync.lags(_look(RESTARTED, (synced,), at=1000)) == ()


def test_a_missed_exit_counts_from_the_first_look_that_saw_it() -> None:
    exited = (_ctr("bbb0", 0, RuntimeState.EXITED),)
    shown_running = (_pod(_status("bbb0", StatusState.RUNNING, 0)),)
    first = podsync.lags(_look(exited, shown_running, at=100))
    assert [lag.kind for lag in first] == [LagKind.EXIT] and podsync.overdue(
        first, T0 + timedelta(seconds=100)
    ) == ()
    later = podsync.lags(_look(exited, shown_running, at=131), previous=first)
    assert later[0].since == T0 + timedelta(seconds=100)
    assert podsync.overdue(later, T0 + timedelta(seconds=131)) == later


def test_a_known_finish_time_dates_a_missed_exit() -> None:
    exited = (_ctr("bbb0", 0, RuntimeState.EXITED, finished_at=T0 + timedelta(seconds=5)),)
    found = podsync.lags(_look(exited, (_pod(_status("bbb0", StatusState.RUNNING, 0)),), at=40))
    assert podsync.overdue(found, T0 + timedelta(seconds=40)) == found != ()


def test_a_lag_that_moves_to_a_new_container_keeps_its_start() -> None:
    """The kubelet remaking a running pod's sandbox each GC pass (docs/compatibility.md, missed restarts):
    a new container every round, a status that never shows one running."""
    waiting = (_pod(_status("", StatusState.WAITING, 0, "ContainerCreating")),)
    first = podsync.lags(_look((_ctr("r1", 12, created=0),), waiting, at=20))
    assert podsync.overdue(first, T0 + timedelta(seconds=20)) == ()
    remade = (_ctr("r1", 12, RuntimeState.EXITED), _ctr("r2", 13, created=25))
    (lag,) = podsync.lags(_look(remade, waiting, at=40), previous=first)
    assert lag.container_id == "r2" and lag.since == T0
    assert podsync.overdue((lag,), T0 + timedelta(seconds=40)) == (lag,)


def test_a_restarted_kubelet_gets_the_bound_again() -> None:
    look = _look(RESTARTED, (STALE,), at=100, kubelet_started=T0 + timedelta(seconds=90))
    found = podsync.lags(look, previous=podsync.lags(_look(RESTARTED, (STALE,), at=50)))
    assert found[0].since == T0 + timedelta(seconds=90)
    assert podsync.overdue(found, look.at) == ()


def test_pods_being_deleted_or_unknown_to_the_kubelet_and_containers_being_created_are_not_judged() -> None:
    assert podsync.lags(_look(RESTARTED, (_pod(deleting=True),), at=100)) == ()
    assert podsync.lags(_look(RESTARTED, (_pod(uid="other"),), at=100)) == ()
    creating = (_ctr("aaa2", 2, RuntimeState.EXITED), _ctr("aaa3", 3, RuntimeState.CREATED, created=1))
    assert podsync.lags(_look(creating, (STALE,), at=100)) == ()


def test_the_newest_attempt_is_judged_not_the_order_crictl_lists_them_in() -> None:
    running_old = (_ctr("ccc5", 5, RuntimeState.EXITED, created=50), _ctr("ccc4", 4, created=40))
    shown = _pod(_status("ccc5", StatusState.TERMINATED, 5))
    # attempt 5 exited and its status says so; attempt 4 running is not what the status should show
    assert podsync.lags(_look(running_old, (shown,), at=1000)) == ()


# --- properties -----------------------------------------------------------------------------------------

_states = st.sampled_from(list(RuntimeState))
_shown = st.sampled_from(list(StatusState))


@st.composite
def _node(draw: st.DrawFn) -> tuple[tuple[RuntimeContainer, ...], tuple[KubeletPod, ...]]:
    """Up to four pods of one or two container names, several attempts each, and a status per pod that
    shows any of their containers (or none) in any state."""
    runtime: list[RuntimeContainer] = []
    pods: list[KubeletPod] = []
    for p in range(draw(st.integers(0, 4))):
        uid = f"pod{p}"
        statuses: list[StatusContainer] = []
        for name in draw(st.lists(st.sampled_from(["a", "b"]), unique=True, max_size=2)):
            ids = []
            for attempt in range(draw(st.integers(1, 3))):
                cid = f"{uid}-{name}-{attempt}"
                ids.append(cid)
                created = draw(st.floats(0, 200))
                runtime.append(_ctr(cid, attempt, draw(_states), created, uid=uid, name=name))
            if draw(st.booleans()):
                shown_id = draw(st.sampled_from([*ids, ""]))
                statuses.append(StatusContainer(name, shown_id, draw(_shown), draw(st.integers(0, 3))))
        pods.append(_pod(*statuses, deleting=draw(st.booleans()), uid=uid))
    return tuple(runtime), tuple(pods)


@settings(max_examples=200, deadline=None)
@given(_node(), st.floats(0, 400), st.floats(0, 400))
def test_properties(
    node: tuple[tuple[RuntimeContainer, ...], tuple[KubeletPod, ...]], at: float, later: float
) -> None:
    runtime, pods = node
    look = _look(runtime, pods, at=at)
    found = podsync.lags(look)
    newest = {(c.pod_uid, c.name): c for c in sorted(runtime, key=lambda c: (c.attempt, c.created_at, c.id))}
    by_uid = {p.uid: p for p in pods}
    for lag in found:
        ctr = newest[(lag.pod_uid, lag.container)]
        pod = by_uid[lag.pod_uid]
        status = next((s for s in pod.containers if s.name == lag.container), None)
        # only the newest container of a live pod, and only where the status really disagrees
        assert lag.container_id == ctr.id and not pod.deleting
        if lag.kind is LagKind.RESTART:
            assert ctr.state is RuntimeState.RUNNING
            assert status is None or status.id != ctr.id or status.state is not StatusState.RUNNING
        else:
            assert ctr.state is RuntimeState.EXITED
            assert status is not None and status.id == ctr.id and status.state is StatusState.RUNNING
        assert lag.since <= look.at and lag.reason.startswith(f"{pod.pod} container {lag.container}: ")
    # every running newest container of a live pod either is shown running or lags
    for (uid, _), ctr in newest.items():
        live = by_uid.get(uid)
        if live is None or live.deleting or ctr.state is not RuntimeState.RUNNING:
            continue
        in_sync = any(s.id == ctr.id and s.state is StatusState.RUNNING for s in live.containers)
        assert in_sync != any(lag.container_id == ctr.id for lag in found)
    # a lag seen again later keeps its start; overdue is monotonic in time
    again = podsync.lags(_look(runtime, pods, at=at + later), previous=found)
    assert [lag.key for lag in again] == [lag.key for lag in found]
    assert all(a.since <= f.since for a, f in zip(again, found, strict=True))
    due_now = {lag.key for lag in podsync.overdue(found, look.at)}
    assert due_now <= {lag.key for lag in podsync.overdue(again, look.at + timedelta(seconds=later))}


# --- parsing --------------------------------------------------------------------------------------------


def test_crictl_ps_json_is_read_as_the_kubelets_containers() -> None:
    text = json.dumps(
        {
            "containers": [
                {
                    "id": "39a1cbb2ec46",
                    "podSandboxId": "285718ab4e75",
                    "metadata": {"name": "idle", "attempt": 2},
                    "state": "CONTAINER_RUNNING",
                    "createdAt": "1795880264759034166",
                    "labels": {
                        podsync.CONTAINER_NAME: "idle",
                        podsync.POD_NAME: "idle-004-realnode",
                        podsync.POD_NAMESPACE: "default",
                        podsync.POD_UID: UID,
                    },
                },
                {"id": "x", "metadata": {"name": "not-ours"}, "state": "CONTAINER_EXITED", "labels": {}},
            ]
        }
    )
    (ctr,) = podsync.parse_crictl_ps(text)
    assert ctr == RuntimeContainer(
        "39a1cbb2ec46",
        UID,
        "default/idle-004-realnode",
        "idle",
        RuntimeState.RUNNING,
        2,
        datetime.fromtimestamp(1795880264.759034166, tz=UTC),
    )


def test_a_pod_list_is_read_with_each_containers_state() -> None:
    text = json.dumps(
        {
            "items": [
                {
                    "metadata": {"name": "idle-004-realnode", "namespace": "default", "uid": UID},
                    "status": {
                        "containerStatuses": [
                            {
                                "name": "idle",
                                "containerID": "containerd://aaa2",
                                "restartCount": 2,
                                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                                "lastState": {"terminated": {"exitCode": 137}},
                            }
                        ]
                    },
                },
                {"metadata": {"name": "gone", "uid": "u2", "deletionTimestamp": "2026-11-28T12:00:00Z"}},
            ]
        }
    )
    pod, gone = podsync.parse_pods(text)
    assert pod.containers == (StatusContainer("idle", "aaa2", StatusState.WAITING, 2, "CrashLoopBackOff"),)
    assert gone.deleting and gone.containers == ()


@pytest.mark.parametrize("text", ["", "[]", '{"containers": 3}', "{nope"])
def test_what_is_not_a_reading_is_refused(text: str) -> None:
    with pytest.raises(podsync.PodSyncError):
        podsync.parse_crictl_ps(text)
    with pytest.raises(podsync.PodSyncError):
        podsync.parse_pods(text.replace("containers", "items"))


FIXTURES = Path(__file__).parents[4] / "realnode" / "fixtures"


def test_a_real_look_the_moment_four_restarts_and_a_start_began() -> None:
    """`crictl ps -a -o json` (crictl v1.36.0, exit pods only) and the kubelet's /pods, read on the real-node
    rig (kubelet v1.36.4, gate off) within a second of new containers starting: every pod lags, none yet
    overdue, and all would be 31 s later with nothing changed."""
    runtime = podsync.parse_crictl_ps((FIXTURES / "crictl-ps-exit-pods.json").read_text())
    pods = podsync.parse_pods((FIXTURES / "kubelet-pods-exit-pods.json").read_text())
    assert len(runtime) == 9 and len(pods) == 5
    newest = max(ctr.created_at for ctr in runtime)
    found = podsync.lags(PodSyncLook(runtime, pods, newest))
    assert sorted(lag.pod for lag in found) == [f"default/idle-00{i}-realnode" for i in range(5)]
    assert all(lag.kind is LagKind.RESTART for lag in found)
    assert podsync.overdue(found, newest) == ()
    later = newest + timedelta(seconds=31)
    assert podsync.overdue(podsync.lags(PodSyncLook(runtime, pods, later), found), later) == found
    start = next(lag for lag in found if lag.pod == "default/idle-004-realnode")
    assert start.reason.endswith("the kubelet's status says waiting (ContainerCreating) (restartCount 0)")
