"""After Done on a runtime that gives each container event to one consumer (containerd 1.7, CRI-O
1.26-1.27): the kubelet's count of running containers against the runtime's list, two samples apart
(core.node.missedevents), driven with scripted answers."""

from __future__ import annotations

import pytest

from eventedpleg import constants as c
from eventedpleg.constants import NodeState
from eventedpleg.core.node import donephase, missedevents
from eventedpleg.core.node.effects import (
    Effect,
    EffectAnswer,
    FindKubelet,
    NodeEvent,
    ReadApplied,
    ReadFile,
    ReadJournal,
    Report,
    Run,
    Scrape,
)
from eventedpleg.core.node.host import CommandResult, KubeletProcess
from eventedpleg.core.node.hostplan import ManagedState
from eventedpleg.core.node.missedevents import Counts, missed
from eventedpleg.core.node.nodeapi import AgentNode
from eventedpleg.core.node.promtext import parse_metrics
from eventedpleg.core.versions import parse_runtime, parse_version
from tests.agent.test_effects import SETTINGS, T0, ScriptedHost, acts

GATE = 'kubernetes_feature_enabled{name="EventedPLEG",stage="ALPHA"} 1'
CONFIG = "/var/lib/kubelet/config.yaml"
CRICTL_PS = (
    "Run",
    "crictl",
    "--runtime-endpoint",
    missedevents.DEFAULT_ENDPOINT,
    "ps",
    "-q",
    "--state",
    "running",
)


@pytest.mark.parametrize(
    ("runtime", "kubelet", "applies"),
    [
        ("containerd://1.7.35", "v1.36.4", True),
        ("containerd://1.7.0", "v1.33.1", True),
        ("cri-o://1.27.3", "v1.30.2", True),
        ("containerd://1.7.35", "v1.37.2", False),  # k8s#139262: the relist stays at 1 s, nothing is late
        ("containerd://2.2.9", "v1.36.4", False),  # containerd#9661: every subscriber gets every event
        ("cri-o://1.34.0", "v1.36.4", False),  # cri-o#6838: broadcast since 1.28
        ("docker://27.1", "v1.36.4", False),
    ],
)
def test_it_looks_only_where_events_can_be_taken_and_a_missed_one_makes_pods_late(
    runtime: str, kubelet: str, applies: bool
) -> None:
    assert missedevents.applies(parse_version(kubelet), parse_runtime(runtime)) is applies


def _s(count: int, *ids: str) -> Counts:
    return Counts(count, frozenset(ids))


def test_a_count_between_the_steady_containers_and_all_of_them_is_not_a_missed_event() -> None:
    assert missed(_s(3, "a", "b", "c"), _s(3, "a", "b", "c"), settle=10) is None
    # "d" started between the samples, "c" stopped: either may not be counted yet.
    assert missed(_s(3, "a", "b", "c"), _s(2, "a", "b", "d"), settle=10) is None
    assert missed(_s(3, "a", "b", "c"), _s(4, "a", "b", "d"), settle=10) is None


def test_a_container_that_stopped_before_both_samples_and_is_still_counted_is_a_missed_exit() -> None:
    why = missed(_s(5, "a", "b", "c"), _s(5, "a", "b", "c"), settle=10)
    assert why == (
        "the kubelet counts 5 running containers (kubelet_running_containers) where the runtime runs 3 "
        "(`crictl ps`), 3 of them for 10 s+"
    )


def test_a_container_running_through_both_samples_and_not_counted_is_a_missed_start() -> None:
    assert missed(_s(1, "a", "b"), _s(1, "a", "b", "c"), settle=10) is not None


def test_crictl_ids_are_the_non_empty_lines() -> None:
    assert missedevents.crictl_ids("abc\n\n def \n") == frozenset({"abc", "def"})


def _done_node(runtime: str = "containerd://1.7.35", kubelet: str = "v1.36.4") -> AgentNode:
    annotations = {c.ANN_DESIRED: "h1", c.ANN_CURRENT: "h1", c.ANN_STATE: NodeState.DONE.value}
    return AgentNode("node-a", annotations=annotations, kubelet_version=kubelet, runtime_version=runtime)


