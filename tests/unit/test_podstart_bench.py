"""The pure parts of bench/podstart.py: a burst's figures, the summary and table of a results file, and
what the API watch says of each pod. bench/ is no package: its scripts import each other as top-level
modules (run as `python bench/podstart.py`), so the test puts bench/ on the path as that run does."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import podstart  # noqa: E402


def _pod(
    name: str, *, phase: str = "Running", running: bool = True, cid: str = "abc", restarts: int = 0
) -> dict[str, Any]:
    state = (
        {"running": {"startedAt": "2026-11-27T18:48:24Z"}} if running else {"terminated": {"exitCode": 137}}
    )
    return {
        "metadata": {"name": name},
        "status": {
            "phase": phase,
            "containerStatuses": [
                {"name": "idle", "containerID": f"cri-o://{cid}", "state": state, "restartCount": restarts}
            ],
        },
    }


def test_a_burst_is_timed_from_the_write_to_its_last_pod_running_and_by_its_median_pod() -> None:
    seen = {"a": 10.2, "b": 10.3, "c": 10.4}
    running = {"a": 11.2, "b": 11.8, "c": 13.4}
    row = podstart.burst_row(3, 10.0, seen, running)
    assert row["all_running_s"] == 13.4 - 10.0
    assert row["seen_s"] == 10.3 - 10.0
    assert row["running_median_s"] == 11.8 - 10.3
    assert row["running_max_s"] == 13.4 - 10.4
    assert row["missed"] == 0


def test_a_burst_short_of_pods_has_no_all_running_figure_and_counts_the_missed() -> None:
    row = podstart.burst_row(3, 0.0, {"a": 0.1, "b": 0.2}, {"a": 1.0})
    assert row["all_running_s"] is None
    assert row["missed"] == 2
    assert row["running_median_s"] == 0.9
    empty = podstart.burst_row(2, 0.0, {}, {})
    assert (empty["all_running_s"], empty["seen_s"], empty["running_median_s"], empty["missed"]) == (
        None,
        None,
        None,
        2,
    )


def _runs() -> list[dict[str, Any]]:
    arm = {"kubelet": "1.36", "round": 0}
    runs: list[dict[str, Any]] = []
    for gate, scale in ((False, 1.0), (True, 1.1)):
        burst = podstart.burst_row(2, 0.0, {"a": 0.1, "b": 0.2}, {"a": 1.0 * scale, "b": 2.0 * scale})
        runs.append({**arm, "gate": gate, "kind": "burst", **burst, "cleared_s": 0.1})
        runs += [{**arm, "gate": gate, "kind": "exit", "s": s} for s in (0.9 if gate else 0.1, None)]
        runs.append({**arm, "gate": gate, "kind": "cleanup", "s": None if gate else 3.5})
    return runs


def test_the_summary_keeps_medians_spread_and_what_missed_its_bound() -> None:
    rows = {(r["kind"], r["gate"]): r for r in podstart.summarize(_runs())}
    assert set(rows) == {(k, g) for k in ("burst", "exit", "cleanup") for g in (False, True)}
    assert rows["burst", False]["all_running_s"] == {"n": 1, "median": 2.0, "min": 2.0, "max": 2.0}
    assert rows["exit", True]["s"]["n"] == 1 and rows["exit", True]["missed"] == 1
    assert rows["cleanup", False]["s"]["median"] == 3.5 and rows["cleanup", False]["missed"] == 0
    assert rows["cleanup", True]["s"]["n"] == 0 and rows["cleanup", True]["missed"] == 1


def test_the_table_names_the_runtime_and_shows_missed_teardowns() -> None:
    runs = _runs()
    text = podstart.table({"runtime_name": "crio", "runs": runs, "summary": podstart.summarize(runs)})
    lines = text.splitlines()
    assert lines[0].startswith("| runtime | kubelet | what |")
    body = [line.split(" | ") for line in lines[2:]]
    assert {cells[0] for cells in body} == {"| crio"}
    assert [cells[2] for cells in body] == [
        "2 pods: all Running",
        "2 pods: a pod, seen to Running (median pod)",
        "container exit to pod status",
        "the arm's pods gone (teardown)",
    ]
    assert body[-1][3] == "3.50 (3.50-3.50, n=1)"
    assert body[-1][4] == "- (1 missed) |"
    assert "n=1, 1 missed" in body[2][3]


def test_a_rig_results_file_without_a_runtime_field_is_containerds() -> None:
    doc = json.loads((BENCH / "results" / "podstart.json").read_text())
    lines = podstart.table(doc).splitlines()[2:]
    assert lines and all(line.startswith("| containerd | ") for line in lines)


def test_watch_lines_make_whole_documents_one_a_line_or_spread_over_lines() -> None:
    event = {"type": "MODIFIED", "object": {"metadata": {"name": "p"}, "spec": {"x": {}}}}
    one = podstart.JsonStream()
    assert one.feed(json.dumps(event) + "\n") == event
    spread = podstart.JsonStream()
    docs = [spread.feed(line) for line in json.dumps(event, indent=4).splitlines(keepends=True)]
    assert [d for d in docs if d is not None] == [event]
    assert docs[-1] == event  # only the closing line completes it


def test_the_history_times_each_pod_from_its_first_event_that_passes_and_forgets_a_deleted_pod() -> None:
    history = podstart.PodHistory()
    history.record(1.0, {"type": "ADDED", "object": _pod("a", phase="Pending", running=False)})
    history.record(2.0, {"type": "MODIFIED", "object": _pod("a")})
    history.record(2.5, {"type": "ADDED", "object": _pod("b", phase="Pending", running=False)})
    history.record(3.0, {"type": "MODIFIED", "object": _pod("a")})
    assert history.names() == {"a", "b"}
    assert history.first(lambda _: True) == {"a": 1.0, "b": 2.5}
    assert history.first(podstart.is_running) == {"a": 2.0}
    assert history.first(podstart.is_running, since=2.1) == {"a": 3.0}
    history.record(4.0, {"type": "DELETED", "object": _pod("a")})
    assert history.names() == {"b"}


def test_an_exit_shows_when_the_container_stops_running_or_the_pod_restarted_it() -> None:
    running = _pod("a", cid="c1")
    assert podstart.api_container_id(running) == "c1"
    assert not podstart.exit_shown(running, "c1", 0)
    assert podstart.exit_shown(_pod("a", cid="c1", running=False), "c1", 0)
    assert podstart.exit_shown(_pod("a", cid="c2", restarts=1), "c1", 0)  # already running again
    assert not podstart.exit_shown(None, "c1", 0)
    assert podstart.api_container_id({"status": {}}) is None


def test_kills_stop_as_missed_once_the_pods_do_not_run_again() -> None:
    answers = [True, True]  # then False for good
    killed: list[int] = []

    def kill(i: int) -> float:
        killed.append(i)
        return 0.5

    out = podstart.kills_until_stuck(
        4, lambda: bool(answers and answers.pop(0)), lambda: ["p"], kill, gap=0, wait=0
    )
    assert out == [0.5, 0.5, None, None]
    assert killed == [0, 1]


def test_a_wedged_kubelet_is_found_in_the_log_written_after_the_mark_and_counted_per_arm(
    tmp_path: Path,
) -> None:
    log = tmp_path / "kubelet.log"
    log.write_text(
        f'E1127 19:00:00 kubelet.go:2646] "Skipping pod synchronization" err="{podstart.WEDGED}: old"\n'
    )
    watch = podstart.KubeletLog(log)
    watch.mark()  # what came before the arm's restart is not this arm's
    assert watch.wedged() == ""
    line = (
        'E1127 19:04:41 kubelet.go:2646] "Skipping pod synchronization" '
        f'err="{podstart.WEDGED}: EventedPLEG: pleg event channel capacity is full with 1000 events"'
    )
    with log.open("a") as f:
        f.write("I1127 19:04:40 file.go:200] reading\n" + line + "\n")
    assert watch.wedged() == line
    assert watch.wedged() == line  # it stays wedged: only a restart (and mark) clears it
    watch.mark()
    assert watch.wedged() == ""
    runs = [
        {"kubelet": "1.36", "gate": gate, "round": r, "kind": "exit", "s": 0.5}
        for r in range(3)
        for gate in (False, True)
    ] + [{"kubelet": "1.36", "gate": True, "round": 1, "kind": "wedged", "line": line}]
    rows = {(r["kind"], r["gate"]): r for r in podstart.summarize(runs)}
    assert rows["wedged", True]["wedged"] == 1 and rows["wedged", True]["arms"] == 3
    table = podstart.table({"runs": runs, "summary": podstart.summarize(runs)})
    assert table.splitlines()[-1].endswith("| 0 | 1 of 3 |"), table


def test_guarded_arms_count_incidents_wedges_past_the_bound_and_the_time_to_a_proven_heal() -> None:
    row = {"kubelet": "1.36", "gate": True, "kind": "guard", "incidents": ["PLEGWedged"], "wedge_line": True}
    runs = [
        {**row, "round": 0, "incidents": [], "wedge_line": False, "healed_s": None, "rolled_back": False},
        {**row, "round": 1, "healed_s": 12.5, "rolled_back": False, "looks": 20},
        {**row, "round": 2, "healed_s": None, "rolled_back": True, "looks": 10},
    ]
    (summary,) = podstart.summarize(runs)
    assert (summary["arms"], summary["with_incident"], summary["wedged_past_bound"]) == (3, 2, 1)
    assert summary["healed_s"] == {"n": 1, "median": 12.5, "min": 12.5, "max": 12.5}
    assert summary["rolled_back"] == 1
    body = [
        line.split(" | ") for line in podstart.table({"runs": runs, "summary": [summary]}).splitlines()[2:]
    ]
    assert [(cells[2], cells[4]) for cells in body] == [
        ("guard: arms with an incident (a wedge line or a guard Event)", "2 of 3 |"),
        ("guard: arms wedged past 30 s", "1 of 3 |"),
        ("guard: wedge's first sign to its proven heal", "12.50 (12.50-12.50, n=1) |"),
        ("guard: nodes rolled back by the guard", "1 of 3 |"),
        ("guard: its looks at the node, per arm", "15.00 (10.00-20.00, n=2) |"),
    ]


def test_the_load_runs_its_hogs_only_while_entered_and_keeps_the_load_average() -> None:
    with podstart.Load(2, every=0.05) as load:
        procs = list(load.procs)
        assert len(procs) == 2 and all(proc.poll() is None for proc in procs)
    assert all(proc.poll() is not None for proc in procs)
    figures = load.figures()
    assert figures["hogs"] == 2 and figures["max"] is not None and figures["max"] >= 0
    assert podstart.Load(0).figures() == {"hogs": 0, "mean": None, "max": None}
    doc = {"summary": [], "load_during": {"hogs": 40, "mean": 41.2, "max": 52.0}}
    assert podstart.table(doc).endswith("load average (1 min) mean 41.2, max 52.0.")
    assert "busy" not in podstart.table({"summary": [], "load_during": {"hogs": 0}})
