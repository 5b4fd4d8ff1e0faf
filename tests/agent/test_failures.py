"""Failure injection and bad input: each case ends in a truthful state, with the node healthy."""

from __future__ import annotations

import json

import pytest

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg.agent.agent import Agent, AgentSettings
from eventedpleg.core.agentoptions import AgentOptions
from eventedpleg.models.nodeconfig import KubeletConfigMode, OnFailure
from eventedpleg.protocol import NodeState
from eventedpleg_lab.sim import profiles
from eventedpleg_lab.sim.kubelet import Status, Stream
from tests.agent.conftest import NAMESPACE, NODE, Rig, RigFactory

KUBELET_DROPIN = f"{profiles.CONFIG_DIR}/{c.KUBELET_DROPIN_NAME}"
CRIO_DIR = f"/{c.CRIO_DROPIN_DIR}"
CRIO_DROPIN = f"{CRIO_DIR}/{c.CRIO_DROPIN_NAME}"


def _host_files(rig: Rig) -> dict[str, bytes]:
    """Every file but the agent's own bookkeeping."""
    return {k: v for k, v in rig.snapshot().items() if not k.startswith(c.AGENT_STATE_DIR)}


def _restarted(rig: Rig) -> bool:
    return any(cmd[:2] == ("systemctl", "restart") for cmd in rig.host.commands)


def _stream(rig: Rig) -> Stream:
    return rig.host.kubelet.stream


# --- kubelet will not start after apply ----------------------------------------------------------------


def test_kubelet_that_will_not_start_is_rolled_back_ready_again_with_evidence(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_containerd())
    before = _host_files(rig)
    rig.host.faults.kubelet.fails_when_evented = True

    rig.apply()

    assert rig.state == NodeState.ROLLED_BACK
    assert protocol.ANN_CURRENT not in rig.annotations  # never claimed
    assert "kubelet did not start" in rig.annotations[protocol.ANN_REASON]
    assert _host_files(rig) == before  # exact restore
    assert rig.host.kubelet.status is Status.RUNNING and rig.host.node_ready()
    evidence = rig.evidence
    failure = evidence["failure"]
    assert isinstance(failure, dict)
    assert failure["result"] == "fail"
    assert any("injected fault" in line for line in failure["lines"])
    rollback = evidence["rollback"]
    assert isinstance(rollback, dict)
    assert rollback["result"] == "pass"
    assert rollback["checks"]["gate"] == 'ok: kubernetes_feature_enabled{name="EventedPLEG",stage="ALPHA"} 0'
    assert rig.api.event_reasons(NODE) == ["Applying", "RolledBack"]
    assert not rig.path(f"/{c.AGENT_STATE_DIR}/txn.json").exists()


def test_rollback_that_fails_too_reports_failed_loudly(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_containerd())
    rig.host.faults.kubelet.never_starts = True

    rig.apply(options=AgentOptions(verify_timeout_seconds=60))

    assert rig.state == NodeState.FAILED
    assert "ROLLBACK FAILED" in rig.annotations[protocol.ANN_REASON]
    assert not rig.path(KUBELET_DROPIN).exists()  # the files were restored even though the kubelet is broken
    assert rig.api.event_reasons(NODE)[-1] == "RollbackFailed"


def test_on_failure_halt_leaves_the_node_as_it_failed_and_the_next_request_restores_first(
    make_rig: RigFactory,
) -> None:
    rig = make_rig(profiles.kubeadm_containerd())
    before = _host_files(rig)
    rig.host.faults.kubelet.fails_when_evented = True

    rig.apply(options=AgentOptions(on_failure=OnFailure.HALT))

    assert rig.state == NodeState.FAILED
    assert "onFailure: Halt" in rig.annotations[protocol.ANN_REASON]
    assert rig.path(KUBELET_DROPIN).exists()  # left for a human to look at
    txn = json.loads(rig.path(f"/{c.AGENT_STATE_DIR}/txn.json").read_text())
    assert txn["halted"] is True

    # The operator later asks to turn it off: the halted apply is undone exactly first.
    rig.apply(enabled=False)
    assert rig.state == NodeState.DONE
    assert _host_files(rig) == before
    assert rig.host.kubelet.status is Status.RUNNING


# --- runtime without events: never a false Done --------------------------------------------------------


def test_containerd_16_without_events_fails_verification_and_rolls_back(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.containerd_16())
    rig.apply()

    assert rig.state == NodeState.ROLLED_BACK
    failure = rig.evidence["failure"]
    assert isinstance(failure, dict)
    assert failure["checks"]["stream"].startswith("FAIL: kubelet_evented_pleg_connection_error_count 5")
    assert any("Unimplemented" in line for line in failure["lines"])
    assert not rig.path(KUBELET_DROPIN).exists()


