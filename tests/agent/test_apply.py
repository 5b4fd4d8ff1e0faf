"""The agent applies, verifies and reports on a simulated host: the supported layouts end Done, for real."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import yaml

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg.agent.hostfiles import TEMP_PREFIX
from eventedpleg.core import render
from eventedpleg.core.node.blocks.host import KubeletEndpoint
from eventedpleg.core.node.facts.promtext import parse_metrics
from eventedpleg.protocol import NodeState
from eventedpleg_lab.sim import profiles
from eventedpleg_lab.sim.kubelet import Stream
from tests.agent.conftest import NODE, RigFactory

KUBELET_DROPIN = f"{profiles.CONFIG_DIR}/{c.KUBELET_DROPIN_NAME}"
CRIO_DROPIN = f"/{c.CRIO_DROPIN_DIR}/{c.CRIO_DROPIN_NAME}"


def _files_in(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


def _restarts(commands: list[tuple[str, ...]]) -> list[str]:
    return [cmd[2] for cmd in commands if cmd[:2] == ("systemctl", "restart")]


def test_containerd_with_config_dir_ends_done_with_evidence(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_containerd())
    config_hash = rig.apply()

    ann = rig.annotations
    assert ann[protocol.ANN_STATE] == NodeState.DONE
    assert ann[protocol.ANN_CURRENT] == config_hash
    # The drop-in on disk is exactly the rendered one and sorts after the platform's 10-eviction.conf.
    rendered = render.from_configmap(
        dict(rig.api.configmaps[("evented-pleg-system", c.CONFIGMAP_PREFIX + config_hash)])
    )
    assert rig.path(KUBELET_DROPIN).read_text() == rendered.file(c.CM_KEY_KUBELET)
    assert _files_in(rig.path(profiles.CONFIG_DIR)) == ["10-eviction.conf", "99-eventedpleg.conf", "README"]
    # containerd >= 1.7 needs nothing: no runtime restart, only the kubelet (after nothing to restart first).
    assert _restarts(rig.host.commands) == ["kubelet"]
    # The simulated kubelet merged the drop-ins: both its own gate and ours are on, and it is really evented.
    assert rig.host.kubelet.gates == {"EventedPLEG": True, "GracefulNodeShutdown": True}
    assert rig.host.kubelet.stream is Stream.CONNECTED
    evidence = rig.evidence
    assert evidence["result"] == "pass"
    checks = evidence["checks"]
    assert isinstance(checks, dict)
    assert checks["gate"] == 'ok: kubernetes_feature_enabled{name="EventedPLEG",stage="ALPHA"} 1'
    assert checks["relist"].startswith("ok: 0 relists in 10s")
    assert "kubelet_evented_pleg_connection_success_count 1" in checks["stream"]
    assert len(ann[protocol.ANN_EVIDENCE]) <= 2048
    assert json.loads(ann[protocol.ANN_BENEFIT])["enabled"] is True
    assert rig.api.event_reasons(NODE) == ["Applying", "Verified"]
    # Bookkeeping lives in the state dir; the transaction journal is gone after the commit.
    state_dir = rig.path("/" + c.AGENT_STATE_DIR)
    assert _files_in(state_dir) == ["applied.json"]
    applied = json.loads((state_dir / "applied.json").read_text())
    assert applied["hash"] == config_hash
    assert list(applied["files"]) == [KUBELET_DROPIN]


def test_state_goes_through_verifying_before_done(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_containerd())
    rig.apply()
    states = [changes[protocol.ANN_STATE] for _, changes in rig.api.patches if protocol.ANN_STATE in changes]
    assert states == [NodeState.VERIFYING, NodeState.DONE]


def test_crio_gets_enable_pod_events_and_a_runtime_restart_before_the_kubelet(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.crio())
    rig.apply()

    assert rig.state == NodeState.DONE
    dropin = rig.path(CRIO_DROPIN).read_text()
    assert tomllib.loads(dropin) == {"crio": {"runtime": {"enable_pod_events": True}}}
    assert _restarts(rig.host.commands) == ["crio", "kubelet"]  # runtime first (k8s#129827)
    # crio.conf.d holds the distro file and ours, nothing else (no temp or backup file).
    assert _files_in(rig.path("/" + c.CRIO_DROPIN_DIR)) == ["10-crun.conf", "99-eventedpleg.conf"]
    assert rig.host.run(["crio", "status", "config"]).stdout.count("enable_pod_events = true") == 1
    checks = rig.evidence["checks"]
    assert isinstance(checks, dict)
    assert checks["crioPodEvents"] == "ok: enable_pod_events = true (crio status config)"


def test_no_temp_files_anywhere_after_apply(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.crio())
    rig.apply()
    leftovers = [p for p in rig.host.root.rglob("*") if p.name.startswith(TEMP_PREFIX) or p.suffix == ".bak"]
    assert leftovers == []


def test_kubelet_137_passes_on_narrowed_signals_and_says_there_is_no_cpu_saving(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubelet_137())
    rig.apply()

    assert rig.state == NodeState.DONE
    checks = rig.evidence["checks"]
    assert isinstance(checks, dict)
    assert "no steady-state CPU saving" in checks["relist"]
    assert checks["relist"].startswith("info: 10 relists in 10s")  # 1.37 keeps the 1 s relist (k8s#139262)
    assert rig.annotations[protocol.ANN_REASON].startswith("Evented PLEG on (1.37")


def test_kubelet_129_uses_config_dir_with_the_alpha_env_var(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubelet_129())
    rig.apply()
    assert rig.state == NodeState.DONE
    assert rig.path(KUBELET_DROPIN).is_file()


def test_disable_removes_our_files_and_relisting_is_back_to_one_second(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.crio())
    rig.apply(enabled=True)
    assert rig.state == NodeState.DONE

    off_hash = rig.apply(enabled=False)

    assert rig.state == NodeState.DONE
    assert rig.annotations[protocol.ANN_CURRENT] == off_hash
    assert not rig.path(KUBELET_DROPIN).exists()
    assert not rig.path(CRIO_DROPIN).exists()
    assert _files_in(rig.path(profiles.CONFIG_DIR)) == ["10-eviction.conf", "README"]
    checks = rig.evidence["checks"]
    assert isinstance(checks, dict)
    assert checks["gate"] == 'ok: kubernetes_feature_enabled{name="EventedPLEG",stage="ALPHA"} 0'
    assert checks["relist"] == "ok: 10 relists in 10s, mean interval 1.0s"
    metrics = parse_metrics(rig.host.kubelet_get(KubeletEndpoint.METRICS).body)
    assert metrics.value("kubernetes_feature_enabled", name="EventedPLEG") == 0
    assert "enable_pod_events = true" not in rig.host.run(["crio", "status", "config"]).stdout
    assert json.loads(rig.path(f"/{c.AGENT_STATE_DIR}/applied.json").read_text())["files"] == {}


def test_disable_on_a_node_we_never_touched_changes_nothing(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_no_config_dir())  # no --config-dir is fine for turning it off
    before = rig.snapshot()
    rig.apply(enabled=False)
    assert rig.state == NodeState.DONE
    after = {k: v for k, v in rig.snapshot().items() if not k.startswith(c.AGENT_STATE_DIR)}
    assert after == before


def test_reapply_after_a_new_render_replaces_our_file(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_containerd())
    rig.apply()
    # A different owner renders different bytes (new hash); the agent rewrites its own file.
    rendered = render.render(enabled=True, owner="other", kubelet_config_mode="DropInOnly")
    rig.api.configmaps[("evented-pleg-system", rendered.configmap_name)] = rendered.configmap_data()
    rig.request(rendered.hash)
    rig.step()
    assert rig.state == NodeState.DONE
    assert rig.annotations[protocol.ANN_CURRENT] == rendered.hash
    assert 'NodeConfig "other"' in rig.path(KUBELET_DROPIN).read_text()
    doc = yaml.safe_load(rig.path(KUBELET_DROPIN).read_text())
    assert doc["featureGates"] == {"EventedPLEG": True}


def test_idle_when_not_asked(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_containerd())
    config_hash = rig.publish(enabled=True)
    rig.api.annotate(NODE, {protocol.ANN_DESIRED: config_hash, protocol.ANN_STATE: NodeState.DRAINING.value})
    rig.step()
    assert rig.state == NodeState.DRAINING
    assert rig.host.commands == []
    assert not rig.path(KUBELET_DROPIN).exists()
