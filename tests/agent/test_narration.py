"""The agent's log tells its story: one line per step it takes on its node (core.node.narration),
with the node's fields after the message in the text format and as top-level keys in the JSON one
(cli.logformat), for an apply, a rollback and a host fault on simulated hosts."""

from __future__ import annotations

import json
import logging

import pytest

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg.agent.agent import drive
from eventedpleg.cli.logformat import formatter
from eventedpleg.protocol import NodeState
from eventedpleg_lab.sim import profiles
from tests.agent.conftest import NODE, Rig, RigFactory

KUBELET_DROPIN = f"{profiles.CONFIG_DIR}/{c.KUBELET_DROPIN_NAME}"
CRIO_DROPIN = f"/{c.CRIO_DROPIN_DIR}/{c.CRIO_DROPIN_NAME}"
LOGGER = "eventedpleg.agent.interpreter"


@pytest.fixture
def log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger=LOGGER)
    return caplog


def _said(records: list[logging.LogRecord], phase: str = "apply") -> list[tuple[str, str]]:
    """(level, message) of the narration of `phase`."""
    return [
        (r.levelname, r.getMessage())
        for r in records
        if r.name == LOGGER and getattr(r, "phase", "") == phase
    ]


def _fields(rig: Rig, phase: str = "apply") -> dict[str, str]:
    ann = rig.annotations
    return {
        "node": NODE,
        "nodeconfig": ann[protocol.ANN_OWNER],
        "hash": ann[protocol.ANN_DESIRED],
        "phase": phase,
    }


def _both_formats(record: logging.LogRecord, fields: dict[str, str]) -> None:
    """The text line ends with the fields as key=value; the JSON object has them as top-level keys."""
    text = formatter("text").format(record)
    assert text.endswith(record.getMessage() + " " + " ".join(f"{k}={v}" for k, v in fields.items()))
    doc = json.loads(formatter("json").format(record))
    assert doc["message"] == record.getMessage()
    assert doc["level"] == record.levelname
    assert {k: doc[k] for k in fields} == fields


def _own(rig: Rig) -> None:
    """The operator's mark of the NodeConfig that took the node."""
    rig.api.annotate(NODE, {protocol.ANN_OWNER: "cluster"})


def test_an_apply_says_what_it_wrote_restarted_and_verified(
    make_rig: RigFactory, log: pytest.LogCaptureFixture
) -> None:
    rig = make_rig(profiles.crio())
    _own(rig)
    rig.apply()
    assert rig.state == NodeState.DONE

    said = _said(log.records)
    plan = f"enable EventedPLEG: write {KUBELET_DROPIN}, write {CRIO_DROPIN}"
    assert [m for _, m in said[:-1]] == [
        f"Applying: {plan}",
        f"wrote {KUBELET_DROPIN} (kubelet drop-in)",
        f"wrote {CRIO_DROPIN} (CRI-O drop-in)",
        "restarted crio",
        "restarted kubelet",
        f"Verifying: {plan}",
    ]
    # The verdict, with the checks it was decided on (Verified, which repeats it, is not said again).
    _, done = said[-1]
    assert done.startswith(
        "Done: Evented PLEG in use: event stream connected, generic relist slowed to 300 s "
    )
    assert "[verified over 10s: healthz ok: /healthz ok; nodeReady ok: Ready=True; gate ok: " in done
    assert "crioPodEvents ok: enable_pod_events = true (crio status config)" in done
    assert "relist ok: 0 relists in 10s (period >= 300s)]" in done
    assert "info:" not in done  # informational checks decided nothing
    assert {lv for lv, _ in said} == {"INFO"}
    fields = _fields(rig)
    for record in log.records:
        if getattr(record, "phase", "") == "apply":
            _both_formats(record, fields)


