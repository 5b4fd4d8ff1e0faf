"""release-nodes' write loop (cli.release_cmd._release) against answers given here: a refused write (the
node-keys policy still cached after uninstall) is tried again with backoff until it goes through or the
time is up; a conflict plans again on the node as it is now."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from eventedpleg import protocol
from eventedpleg.cli import release_cmd
from eventedpleg.cli.failures import EXIT_API
from eventedpleg.core.rollout.releasenodes import release_node
from eventedpleg.k8s import nodes
from eventedpleg.k8s.errors import Conflict, Forbidden


def body(version: str, **annotations: str) -> dict[str, Any]:
    meta = {"name": "node-1", "resourceVersion": version, "annotations": annotations}
    return {"metadata": meta, "spec": {"unschedulable": False}}


class Api:
    """Answers patch_node from a list (an exception raised, anything else returned); get_node returns
    `now`. Records each patch body and each sleep."""

    def __init__(self, answers: list[object], now: dict[str, Any]) -> None:
        self.answers: Iterator[object] = iter(answers)
        self.now = now
        self.patches: list[dict[str, Any]] = []
        self.sleeps: list[float] = []

    def patch(self, api: object, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.patches.append(patch)
        answer = next(self.answers)
        if isinstance(answer, Exception):
            raise answer
        return self.now


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Api:
    fake = Api([], body("1"))
    monkeypatch.setattr(nodes, "patch_node", fake.patch)
    monkeypatch.setattr(nodes, "get_node", lambda api, name: fake.now)
    monkeypatch.setattr(time, "sleep", fake.sleeps.append)
    return fake


REFUSED = Forbidden(403, "Forbidden", "only the eventedpleg operator may set, change or remove ...")


def test_a_refused_write_is_tried_again_with_backoff(api: Api) -> None:
    api.answers = iter([REFUSED, REFUSED, {}])
    first = release_node(body("1", **{protocol.ANN_OWNER: "cluster"}))
    api.now = body("1", **{protocol.ANN_OWNER: "cluster"})
    done = release_cmd._release(object(), first, retry_seconds=60)
    assert done is not None and done.node == "node-1"
    assert len(api.patches) == 3 and api.sleeps == list(release_cmd.BACKOFF[:2])
    assert api.patches[-1]["metadata"]["annotations"] == {protocol.ANN_OWNER: None}


def test_a_write_refused_past_the_retry_time_fails(api: Api) -> None:
    api.answers = iter([REFUSED] * 3)
    first = release_node(body("1", **{protocol.ANN_OWNER: "cluster"}))
    with pytest.raises(SystemExit) as exit_:
        release_cmd._release(object(), first, retry_seconds=0)
    assert exit_.value.code == EXIT_API and len(api.patches) == 1


def test_a_conflict_plans_again_on_the_node_as_it_is(api: Api) -> None:
    api.answers = iter([Conflict(409, "Conflict", "changed"), {}])
    first = release_node(body("1", **{protocol.ANN_OWNER: "cluster"}))
    api.now = body("2", **{protocol.ANN_OWNER: "cluster", protocol.ANN_REASON: "x"})
    done = release_cmd._release(object(), first, retry_seconds=60)
    assert done is not None and api.sleeps == []
    assert api.patches[-1]["metadata"]["resourceVersion"] == "2"
    assert set(api.patches[-1]["metadata"]["annotations"]) == {protocol.ANN_OWNER, protocol.ANN_REASON}


def test_nothing_left_after_a_conflict_writes_nothing_more(api: Api) -> None:
    api.answers = iter([Conflict(409, "Conflict", "changed")])
    first = release_node(body("1", **{protocol.ANN_OWNER: "cluster"}))
    api.now = body("2")  # someone else cleaned it meanwhile
    assert release_cmd._release(object(), first, retry_seconds=60) is None
    assert len(api.patches) == 1