def test_crio_whose_events_do_not_flow_fails_verification(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.crio())
    rig.host.faults.runtime.events_broken = True  # says enable_pod_events = true, stream closes anyway
    rig.apply()

    assert rig.state == NodeState.ROLLED_BACK
    failure = rig.evidence["failure"]
    assert isinstance(failure, dict)
    assert failure["checks"]["crioPodEvents"] == "ok: enable_pod_events = true (crio status config)"
    assert failure["checks"]["stream"].startswith("FAIL:")
    assert any("container events stream is closed" in line for line in failure["lines"])
    assert not rig.path(CRIO_DROPIN).exists()


def test_fallback_is_caught_even_with_kubelet_verbosity_zero(make_rig: RigFactory) -> None:
    # At --v=0 the V(4) fallback line is not logged; the metrics and the error-level CRI lines still are.
    rig = make_rig(profiles.containerd_16().with_(verbosity=0))
    rig.apply()
    assert rig.state == NodeState.ROLLED_BACK


# --- unknown gate for the kubelet version: never written -----------------------------------------------


@pytest.mark.parametrize("mode", [KubeletConfigMode.DROP_IN_ONLY, KubeletConfigMode.EDIT_CONFIG_FILE])
def test_unknown_gate_is_never_written_on_kubelet_125(make_rig: RigFactory, mode: KubeletConfigMode) -> None:
    rig = make_rig(profiles.kubelet_125())
    before = _host_files(rig)
    rig.apply(mode=mode)

    assert rig.state == NodeState.SKIPPED
    assert "does not know the EventedPLEG gate" in rig.annotations[protocol.ANN_REASON]
    assert _host_files(rig) == before
    assert not _restarted(rig)
    assert rig.api.event_reasons(NODE) == ["Unsupported"]


