"""The agent against a REAL kubelet and containerd. Marker `realnode`; see conftest.

Each test brings up a fresh node (`rig.up`), hands it to the production agent through RigHost (the
supervisor plays systemd, the kubelet's log file plays the journal) and asserts on what the real kubelet
reported. `seen` collects every agent-matched log signal and metric that appeared in a real run; when the
session ends, in whatever order the tests ran, conftest checks that each one we rely on did appear (and
records the real lines as fixtures, see tests/unit/core/node/facts/test_real_kubelet_lines.py, which replays
them on every machine).
"""

from __future__ import annotations

import json
import os
import time

import pytest

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg.core.agentoptions import AgentOptions
from eventedpleg.core.node.facts.promtext import parse_metrics
from eventedpleg.core.node.facts.verify import CONN_ERROR, CONN_SUCCESS, FEATURE_METRIC
from eventedpleg.protocol import NodeState
from eventedpleg_lab.realnode import config as cfg
from eventedpleg_lab.realnode import layout as lay
from eventedpleg_lab.realnode import rig as rn
from eventedpleg_lab.realnode.agentrig import make_agent_rig
from tests.realnode.conftest import Seen

pytestmark = [pytest.mark.realnode, pytest.mark.slow]

DROPIN = lay.KUBELET_CONFIG_DIR + "/" + c.KUBELET_DROPIN_NAME
# The claimed runtime of a node whose real runtime (Debian containerd 1.6) has no event stream: the
# Node says 1.7, so preflight lets it through, and only verification can tell (docs/compatibility.md §2).
LYING_CONTAINERD = "containerd://1.7.13"


def _dropin(node: rn.RealNode) -> bool:
    return node.layout.at(DROPIN).is_file()


def _checks(evidence: dict[str, object]) -> dict[str, str]:
    checks = evidence["checks"]
    assert isinstance(checks, dict)
    return checks


def test_enable_on_136_with_containerd_22_is_done_with_real_evidence(node: rn.RealNode, seen: Seen) -> None:
    node.up(rn.RigSpec(kubelet="1.36"))
    rig = make_agent_rig(node, "1.36")
    config_hash = rig.apply()

    assert rig.state == NodeState.DONE, rig.annotations
    assert rig.annotations[protocol.ANN_CURRENT] == config_hash
    assert _dropin(node)
    checks = _checks(rig.evidence())
    assert checks["gate"] == f'ok: {FEATURE_METRIC}{{name="EventedPLEG",stage="ALPHA"}} 1'
    assert checks["stream"].startswith(f"ok: {CONN_SUCCESS} ")
    assert checks["relist"].startswith("ok: 0 relists in")  # 300 s period: none in the window
    # The real kubelet says so itself: its V(1) feature-gates line (the >=1.36 form) and its metrics.
    lines = seen.kubelet_lines()
    assert any('"Updated" featureGates={"EventedPLEG":true}' in ln for ln in lines)
    metrics = parse_metrics(node.metrics())
    assert metrics.value(FEATURE_METRIC, name="EventedPLEG") == 1
    assert (metrics.value(CONN_SUCCESS) or 0) >= 1
    assert (metrics.value(CONN_ERROR) or 0) == 0
    # Before/after figures (item 4): ~1 relist a second before, none in the window after.
    benefit = json.loads(rig.annotations[protocol.ANN_BENEFIT])
    assert benefit["enabled"] is True
    assert benefit["before"]["relists"] >= 0.8 * benefit["before"]["windowSeconds"]
    assert benefit["after"]["relists"] == 0
    seen.metrics(metrics)


