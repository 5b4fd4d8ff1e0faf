"""The benefit windows (core.node.facts.benefit) and when the agent takes its readings
(core.node.phases.servicephase)."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from eventedpleg import protocol
from eventedpleg.core.node.blocks.agentsettings import AgentSettings
from eventedpleg.core.node.blocks.effects import Scrape
from eventedpleg.core.node.blocks.nodeapi import AgentNode
from eventedpleg.core.node.facts import benefit
from eventedpleg.core.node.facts.benefit import Reading
from eventedpleg.core.node.facts.promtext import parse_metrics
from eventedpleg.core.node.phases import servicephase
from eventedpleg.protocol import NodeState

FIXTURE = Path(__file__).parents[4] / "realnode" / "fixtures" / "kubelet-metrics-v1.36.4.txt"
T0 = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
SETTINGS = AgentSettings(namespace="ns")  # check interval 60 s, benefit window 30 s


def _reading(at: float, relists: float, cpu: float, *, serving: bool = True, started: float = 1.0) -> Reading:
    return Reading(T0 + timedelta(seconds=at), serving, started, relists, relists * 1.0, cpu)


def test_a_window_is_the_rate_between_two_readings_of_one_kubelet() -> None:
    window = benefit.between(_reading(0, 100, 10.0), _reading(40, 140, 11.25))
    assert window == benefit.MeasuredWindow(40.0, 40, 1.0, 31.25)
    assert benefit.between(_reading(0, 100, 10.0), _reading(40, 5, 0.2, started=2.0)) is None  # restarted
    assert benefit.between(_reading(0, 100, 10.0), _reading(0, 100, 10.0)) is None  # no time between


def test_before_ends_at_the_cordon_and_starts_a_benefit_window_earlier_or_more() -> None:
    kept = (_reading(0, 0, 0.0), _reading(60, 60, 1.875), _reading(80, 80, 2.5, serving=False))
    end = benefit.closing(kept)
    assert end is kept[-1]
    # 60 s -> 80 s is 20 s, short of 30 s: the window starts at the reading before, 80 s long.
    assert benefit.before(kept, end, seconds=30) == benefit.MeasuredWindow(80.0, 80, 1.0, 31.25)


def test_before_takes_a_short_window_only_down_to_ten_seconds() -> None:
    start = _reading(0, 0, 0.0)
    assert benefit.before((start,), _reading(12, 12, 0.375), seconds=30) == benefit.MeasuredWindow(
        12.0, 12, 1.0, 31.25
    )
    assert benefit.before((start,), _reading(8, 8, 0.24), seconds=30) is None  # a just-started agent
    assert benefit.before((), _reading(8, 8, 0.24), seconds=30) is None


def test_before_never_mixes_kubelet_processes() -> None:
    old = _reading(0, 0, 0.0, started=1.0)  # before the last apply's kubelet restart
    new_end = _reading(100, 3, 0.1, serving=False, started=2.0)
    assert benefit.before((old, new_end), new_end, seconds=30) is None


def test_closing_is_only_the_first_reading_after_serving() -> None:
    assert benefit.closing((_reading(0, 0, 0.0),)) is None  # still serving
    assert benefit.closing((_reading(0, 0, 0.0, serving=False),)) is None  # cordoned since the agent began


METRICS = parse_metrics(
    "kubelet_pleg_relist_interval_seconds_count 5\n"
    "kubelet_pleg_relist_interval_seconds_sum 5\n"
    "process_cpu_seconds_total 1.5\n"
    "process_start_time_seconds 1795429906\n"
)


def _node(*, cordoned: bool = False, state: str = "") -> AgentNode:
    return AgentNode("n1", unschedulable=cordoned, annotations={protocol.ANN_STATE: state} if state else {})


def _sample(node: AgentNode, kept: tuple[Reading, ...], at: float) -> tuple[tuple[Reading, ...], bool]:
    """Run the phase, answering its scrape; (the readings it returns, whether it scraped)."""
    phase = servicephase.sample(node, kept, SETTINGS, lambda: T0 + timedelta(seconds=at))
    scraped = False
    try:
        effect = next(phase)
        assert effect == Scrape(benefit.NAMES)
        scraped = True
        phase.send(METRICS)
    except StopIteration as stop:
        return stop.value, scraped
    raise AssertionError("the phase asked for more than one scrape")


def test_readings_are_taken_while_serving_every_check_interval_and_once_at_the_cordon() -> None:
    kept, scraped = _sample(_node(), (), 0)
    assert scraped and len(kept) == 1 and kept[0].in_service and kept[0].started == 1795429906
    kept, scraped = _sample(_node(), kept, 30)
    assert not scraped  # within the check interval
    kept, scraped = _sample(_node(), kept, 61)
    assert scraped and len(kept) == 2
    kept, scraped = _sample(_node(cordoned=True), kept, 75)
    assert scraped and not kept[-1].in_service and benefit.closing(kept) is kept[-1]
    kept, scraped = _sample(_node(cordoned=True), kept, 200)
    assert not scraped  # one reading at the cordon, then none while it lasts
    kept, scraped = _sample(_node(), kept, 300)
    assert scraped and kept[-1].in_service and len(kept) == benefit.KEPT_READINGS


def test_no_reading_while_an_apply_holds_the_node_or_when_benefit_is_off() -> None:
    _, scraped = _sample(_node(state=NodeState.VERIFYING.value), (), 0)
    assert not scraped
    phase = servicephase.sample(
        _node(), (), AgentSettings(namespace="ns", benefit_window_seconds=0), lambda: T0
    )
    try:
        next(phase)
        raise AssertionError("scraped with benefit_window_seconds=0")
    except StopIteration as stop:
        assert stop.value == ()


def test_a_reading_parses_only_its_series_and_finds_what_a_full_parse_finds() -> None:
    pod_start = {benefit.POD_START_COUNT, benefit.POD_START_SUM}
    # The rig's kubelet runs static pods only, whose start the SLI does not observe: no series at all.
    for text, names in ((FIXTURE.read_text(), benefit.NAMES - pod_start), (_lab(LAB_AFTER), benefit.NAMES)):
        full, only = parse_metrics(text), parse_metrics(text, benefit.NAMES)
        assert {s.name for s in only.samples} == names
        assert benefit.reading(only, T0, in_service=True) == benefit.reading(full, T0, in_service=True)


# Two scrapes of one real kubelet v1.36.4 on a lab CRI-O node (bench/podstart.py --runtime crio), through the
# API server's node proxy, 12 s apart: right after its restart (no pod start observed yet, so no SLI series),
# and after five pods of a Deployment started (3 at once, then 2).
LAB_BEFORE = FIXTURE.parent / "kubelet-metrics-v1.36.4-crio-before.txt.gz"
LAB_AFTER = FIXTURE.parent / "kubelet-metrics-v1.36.4-crio-after.txt.gz"


def _lab(path: Path) -> str:
    return gzip.decompress(path.read_bytes()).decode()


def test_a_window_counts_the_pods_started_in_it_and_their_mean_start_from_a_real_kubelet() -> None:
    first = benefit.reading(parse_metrics(_lab(LAB_BEFORE), benefit.NAMES), T0, in_service=True)
    second = benefit.reading(
        parse_metrics(_lab(LAB_AFTER), benefit.NAMES), T0 + timedelta(seconds=12), in_service=True
    )
    assert (first.pods_started, first.pod_start_sum) == (0.0, 0.0)  # the series absent: none yet
    window = benefit.between(first, second)
    assert window is not None
    assert window.pods_started == 5
    assert window.pod_start_seconds is not None and abs(window.pod_start_seconds - 6.919776198 / 5) < 1e-9
    assert window.relists == 12
    assert window.to_json()["podsStarted"] == 5 and window.to_json()["podStartSeconds"] == 1.38
    assert window.describe() == "relist every 1.0s, kubelet 56m, 5 pod starts 1.4s mean"


def test_a_window_without_a_pod_start_has_no_mean_and_says_nothing_of_it() -> None:
    quiet = benefit.between(
        Reading(T0, True, 1.0, 0, 0, 0.0, 3, 4.5),
        Reading(T0 + timedelta(seconds=30), True, 1.0, 30, 30, 0.9, 3, 4.5),
    )
    assert quiet == benefit.MeasuredWindow(30.0, 30, 1.0, 30.0, 0, None)
    assert quiet.to_json()["podStartSeconds"] is None
    assert quiet.describe() == "relist every 1.0s, kubelet 30m"
    one = benefit.MeasuredWindow(30.0, 0, None, None, 1, 2.31)
    assert one.describe() == "no relist in 30s, 1 pod start 2.3s mean"
    # The count going down is another kubelet process: no figure rather than a negative one.
    restarted = benefit.between(
        Reading(T0, True, None, 0, 0, 0.0, 3, 4.5),
        Reading(T0 + timedelta(seconds=30), True, None, 30, 30, 0.9, 1, 1.5),
    )
    assert restarted is not None and restarted.pods_started is None and restarted.pod_start_seconds is None


def test_the_largest_document_fits_the_annotation_with_its_summary() -> None:
    big = benefit.MeasuredWindow(
        seconds=86_400.04,
        relists=10**9,
        relist_interval_seconds=3_599.999,
        cpu_millicores=99_999.94,
        pods_started=10**7,
        pod_start_seconds=3_599.999,
    )
    doc = benefit.document(
        kubelet="v1.37.10-gke.1234567-abcdef0123456789", enabled=True, before=big, after=big, narrowed=True
    )
    text = benefit.to_annotation(doc)
    assert len(text) <= benefit.BENEFIT_LIMIT
    assert json.loads(text) == json.loads(json.dumps(doc))  # nothing dropped, the summary kept
