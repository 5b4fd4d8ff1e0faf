"""A default kubeadm node: `eventedPleg: true` alone brings it to Done through a
kubelet.service drop-in of ours that adds --config-dir; turning it off leaves the node byte-identical;
`kubeadm upgrade node` (its exact rewrite, eventedpleg_lab.sim.kubeadm) neither undoes it nor goes unseen."""

from __future__ import annotations

import pytest

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg.agent.agent import Agent, AgentSettings
from eventedpleg.core.node.facts.hostplan import MANAGED_MARKER, RECOMMENDED_CONFIG_DIR, UNIT_DROPIN
from eventedpleg.models.nodeconfig import KubeletConfigMode
from eventedpleg.protocol import NodeState
from eventedpleg_lab.sim import profiles
from eventedpleg_lab.sim.kubeadm import upgrade_node
from eventedpleg_lab.sim.kubelet import Stream
from tests.agent.conftest import NAMESPACE, NODE, Rig, RigFactory

OUR_KUBELET_DROPIN = f"{RECOMMENDED_CONFIG_DIR}/{c.KUBELET_DROPIN_NAME}"
KUBEADM_FILES = (
    "/usr/lib/systemd/system/kubelet.service",
    "/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf",
    "/etc/default/kubelet",
    profiles.KUBEADM_FLAGS,
    profiles.KUBEADM_CONFIG,
    profiles.INSTANCE_CONFIG,
)


def tree(rig: Rig) -> dict[str, tuple[int, bytes | None]]:
    """Every file and directory under the host root with its mode (and a file's bytes), but the agent's
    own bookkeeping."""
    root = rig.host.root
    out: dict[str, tuple[int, bytes | None]] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if rel.startswith(c.AGENT_STATE_DIR):
            continue
        out[rel] = (path.stat().st_mode, path.read_bytes() if path.is_file() else None)
    return out


def restart_kubelet_after_upgrade(rig: Rig) -> None:
    """kubeadm's upgrade guide: `systemctl daemon-reload` then `systemctl restart kubelet`."""
    assert rig.host.run(["systemctl", "daemon-reload"]).ok
    assert rig.host.run(["systemctl", "restart", "kubelet"]).ok
    rig.clock.advance(60)


def cluster_kubelet_config(profile: profiles.HostProfile, **changes: object) -> dict[str, object]:
    """The ConfigMap kube-system/kubelet-config (no node-local containerRuntimeEndpoint in it)."""
    doc = profiles.kubelet_config(profile)
    doc.pop("containerRuntimeEndpoint", None)
    doc.update(changes)
    return doc


def test_the_default_kubeadm_layout_is_the_packages_and_kubeadms(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_default())
    dropin = rig.path("/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf").read_text()
    assert "EnvironmentFile=-/etc/default/kubelet\n" in dropin
    assert 'Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"\n' in dropin
    assert rig.path("/etc/default/kubelet").read_text() == "KUBELET_EXTRA_ARGS=\n"
    assert rig.path(profiles.KUBEADM_FLAGS).read_text() == 'KUBELET_KUBEADM_ARGS=""\n'
    assert not rig.path(RECOMMENDED_CONFIG_DIR).exists()
    assert not rig.path("/etc/systemd/system/kubelet.service.d").exists()
    assert not any("--config-dir" in a for a in rig.host.kubelet.argv)


def test_eventedpleg_true_alone_brings_a_default_kubeadm_node_to_done(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_default())
    kubeadm_before = {p: rig.path(p).read_bytes() for p in KUBEADM_FILES}

    rig.apply()  # the default NodeConfig: kubeletConfig DropInOnly

    assert rig.state == NodeState.DONE, rig.annotations[protocol.ANN_REASON]
    assert rig.host.kubelet.evented and rig.host.kubelet.stream is Stream.CONNECTED
    assert f"--config-dir={RECOMMENDED_CONFIG_DIR}" in rig.host.kubelet.argv
    unit_dropin = rig.path(UNIT_DROPIN).read_text()
    assert MANAGED_MARKER in unit_dropin.splitlines()[0]
    assert (
        'Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml '
        f'--config-dir={RECOMMENDED_CONFIG_DIR}"' in unit_dropin
    )
    assert rig.path(OUR_KUBELET_DROPIN).exists()
    # Nothing of kubeadm's or of the packages' was edited.
    assert {p: rig.path(p).read_bytes() for p in KUBEADM_FILES} == kubeadm_before
    commands = rig.host.commands
    reload = commands.index(("systemctl", "daemon-reload"))
    assert commands.index(("systemctl", "restart", "kubelet")) > reload