def test_disable_removes_our_drop_in_and_relisting_is_back_to_one_second(
    node: rn.RealNode, seen: Seen
) -> None:
    node.up(rn.RigSpec(kubelet="1.36"))
    rig = make_agent_rig(node, "1.36")
    rig.apply(enabled=True)
    assert rig.state == NodeState.DONE, rig.annotations

    off_hash = rig.apply(enabled=False)

    assert rig.state == NodeState.DONE, rig.annotations
    assert rig.annotations[protocol.ANN_CURRENT] == off_hash
    assert not _dropin(node)
    checks = _checks(rig.evidence())
    assert checks["gate"] == f'ok: {FEATURE_METRIC}{{name="EventedPLEG",stage="ALPHA"}} 0'
    assert checks["relist"].startswith("ok: ") and "mean interval 1.0s" in checks["relist"]
    # Our drop-in is gone, so no configuration sets the gate at all any more (it is off by default).
    gate_lines = [ln for ln in seen.last_start() if "featureGates=" in ln]
    assert gate_lines and not any('"EventedPLEG":true' in ln for ln in gate_lines)
    seen.metrics(parse_metrics(node.metrics()))


def test_runtime_without_events_is_never_done_and_is_rolled_back_with_the_real_fallback(
    node: rn.RealNode, seen: Seen
) -> None:
    node.up(rn.RigSpec(kubelet="1.36", runtime=cfg.RigRuntime.CONTAINERD_16))
    rig = make_agent_rig(node, "1.36", runtime_version=LYING_CONTAINERD)
    rig.apply()

    assert rig.state == NodeState.ROLLED_BACK, rig.annotations
    assert not _dropin(node)
    failure = rig.evidence()["failure"]
    assert isinstance(failure, dict)
    assert failure["checks"]["stream"].startswith("FAIL:")
    assert node.healthz()  # rolled back: the kubelet runs, with the gate off again
    metrics = parse_metrics(node.metrics())
    assert metrics.value(FEATURE_METRIC, name="EventedPLEG") == 0
    lines = seen.kubelet_lines()
    assert any("Unimplemented" in ln for ln in lines if "failed to receive streaming container event" in ln)
    assert any("Fall back to Generic PLEG relisting" in ln for ln in lines)


def test_137_is_done_on_the_narrowed_signals_and_says_there_is_no_cpu_saving(
    node: rn.RealNode, seen: Seen
) -> None:
    node.up(rn.RigSpec(kubelet="1.37"))
    rig = make_agent_rig(node, "1.37")
    rig.apply()

    assert rig.state == NodeState.DONE, rig.annotations
    checks = _checks(rig.evidence())
    assert checks["gate"] == f'ok: {FEATURE_METRIC}{{name="EventedPLEG",stage="ALPHA"}} 1'
    assert checks["relist"].startswith("info: ")
    assert "no steady-state CPU saving" in checks["relist"]
    assert "mean interval 1.0s" in checks["relist"]  # k8s#139262: the generic relist stays at 1 s
    assert rig.annotations[protocol.ANN_REASON].startswith("Evented PLEG on (1.37")
    benefit = json.loads(rig.annotations[protocol.ANN_BENEFIT])
    assert "no steady-state CPU saving" in benefit["summary"]
    seen.metrics(parse_metrics(node.metrics()))


def test_137_fast_path_relist_hint_after_an_unexpected_container_exit(node: rn.RealNode, seen: Seen) -> None:
    """1.37's only use of the stream: a container that dies unexpectedly triggers a relist of its pod."""
    node.up(rn.RigSpec(kubelet="1.37", pods=1, gate=True))
    victim = next(
        ctr for ctr in node.containers() if ctr["labels"]["io.kubernetes.pod.name"].startswith("idle")
    )
    info = json.loads(node.crictl("inspect", victim["id"]).stdout)
    os.kill(int(info["info"]["pid"]), 9)
    node.wait(
        lambda: any(
            "Evented PLEG: requested pod relist after container termination" in ln
            for ln in seen.kubelet_lines()
        ),
        60,
        "the 1.37 relist hint",
    )


def test_137_without_events_is_rolled_back_on_the_narrowed_error_line(node: rn.RealNode, seen: Seen) -> None:
    node.up(rn.RigSpec(kubelet="1.37", runtime=cfg.RigRuntime.CONTAINERD_16))
    rig = make_agent_rig(node, "1.37", runtime_version=LYING_CONTAINERD)
    rig.apply()

    assert rig.state == NodeState.ROLLED_BACK, rig.annotations
    failure = rig.evidence()["failure"]
    assert isinstance(failure, dict)
    assert failure["checks"]["stream"].startswith("FAIL:")
    assert not _dropin(node)
    assert any("Evented PLEG: disabling" in ln for ln in seen.kubelet_lines())