def _play(
    samples: list[tuple[int, list[str]]],
    node: AgentNode | None = None,
    *,
    argv: tuple[str, ...] = ("kubelet", f"--config={CONFIG}"),
    config: str = "kind: KubeletConfiguration\n",
    crictl: bool = True,
) -> tuple[list[tuple[object, ...]], ScriptedHost]:
    """after_done on a Done node whose kubelet is healthy and in evented mode; each sample is (the kubelet's
    count of running containers, the runtime's running container IDs)."""
    counts = iter([n for n, _ in samples])
    lists = iter([ids for _, ids in samples])

    def answer(effect: Effect) -> EffectAnswer:
        match effect:
            case ReadApplied():
                return ManagedState(hash="h1", enabled=True)
            case FindKubelet():
                return KubeletProcess(1, argv, started_at=T0)
            case ReadJournal():
                return ()
            case ReadFile(path) if path == CONFIG:
                return config.encode()
            case Scrape(only) if only == frozenset({missedevents.RUNNING_GAUGE}):
                return parse_metrics(
                    f'kubelet_running_containers{{container_state="running"}} {next(counts)}\n'
                    'kubelet_running_containers{container_state="exited"} 7\n'
                )
            case Scrape():
                return parse_metrics(f"{GATE}\nkubelet_evented_pleg_connection_success_count 1\n")
            case Run(("crictl", *_)) if not crictl:
                return CommandResult(effect.argv, 127, stderr="crictl: command not found")
            case Run(("crictl", *_)):
                return CommandResult(effect.argv, 0, stdout="\n".join(next(lists)))
        raise AssertionError(effect)

    host = ScriptedHost(answer)
    host.play(donephase.after_done(node or _done_node(), (), SETTINGS, host.clock))
    return acts(host.effects), host


def _crictl_runs(host: ScriptedHost) -> list[tuple[str, ...]]:
    return [e.argv for e in host.effects if isinstance(e, Run)]


def test_a_missed_exit_on_containerd_17_fails_the_node_and_says_what_to_do() -> None:
    steps, host = _play([(4, ["a", "b", "c"]), (4, ["a", "b", "c"])])
    assert steps == [
        CRICTL_PS,
        ("Wait", missedevents.SETTLE_SECONDS),
        CRICTL_PS,
        ("Report", "Failed"),
        ("NodeEvent", "EventsMissed"),
    ]
    (report,) = [e for e in host.effects if isinstance(e, Report)]
    assert report.reason.startswith(
        "the kubelet misses container events: the kubelet counts 4 running containers "
        "(kubelet_running_containers) where the runtime runs 3 (`crictl ps`), 3 of them for 10 s+. "
        "containerd://1.7.35 gives each event to one consumer"
    )
    assert "`eventedpleg retry`" in report.reason and "spec.nodeSelector" in report.reason
    assert not report.forget_current  # our files are still on: current-config stays true
    assert report.evidence is not None and report.evidence.result == "fail"
    (event,) = [e for e in host.effects if isinstance(e, NodeEvent)]
    assert event.warning and event.message == report.reason


def test_counts_that_agree_leave_the_node_done() -> None:
    steps, host = _play([(3, ["a", "b", "c"]), (3, ["a", "b", "c"])])
    assert steps == [steps[0], ("Wait", missedevents.SETTLE_SECONDS), steps[2]]
    assert not [e for e in host.effects if isinstance(e, Report | NodeEvent)]


def test_a_count_that_was_off_at_the_first_sample_only_was_an_event_in_flight() -> None:
    steps, _ = _play([(2, ["a", "b", "c"]), (3, ["a", "b", "c"])])
    assert ("Report", "Failed") not in steps


def test_without_crictl_on_the_host_it_cannot_tell_and_says_nothing() -> None:
    steps, host = _play([(9, [])], crictl=False)
    assert steps == [steps[0]]  # one crictl attempt, no wait, no report
    assert not [e for e in host.effects if isinstance(e, Report | NodeEvent)]


@pytest.mark.parametrize(
    ("argv", "config", "endpoint"),
    [
        (("kubelet", "--container-runtime-endpoint", "unix:///run/k3s/c.sock"), "", "unix:///run/k3s/c.sock"),
        (
            ("kubelet", f"--config={CONFIG}"),
            "containerRuntimeEndpoint: unix:///var/run/containerd/containerd.sock\n",
            "unix:///var/run/containerd/containerd.sock",
        ),
        (("kubelet", f"--config={CONFIG}"), "kind: KubeletConfiguration\n", missedevents.DEFAULT_ENDPOINT),
    ],
)
def test_crictl_asks_the_runtime_the_kubelet_uses(argv: tuple[str, ...], config: str, endpoint: str) -> None:
    _, host = _play([(1, ["a"]), (1, ["a"])], argv=argv, config=config)
    assert {run[2] for run in _crictl_runs(host)} == {endpoint}


@pytest.mark.parametrize(
    ("runtime", "kubelet"), [("containerd://2.2.9", "v1.36.4"), ("containerd://1.7.35", "v1.37.2")]
)
def test_where_no_event_can_be_taken_or_none_makes_pods_late_it_runs_nothing(
    runtime: str, kubelet: str
) -> None:
    steps, host = _play([], node=_done_node(runtime, kubelet))
    assert steps == [] and _crictl_runs(host) == []