def test_turning_it_off_leaves_the_kubeadm_node_byte_identical(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_default())
    before, argv = tree(rig), rig.host.kubelet.argv
    rig.apply()
    assert rig.state == NodeState.DONE

    rig.apply(enabled=False)

    assert rig.state == NodeState.DONE, rig.annotations[protocol.ANN_REASON]
    assert not rig.host.kubelet.evented
    assert rig.host.kubelet.argv == argv  # unit, flags: as kubeadm left them
    assert tree(rig) == before  # files, modes, and the directories we had created: gone again


def test_eventedpleg_false_on_an_untouched_kubeadm_node_changes_nothing(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_default())
    before = tree(rig)
    rig.apply(enabled=False)
    assert rig.state == NodeState.DONE
    assert tree(rig) == before
    assert ("systemctl", "daemon-reload") not in rig.host.commands


def test_a_failed_apply_rolls_back_to_the_byte_identical_node(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_default())
    before, argv = tree(rig), rig.host.kubelet.argv
    rig.host.faults.kubelet.fails_when_evented = True

    rig.apply()

    assert rig.state == NodeState.ROLLED_BACK
    assert rig.host.node_ready()
    assert rig.host.kubelet.argv == argv
    assert tree(rig) == before


def test_other_feature_gates_in_config_yaml_are_kept_and_intact_after_revert(make_rig: RigFactory) -> None:
    profile = profiles.kubeadm_default().with_(config_overrides={"featureGates": {"KubeletTracing": False}})
    rig = make_rig(profile)
    config = rig.path(profiles.KUBEADM_CONFIG).read_bytes()

    rig.apply()
    assert rig.state == NodeState.DONE
    assert rig.host.kubelet.gates == {"KubeletTracing": False, "EventedPLEG": True}
    assert rig.path(profiles.KUBEADM_CONFIG).read_bytes() == config

    rig.apply(enabled=False)
    assert rig.state == NodeState.DONE
    assert rig.host.kubelet.gates == {"KubeletTracing": False}
    assert rig.path(profiles.KUBEADM_CONFIG).read_bytes() == config


@pytest.mark.parametrize(
    "cluster_gates",
    [None, {"EventedPLEG": False}],  # the ConfigMap may even say false: a drop-in wins over --config
)
def test_kubeadm_upgrade_node_on_a_done_node_keeps_it_on_and_checked(
    make_rig: RigFactory, cluster_gates: dict[str, bool] | None
) -> None:
    profile = profiles.kubeadm_default()
    rig = make_rig(profile)
    rig.apply()
    assert rig.state == NodeState.DONE
    ours = {p: rig.path(p).read_bytes() for p in (UNIT_DROPIN, OUR_KUBELET_DROPIN)}
    changes = {} if cluster_gates is None else {"featureGates": cluster_gates}

    written = upgrade_node(rig.host.root, cluster_kubelet_config(profile, **changes), rig.clock.now())
    restart_kubelet_after_upgrade(rig)
    rig.check()

    assert profiles.KUBEADM_CONFIG in written
    assert {p: rig.path(p).read_bytes() for p in ours} == ours  # kubeadm does not touch them
    assert rig.host.kubelet.evented and rig.host.kubelet.stream is Stream.CONNECTED
    assert rig.state == NodeState.DONE  # checked after Done: nothing drifted