def test_containerd_restart_under_136_is_detected_as_fallback_and_healed(
    node: rn.RealNode, seen: Seen
) -> None:
    node.up(rn.RigSpec(kubelet="1.36"))
    rig = make_agent_rig(node, "1.36")
    config_hash = rig.apply()
    assert rig.state == NodeState.DONE, rig.annotations

    node.restart_containerd()  # k8s#129827: the running kubelet burns its 5 retries and falls back for good
    node.wait(
        lambda: (parse_metrics(node.metrics()).value(CONN_ERROR) or 0) >= 5, 180, "the kubelet to fall back"
    )
    assert any("Fall back to Generic PLEG relisting" in ln for ln in seen.kubelet_lines())
    seen.metrics(parse_metrics(node.metrics()))

    rig.check()

    assert rig.state == NodeState.DONE, rig.annotations
    assert rig.annotations[protocol.ANN_CURRENT] == config_hash
    assert rig.annotations[protocol.ANN_REASON].startswith("healed a silent fallback to generic PLEG")
    assert "connection_error_count 5" in str(rig.evidence()["fallback"])
    assert rig.api.event_reasons(cfg.NODE_NAME)[-2:] == ["FallbackDetected", "FallbackHealed"]
    metrics = parse_metrics(node.metrics())  # a new kubelet: a new stream, no errors
    assert (metrics.value(CONN_ERROR) or 0) == 0
    assert (metrics.value(CONN_SUCCESS) or 0) >= 1


def test_static_pods_are_refused_by_default_and_adopted_without_duplicates_when_allowed(
    node: rn.RealNode, seen: Seen
) -> None:
    """Guardrail 2 (k8s#121349, #123087): by default a node with static pods is Skipped, untouched. Opted
    in, the pods are already running when the kubelet restarts with the gate on, so their containers are
    adopted, never created twice."""
    pods = 3
    node.up(rn.RigSpec(kubelet="1.36", pods=pods))
    rig = make_agent_rig(node, "1.36")

    rig.apply()
    assert rig.state == NodeState.SKIPPED, rig.annotations
    assert "static pods" in rig.annotations[protocol.ANN_REASON]
    assert not _dropin(node)

    rig.apply(options=AgentOptions(allow_static_pods=True))
    assert rig.state == NodeState.DONE, rig.annotations
    time.sleep(20)  # a duplicate would be created by the first syncs after the restart
    running = [ctr for ctr in node.containers() if ctr["labels"]["io.kubernetes.pod.name"].startswith("idle")]
    assert len(running) == pods, running
    every = [
        ctr
        for ctr in node.containers(all_states=True)
        if ctr["labels"]["io.kubernetes.pod.name"].startswith("idle")
    ]
    assert len(every) == pods, every  # no exited duplicates either


def test_static_pods_created_under_evented_pleg_are_counted(node: rn.RealNode, seen: Seen) -> None:
    """Whether the duplicate-container bug reproduces here: static pods created with the gate already on
    (what the guard prevents). Recorded, not assumed: the figure goes to the fixtures and the docs."""
    pods = 5
    node.up(rn.RigSpec(kubelet="1.36", pods=pods, gate=True, settle_gate_off=False))
    time.sleep(30)
    every = [
        ctr
        for ctr in node.containers(all_states=True)
        if ctr["labels"]["io.kubernetes.pod.name"].startswith("idle")
    ]
    running = [ctr for ctr in node.containers() if ctr["labels"]["io.kubernetes.pod.name"].startswith("idle")]
    seen.record("static-pods-created-evented", {"pods": pods, "containers": len(every)})
    # What must hold either way: under the gate the kubelet runs every static pod, one container each.
    assert len({ctr["labels"]["io.kubernetes.pod.name"] for ctr in running}) == pods, running
    assert len(running) == pods, running
    # Not asserted: whether exited duplicates exist (len(every) > pods). The upstream bug is a race
    # between the container start and the Evented PLEG cache (k8s#121349), so either outcome is a
    # correct run of the real kubelet; the figure is recorded for docs/realnode.md instead.