def test_gate_missing_from_kubelet_help_is_never_written(
    make_rig: RigFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A future kubelet (1.38+) that dropped the gate (k8s#140849): the version looks fine, --help says no.
    rig = make_rig(profiles.kubeadm_containerd())
    help_without_gate = rig.host.kubelet.help_text().replace(
        "EventedPLEG=true|false", "SomethingElse=true|false"
    )
    monkeypatch.setattr(rig.host.kubelet, "help_text", lambda: help_without_gate)
    before = _host_files(rig)
    rig.apply()
    assert rig.state == NodeState.SKIPPED
    assert "`kubelet --help` does not list EventedPLEG" in rig.annotations[protocol.ANN_REASON]
    assert _host_files(rig) == before


# --- stray files in crio.conf.d: reported, not clobbered -----------------------------------------------


def test_stray_file_overriding_ours_is_reported_and_left_alone(make_rig: RigFactory) -> None:
    stray = f"{CRIO_DIR}/99-eventedpleg.conf.bak"  # sorts after ours, parsed by CRI-O like any file
    profile = profiles.crio().with_(extra_files={stray: "[crio.runtime]\nenable_pod_events = false\n"})
    rig = make_rig(profile)
    before = _host_files(rig)
    rig.apply()

    assert rig.state == NodeState.SKIPPED
    reason = rig.annotations[protocol.ANN_REASON]
    assert "crio.conf.d/99-eventedpleg.conf.bak sorts after 99-eventedpleg.conf" in reason
    assert _host_files(rig) == before
    assert not _restarted(rig)


def test_harmless_stray_backup_is_reported_as_a_warning_and_kept(make_rig: RigFactory) -> None:
    stray = f"{CRIO_DIR}/10-crun.conf~"
    profile = profiles.crio().with_(extra_files={stray: '[crio.runtime]\ndefault_runtime = "crun"\n'})
    rig = make_rig(profile)
    rig.apply()

    assert rig.state == NodeState.DONE
    assert rig.path(stray).read_text() == '[crio.runtime]\ndefault_runtime = "crun"\n'
    warnings = rig.evidence["warnings"]
    assert isinstance(warnings, list)
    assert any("10-crun.conf~ looks like a backup" in w for w in warnings)
    assert rig.api.events[-1].warning  # the Verified event carries the warning


def test_invalid_toml_in_crio_conf_d_stops_before_touching_anything(make_rig: RigFactory) -> None:
    # The docs' `enable_pod_events: true` is invalid TOML: CRI-O would not start after our restart.
    stray = f"{CRIO_DIR}/50-by-hand.conf"
    rig = make_rig(profiles.crio().with_(extra_files={stray: "[crio.runtime]\nenable_pod_events: true\n"}))
    before = _host_files(rig)
    rig.apply()
    assert rig.state == NodeState.SKIPPED
    assert "50-by-hand.conf: invalid TOML" in rig.annotations[protocol.ANN_REASON]
    assert _host_files(rig) == before


def test_a_file_with_our_name_that_we_did_not_write_is_not_clobbered(make_rig: RigFactory) -> None:
    theirs = "[crio.runtime]\nenable_pod_events = true\n# hand-written\n"
    rig = make_rig(profiles.crio().with_(extra_files={CRIO_DROPIN: theirs}))
    rig.apply()
    assert rig.state == NodeState.SKIPPED
    assert "was not written by the operator" in rig.annotations[protocol.ANN_REASON]
    assert rig.path(CRIO_DROPIN).read_text() == theirs


# --- bad input from the API side -----------------------------------------------------------------------


def test_missing_configmap_is_a_clear_error_and_nothing_is_touched(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_containerd())
    before = rig.snapshot()
    rig.request("0123456789ab")
    rig.step()

    assert rig.state == NodeState.ROLLED_BACK
    reason = rig.annotations[protocol.ANN_REASON]
    assert f"ConfigMap {NAMESPACE}/{c.CONFIGMAP_PREFIX}0123456789ab" in reason
    assert "not found; nothing was changed on the node" in reason
    assert rig.snapshot() == before
    assert rig.host.commands == []
    assert rig.api.event_reasons(NODE) == ["ConfigRejected"]


def test_tampered_configmap_is_rejected(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_containerd())
    config_hash = rig.publish(enabled=True)
    key = (NAMESPACE, c.CONFIGMAP_PREFIX + config_hash)
    data = dict(rig.api.configmaps[key])
    data[c.CM_KEY_KUBELET] = data[c.CM_KEY_KUBELET].replace("# KubeletConfiguration", "# edited by hand")
    rig.api.configmaps[key] = data
    before = rig.snapshot()
    rig.request(config_hash)
    rig.step()
    assert rig.state == NodeState.ROLLED_BACK
    assert f"not {config_hash}" in rig.annotations[protocol.ANN_REASON]
    assert rig.snapshot() == before


def test_invalid_agent_options_are_rejected(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_containerd())
    config_hash = rig.publish(enabled=True)
    rig.api.annotate(
        NODE,
        {
            protocol.ANN_AGENT_OPTIONS: '{"verifyTimeoutSeconds": 1}',
            protocol.ANN_DESIRED: config_hash,
            protocol.ANN_STATE: "Applying",
        },
    )
    rig.step()
    assert rig.state == NodeState.ROLLED_BACK
    assert "agent-options annotation is invalid: verifyTimeoutSeconds" in rig.annotations[protocol.ANN_REASON]


# --- host configurations the operator must not manage --------------------------------------------------


def test_feature_gates_on_the_command_line_are_refused_with_the_file_to_fix(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.feature_gates_conflict())
    before = _host_files(rig)
    rig.apply()
    assert rig.state == NodeState.SKIPPED
    reason = rig.annotations[protocol.ANN_REASON]
    assert reason.startswith("Unsupported: the kubelet command line sets --feature-gates=EventedPLEG=false")
    assert "Fix: remove EventedPLEG from /etc/default/kubelet (KUBELET_EXTRA_ARGS)" in reason
    assert _host_files(rig) == before
    assert rig.evidence == {
        "result": "refused",
        "reason": rig.evidence["reason"],
        "fix": "remove EventedPLEG from /etc/default/kubelet (KUBELET_EXTRA_ARGS) and restart the kubelet",
        "changed": "nothing",
    }


def test_all_alpha_on_the_command_line_blocks_turning_it_off(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_containerd().with_(extra_args=("--feature-gates=AllAlpha=true",)))
    rig.apply(enabled=False)
    assert rig.state == NodeState.SKIPPED
    assert "--feature-gates=AllAlpha=true" in rig.annotations[protocol.ANN_REASON]


def test_no_config_dir_with_drop_in_only_is_unsupported_with_the_exact_fix(make_rig: RigFactory) -> None:
    # KUBELET_CONFIG_ARGS from an EnvironmentFile overrides any Environment= of a drop-in (systemd.exec(5)):
    # the agent cannot add --config-dir on this node itself, and says what to set instead.
    extra_args = 'KUBELET_CONFIG_ARGS="--config=/var/lib/kubelet/config.yaml"\nKUBELET_EXTRA_ARGS="--v=2"\n'
    rig = make_rig(profiles.kubeadm_no_config_dir().with_(extra_files={"/etc/default/kubelet": extra_args}))
    before = _host_files(rig)
    rig.apply()
    assert rig.state == NodeState.SKIPPED
    fix = rig.evidence["fix"]
    assert fix == (
        "add --config-dir=/etc/kubernetes/kubelet.conf.d to KUBELET_EXTRA_ARGS in /etc/default/kubelet, "
        "create "
        "that directory and restart the kubelet, or set spec.kubeletConfig: EditConfigFile to let the agent "
        "edit /var/lib/kubelet/config.yaml (backed up, restored)"
    )
    assert _host_files(rig) == before


def test_static_pods_are_refused_unless_included(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.control_plane())
    rig.apply()
    assert rig.state == NodeState.SKIPPED
    assert (
        "static pods (/etc/kubernetes/manifests: kube-scheduler.yaml)" in rig.annotations[protocol.ANN_REASON]
    )

    rig.apply(options=AgentOptions(allow_static_pods=True))
    assert rig.state == NodeState.DONE


def test_invalid_kubelet_drop_in_of_someone_else_is_refused(make_rig: RigFactory) -> None:
    bad = f"{profiles.CONFIG_DIR}/20-broken.conf"
    rig = make_rig(profiles.kubeadm_containerd())
    rig.path(bad).write_text("evictionHard: {memory.available: 100Mi}\n")  # no apiVersion/kind
    rig.apply()
    assert rig.state == NodeState.SKIPPED
    assert (
        f"failed to load kubelet dropin file, path: {bad}, no apiVersion/kind"
        in rig.annotations[protocol.ANN_REASON]
    )


def test_a_later_drop_in_turning_the_gate_off_is_refused(make_rig: RigFactory) -> None:
    later = f"{profiles.CONFIG_DIR}/zz-local.conf"
    rig = make_rig(profiles.kubeadm_containerd())
    rig.path(later).write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        "featureGates:\n  EventedPLEG: false\n"
    )
    rig.apply()
    assert rig.state == NodeState.SKIPPED
    assert "zz-local.conf sorts after 99-eventedpleg.conf" in rig.annotations[protocol.ANN_REASON]


# --- EditConfigFile: backup outside, exact restore -----------------------------------------------------


def test_edit_config_file_backs_up_outside_and_restores_exactly_on_rollback(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_no_config_dir())
    original = rig.path(profiles.KUBEADM_CONFIG).read_bytes()
    rig.host.faults.kubelet.fails_when_evented = True

    rig.apply(mode=KubeletConfigMode.EDIT_CONFIG_FILE)

    assert rig.state == NodeState.ROLLED_BACK
    assert rig.path(profiles.KUBEADM_CONFIG).read_bytes() == original
    kubelet_dir = rig.path("/var/lib/kubelet")
    assert sorted(p.name for p in kubelet_dir.iterdir()) == ["config.yaml", "kubeadm-flags.env"]


def test_edit_config_file_enable_then_disable_restores_the_original_bytes(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_no_config_dir())
    original = rig.path(profiles.KUBEADM_CONFIG).read_bytes()

    rig.apply(mode=KubeletConfigMode.EDIT_CONFIG_FILE)
    assert rig.state == NodeState.DONE
    edited = rig.path(profiles.KUBEADM_CONFIG).read_text()
    assert "EventedPLEG: true" in edited
    assert rig.host.kubelet.evented and rig.host.kubelet.stream is Stream.CONNECTED
    warnings = rig.evidence["warnings"]
    assert isinstance(warnings, list)
    assert "kubeadm upgrade rewrites this file" in warnings[0]

    rig.apply(enabled=False, mode=KubeletConfigMode.EDIT_CONFIG_FILE)
    assert rig.state == NodeState.DONE
    assert rig.path(profiles.KUBEADM_CONFIG).read_bytes() == original
    assert not rig.host.kubelet.evented


# --- after Done: drift and silent fallback -------------------------------------------------------------


def test_drift_when_our_drop_in_is_removed(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_containerd())
    rig.apply()
    rig.check()
    assert rig.state == NodeState.DONE  # nothing changed: nothing reported

    rig.path(KUBELET_DROPIN).unlink()
    rig.check()

    assert rig.state == NodeState.DRIFTED
    assert rig.annotations[protocol.ANN_REASON] == f"drift: {KUBELET_DROPIN} was removed"
    assert protocol.ANN_CURRENT not in rig.annotations  # so the operator's desired != current re-applies
    assert rig.api.event_reasons(NODE)[-1] == "Drift"


def test_drift_when_our_drop_in_is_edited_and_reapply_fixes_it(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.crio())
    config_hash = rig.apply()
    rig.path(CRIO_DROPIN).write_text("[crio.runtime]\nenable_pod_events = false\n")
    rig.check()
    assert rig.state == NodeState.DRIFTED
    assert rig.annotations[protocol.ANN_REASON] == f"drift: {CRIO_DROPIN} was changed"

    # The operator drains and asks again (same hash): the agent rewrites its own file and verifies.
    rig.request(config_hash)
    rig.step()
    assert rig.state == NodeState.DONE
    assert "enable_pod_events = true" in rig.path(CRIO_DROPIN).read_text()


def test_fallback_after_a_runtime_restart_is_healed_by_a_kubelet_restart(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_containerd())
    config_hash = rig.apply()
    rig.host.restart_runtime()  # k8s#129827: the running kubelet burns its 5 retries and falls back for good
    assert _stream(rig) is Stream.FALLEN_BACK

    rig.check()

    assert rig.state == NodeState.DONE
    assert rig.annotations[protocol.ANN_CURRENT] == config_hash
    assert rig.annotations[protocol.ANN_REASON].startswith("healed a silent fallback to generic PLEG")
    assert _stream(rig) is Stream.CONNECTED
    evidence = rig.evidence
    assert "kubelet_evented_pleg_connection_error_count 5" in str(evidence["fallback"])
    assert rig.api.event_reasons(NODE)[-2:] == ["FallbackDetected", "FallbackHealed"]


def test_fallback_is_reported_as_drift_when_healing_is_off(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_containerd())
    rig.apply(options=AgentOptions(heal_fallback=False))
    rig.host.restart_runtime()
    starts = rig.host.kubelet.starts
    rig.check()
    assert rig.state == NodeState.DRIFTED
    assert "not healed: healFallback is off" in rig.annotations[protocol.ANN_REASON]
    assert rig.host.kubelet.starts == starts  # no kubelet restart


def test_fallback_on_137_is_detected_by_the_narrowed_error_line(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubelet_137())
    rig.apply(options=AgentOptions(heal_fallback=False))
    rig.host.restart_runtime()
    rig.check()
    assert rig.state == NodeState.DRIFTED
    assert "kubelet_evented_pleg_connection_error_count 5" in rig.annotations[protocol.ANN_REASON]


def test_heal_is_rate_limited(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_containerd(), max_heals_per_hour=1)
    rig.apply()
    rig.host.restart_runtime()
    rig.check()
    assert rig.state == NodeState.DONE
    rig.host.restart_runtime()
    rig.check()
    assert rig.state == NodeState.DRIFTED
    assert "too many heals" in rig.annotations[protocol.ANN_REASON]


# --- interrupted agent ---------------------------------------------------------------------------------


def test_agent_restarted_mid_apply_finishes_from_its_journal(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.crio())
    before = _host_files(rig)
    config_hash = rig.publish(enabled=True)
    rig.request(config_hash)
    work = rig.agent.on_node(rig.api.view(NODE))
    while rig.state != NodeState.VERIFYING:  # files written, services restarted, then the agent dies
        rig.clock.sleep(next(work))
    work.close()
    assert rig.path(f"/{c.AGENT_STATE_DIR}/txn.json").exists()

    fresh = Agent(NODE, rig.host, rig.api, AgentSettings(namespace=NAMESPACE))
    rig.agent = fresh
    rig.host.faults.kubelet.fails_when_evented = True  # and this time verification fails
    rig.step()

    # The rollback used the first run's backups: the node is exactly as before either run.
    assert rig.state == NodeState.ROLLED_BACK
    assert _host_files(rig) == before


def test_stale_report_is_not_written_over_a_new_request(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_containerd())
    config_hash = rig.publish(enabled=True)
    rig.request(config_hash)
    work = rig.agent.on_node(rig.api.view(NODE))
    while rig.state != NodeState.VERIFYING:
        rig.clock.sleep(next(work))
    off_hash = rig.publish(enabled=False)
    rig.request(off_hash)  # the operator changed its mind while we verified
    for wait in work:
        rig.clock.sleep(wait)
    assert rig.annotations[protocol.ANN_DESIRED] == off_hash
    # Our Done for the old hash, and then its benefit figures, were refused by the precondition.
    assert rig.state == NodeState.APPLYING
    assert rig.api.rejected_patches == 2
    rig.step()
    assert rig.state == NodeState.DONE
    assert rig.annotations[protocol.ANN_CURRENT] == off_hash