def test_kubeadm_upgrade_that_rewrites_kubeadm_flags_env_keeps_it_on(make_rig: RigFactory) -> None:
    """Releases whose post-upgrade phase drops flags rewrite kubeadm-flags.env too
    (RemoveKubeletArgsFromFile)."""
    profile = profiles.kubeadm_no_config_dir()  # 1.33 layout: flags in kubeadm-flags.env
    rig = make_rig(profile)
    rig.apply()
    assert rig.state == NodeState.DONE, rig.annotations[protocol.ANN_REASON]

    written = upgrade_node(
        rig.host.root,
        cluster_kubelet_config(profile),
        rig.clock.now(),
        unwanted_flags=("pod-infra-container-image",),
    )
    restart_kubelet_after_upgrade(rig)
    rig.check()

    assert profiles.KUBEADM_FLAGS in written
    assert "pod-infra-container-image" not in rig.path(profiles.KUBEADM_FLAGS).read_text()
    assert rig.host.kubelet.evented
    assert rig.state == NodeState.DONE


def test_kubeadm_upgrade_undoing_an_edit_config_file_node_is_reported_as_drift(make_rig: RigFactory) -> None:
    profile = profiles.kubeadm_default()
    rig = make_rig(profile)
    rig.apply(mode=KubeletConfigMode.EDIT_CONFIG_FILE)
    assert rig.state == NodeState.DONE
    assert not rig.path(UNIT_DROPIN).exists()  # opted in to editing config.yaml instead

    upgrade_node(rig.host.root, cluster_kubelet_config(profile), rig.clock.now())
    rig.check()

    assert rig.state == NodeState.DRIFTED
    assert rig.annotations[protocol.ANN_REASON] == (
        f"drift: featureGates.EventedPLEG in {profiles.KUBEADM_CONFIG} is no longer true "
        "(kubeadm upgrade rewrites it)"
    )
    assert protocol.ANN_CURRENT not in rig.annotations  # the operator re-applies it
    assert rig.api.event_reasons("node-a")[-1] == "Drift"


def test_files_waiting_in_the_config_dir_are_not_switched_on_silently(make_rig: RigFactory) -> None:
    waiting = f"{RECOMMENDED_CONFIG_DIR}/50-old-experiment.conf"
    profile = profiles.kubeadm_default().with_(
        extra_files={waiting: "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"}
    )
    rig = make_rig(profile)
    before = tree(rig)
    rig.apply()
    assert rig.state == NodeState.SKIPPED
    assert (
        "already holds 50-old-experiment.conf, which the kubelet does not read today"
        in (rig.annotations[protocol.ANN_REASON])
    )
    assert tree(rig) == before


def test_a_unit_drop_in_with_our_name_that_we_did_not_write_is_not_clobbered(make_rig: RigFactory) -> None:
    profile = profiles.kubeadm_default().with_(extra_files={UNIT_DROPIN: "[Service]\nRestartSec=5\n"})
    rig = make_rig(profile)
    rig.apply()
    assert rig.state == NodeState.SKIPPED
    assert f"{UNIT_DROPIN} exists and was not written by the operator" in rig.annotations[protocol.ANN_REASON]
    assert rig.path(UNIT_DROPIN).read_text() == "[Service]\nRestartSec=5\n"


def test_an_apply_resumed_after_an_agent_restart_still_removes_its_directories_later(
    make_rig: RigFactory,
) -> None:
    rig = make_rig(profiles.kubeadm_default())
    before = tree(rig)
    rig.request(rig.publish(enabled=True))
    work = rig.agent.on_node(rig.api.view(NODE))
    while rig.state != NodeState.VERIFYING:  # files written, kubelet restarted, then the agent dies
        rig.clock.sleep(next(work))
    work.close()

    rig.agent = Agent(NODE, rig.host, rig.api, AgentSettings(namespace=NAMESPACE))
    rig.step()
    assert rig.state == NodeState.DONE

    rig.apply(enabled=False)
    assert rig.state == NodeState.DONE
    assert tree(rig) == before
