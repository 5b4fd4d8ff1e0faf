"""The operator's node cache: newest resourceVersion wins, and a Cordon in flight is assumed done (like
kube-scheduler's assume cache) so an overlapping pass never takes more nodes than maxUnavailable."""

from __future__ import annotations

from typing import Any

from eventedpleg.controller.nodecache import NodeCache, assumed_cordoned
from eventedpleg.core.rollout.actions import Cordon
from eventedpleg.core.rollout.drain.policy import DrainPolicy
from eventedpleg.core.rollout.snapshot import node_view
from eventedpleg.models.nodeconfig import DrainSpec
from eventedpleg.protocol import NodeState


def _node(name: str, rv: int, *, unschedulable: bool = False, ready: bool = True) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "resourceVersion": str(rv), "annotations": {}, "labels": {}},
        "spec": {"unschedulable": unschedulable},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def _cordon(node: str, rv: int) -> Cordon:
    return Cordon(
        node=node,
        resource_version=str(rv),
        owner="cluster",
        hash="abc",
        include_control_plane=False,
        was_unschedulable=False,
        agent_options="{}",
        drain=DrainPolicy.of(DrainSpec()),
    )


def test_an_older_event_never_replaces_a_newer_view() -> None:
    cache = NodeCache()
    assert cache.apply_event("ADDED", _node("a", 5))
    assert not cache.apply_event("MODIFIED", _node("a", 4, unschedulable=True))
    assert cache.views["a"].unschedulable is False
    assert cache.apply_event("DELETED", _node("a", 6))
    assert "a" not in cache.views


def test_the_echo_of_a_write_already_taken_changes_nothing_and_facts_are_kept_when_equal() -> None:
    cache = NodeCache()
    assert cache.apply_event("ADDED", _node("a", 5))
    facts = cache.views["a"].facts
    assert not cache.apply_event("MODIFIED", _node("a", 5))  # the same version again: no wake-up
    assert cache.apply_event("MODIFIED", _node("a", 6, unschedulable=True))
    assert cache.views["a"].unschedulable and cache.views["a"].facts is facts
    relabelled = _node("a", 7)
    relabelled["metadata"]["labels"] = {"pool": "b"}
    assert cache.apply_event("MODIFIED", relabelled)
    assert cache.views["a"].facts is not facts and cache.views["a"].labels == {"pool": "b"}


def test_a_cordon_in_flight_counts_at_once_and_events_wait_for_its_write() -> None:
    cache = NodeCache()
    cache.apply_event("ADDED", _node("a", 5))
    before = cache.views["a"]
    cache.assume("a", assumed_cordoned(before, _cordon("a", 5)))

    # The next pass already sees the node taken (cordoned, ours, draining) ...
    (view,) = cache.snapshot()
    assert view.unschedulable and view.marks.cordoned_by_us and view.marks.state is NodeState.DRAINING
    # ... and a heartbeat that lands before our write does not undo the assumption.
    assert not cache.apply_event("MODIFIED", _node("a", 6))
    assert cache.snapshot()[0].unschedulable

    written = node_view(_node("a", 7, unschedulable=True))  # the step reads its write's answer once
    cache.settle("a", written, None)
    assert cache.views["a"].resource_version == "7" and cache.views["a"].unschedulable


def test_a_step_write_is_taken_like_its_event_and_its_echo_is_not_taken_again() -> None:
    cache = NodeCache()
    cache.apply_event("ADDED", _node("a", 5))
    facts = cache.views["a"].facts
    written = node_view(_node("a", 6, unschedulable=True))
    assert cache.written(written)
    assert cache.views["a"].unschedulable and cache.views["a"].facts is facts  # facts kept, as for events
    assert not cache.apply_event("MODIFIED", _node("a", 6, unschedulable=True))  # the watch's echo
    assert not cache.written(node_view(_node("a", 4)))  # older than the cache
    assert cache.views["a"].resource_version == "6"


def test_a_failed_cordon_puts_the_old_view_back_then_any_newer_event() -> None:
    cache = NodeCache()
    cache.apply_event("ADDED", _node("a", 5))
    before = cache.views["a"]
    cache.assume("a", assumed_cordoned(before, _cordon("a", 5)))
    cache.apply_event("MODIFIED", _node("a", 8, ready=False))  # held while the step runs

    cache.settle("a", None, before)

    view = cache.views["a"]
    assert not view.unschedulable  # the assumption is gone ...
    assert view.resource_version == "8" and not view.ready  # ... and the held event was applied
    assert cache.apply_event("MODIFIED", _node("a", 9))  # events flow again


def test_a_new_list_forgets_nodes_deleted_while_the_watch_was_gone_but_not_an_assumed_one() -> None:
    cache = NodeCache()
    for name in ("a", "b", "c"):
        cache.apply_event("ADDED", _node(name, 1))
    cache.assume("c", assumed_cordoned(cache.views["c"], _cordon("c", 1)))  # a step is in flight on c
    cache.retain({"a"})
    assert sorted(cache.views) == ["a", "c"]  # b is gone; c waits for its step to settle


def test_a_step_planned_on_an_older_view_is_not_claimed() -> None:
    """An action carries the resourceVersion it was planned on; once the node moved on (a step that just
    ended wrote it, an event came), claiming it fails and leaves the node free for the next pass."""
    cache = NodeCache()
    cache.apply_event("ADDED", _node("a", 5))
    assert cache.claim("a", "5") == (True, cache.views["a"])
    assert cache.claim("a", "5") == (False, None)  # one step at a time
    cache.apply_event("MODIFIED", _node("a", 6, unschedulable=True))  # the step's write, seen
    cache.release("a")
    assert cache.claim("a", "5") == (False, None)  # planned before that write: dropped
    assert cache.idle()
    claimed, view = cache.claim("a", "6")
    assert claimed and view is not None and view.unschedulable


def test_each_reader_is_told_exactly_the_nodes_whose_view_changed_since_it_last_asked() -> None:
    cache = NodeCache()
    for name in "abcd":
        cache.apply_event("ADDED", _node(name, 1))
    views, changed = cache.changes("nc1")
    assert changed is None and len(views) == 4  # a first reader has seen nothing: it looks at every node
    assert cache.changes("nc1")[1] == {}
    cache.apply_event("MODIFIED", _node("a", 1))  # an echo: no new view, nothing to tell
    cache.apply_event("MODIFIED", _node("b", 2, unschedulable=True))
    cache.apply_event("DELETED", _node("c", 3))
    before = cache.views["d"]
    cache.assume("d", assumed_cordoned(before, _cordon("d", 1)))
    changed = cache.changes("nc1")[1]
    assert changed == {"b": cache.views["b"], "c": None, "d": cache.views["d"]}
    cache.settle("d", None, before)  # the cordon failed: the old view is back, and that is a change too
    cache.retain({"a", "b"})  # a new LIST without d
    assert cache.changes("nc1")[1] == {"d": None}
    assert cache.changes("nc2")[1] is None  # another reader starts with everything
    cache.forget_reader("nc1")
    assert cache.changes("nc1")[1] is None