def test_a_rollback_says_why_and_what_it_restored(
    make_rig: RigFactory, log: pytest.LogCaptureFixture
) -> None:
    rig = make_rig(profiles.kubeadm_containerd())
    _own(rig)
    rig.host.faults.kubelet.fails_when_evented = True
    rig.apply()
    assert rig.state == NodeState.ROLLED_BACK

    said = _said(log.records)
    assert [m for _, m in said[:-1]] == [
        f"Applying: enable EventedPLEG: write {KUBELET_DROPIN}",
        f"wrote {KUBELET_DROPIN} (kubelet drop-in)",
        "restarted kubelet",
        f"Verifying: enable EventedPLEG: write {KUBELET_DROPIN}",
        f"rollback: removed {KUBELET_DROPIN} (absent before)",
        "restarted kubelet",
    ]
    level, rolled_back = said[-1]
    assert level == "WARNING"
    # Why (the kubelet's own line), what was done, and the evidence the rollback was verified on.
    assert rolled_back.startswith(
        "RolledBack: verification failed: kubelet did not start: "
        'run.go:72] "command failed" err="failed to run Kubelet: injected fault: kubelet exits with '
        'EventedPLEG on"; rolled back to the previous files and verified [rollback verified over '
    )
    assert 'gate ok: kubernetes_feature_enabled{name="EventedPLEG",stage="ALPHA"} 0' in rolled_back
    fields = _fields(rig)
    for record in log.records:
        if getattr(record, "phase", "") == "apply":
            _both_formats(record, fields)


def test_a_host_fault_says_what_failed_and_its_fix(
    make_rig: RigFactory, log: pytest.LogCaptureFixture
) -> None:
    rig = make_rig(profiles.crio())
    _own(rig)
    rig.host.faults.files.read_only.add(f"/{c.AGENT_STATE_DIR}")
    rig.apply()
    assert rig.state == NodeState.SKIPPED

    txn = f"/{c.AGENT_STATE_DIR}/txn.json"
    failed = (
        f"record the transaction in {txn} failed (EROFS: Read-only file system): make that filesystem "
        "writable (remount it read-write) or move that directory off it"
    )
    # The fault as met, with its fix; then what it meant for the node.
    assert _said(log.records) == [
        ("WARNING", f"fault: {failed}"),
        (
            "WARNING",
            f"Skipped: {failed}, then `eventedpleg retry cluster --node {NODE}`; "
            "nothing was changed on the node",
        ),
    ]
    fields = _fields(rig)
    for record in log.records:
        if getattr(record, "phase", "") == "apply":
            _both_formats(record, fields)


def test_the_host_check_says_its_verdict_when_it_publishes_it(
    make_rig: RigFactory, log: pytest.LogCaptureFixture
) -> None:
    rig = make_rig(profiles.kubeadm_containerd())
    drive(rig.agent.host_check(), rig.clock.sleep)
    drive(
        rig.agent.host_check(), rig.clock.sleep
    )  # the same verdict within the hour: not published again, not said again
    said = _said(log.records, "host_check")
    assert said == [("INFO", "host check: an apply may go ahead in every kubeletConfig mode")]
    (record,) = (r for r in log.records if getattr(r, "phase", "") == "host_check")
    # No NodeConfig has taken the node yet: only the fields that are known.
    _both_formats(record, {"node": NODE, "phase": "host_check"})


def test_a_heal_says_the_fallback_the_restart_and_the_verdict(
    make_rig: RigFactory, log: pytest.LogCaptureFixture
) -> None:
    rig = make_rig(profiles.crio())
    _own(rig)
    rig.apply()
    rig.host.restart_runtime()  # k8s#129827: the running kubelet falls back for good
    rig.check()
    said = _said(log.records, "after_done")
    assert [level for level, _ in said] == ["WARNING", "INFO", "INFO"]
    detected, restarted, healed = (m for _, m in said)
    assert detected.startswith("FallbackDetected: fell back to generic PLEG (")
    assert detected.endswith("); restarting the kubelet")
    assert restarted == "restarted kubelet"
    assert healed.startswith("Done: healed a silent fallback to generic PLEG by restarting the kubelet")
    assert "[heal verified over " in healed and "stream ok: " in healed
    for record in log.records:
        if getattr(record, "phase", "") == "after_done":
            _both_formats(record, _fields(rig, "after_done"))
