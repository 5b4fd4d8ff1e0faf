"""The pure per-host decision: what to write/remove, or a refusal with the exact fix (nothing touched)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from eventedpleg import constants as c
from eventedpleg.core import render, runtimes
from eventedpleg.core.node.facts import embedded
from eventedpleg.core.node.facts.hostplan import (
    ApplyPlan,
    ConfigEdit,
    HostFacts,
    ManagedState,
    Refusal,
    plan_host,
)
from eventedpleg.core.node.facts.kubeletflags import parse_units
from eventedpleg.core.versions import parse_runtime, parse_version

CONFIG = "/var/lib/kubelet/config.yaml"
DIR = "/etc/kubernetes/kubelet.conf.d"
HEADER = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
HELP = "  --feature-gates mapStringBool  Options are:\n      EventedPLEG=true|false (ALPHA - default=false)\n"
CONFIG_TEXT = HEADER + "cgroupDriver: systemd\nstaticPodPath: /etc/kubernetes/manifests\n"
ON = render.render(enabled=True, owner="cluster", kubelet_config_mode="DropInOnly")
ON_EDIT = render.render(enabled=True, owner="cluster", kubelet_config_mode="EditConfigFile")
OFF = render.render(enabled=False, owner="cluster", kubelet_config_mode="DropInOnly")
OURS = f"{DIR}/{c.KUBELET_DROPIN_NAME}"
CRIO_OURS = f"/etc/crio/crio.conf.d/{c.CRIO_DROPIN_NAME}"


def facts(
    *args: str, kubelet: str = "v1.33.2", runtime: str = "containerd://2.1.3", **changes: object
) -> HostFacts:
    argv = ("/usr/bin/kubelet", f"--config={CONFIG}", *args)
    base = HostFacts(
        kubelet_version=parse_version(kubelet),
        runtime=parse_runtime(runtime),
        running_argv=argv,
        unit_argv=argv,
        config_text=CONFIG_TEXT,
        kubelet_dropins=(("10-eviction.conf", HEADER + "evictionHard: {memory.available: 200Mi}\n"),),
        kubelet_help=HELP,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def plan(result: ApplyPlan | Refusal) -> ApplyPlan:
    assert isinstance(result, ApplyPlan), result
    return result


def refusal(result: ApplyPlan | Refusal) -> Refusal:
    assert isinstance(result, Refusal), result
    return result


def test_containerd_with_config_dir_writes_one_drop_in_and_restarts_only_the_kubelet() -> None:
    result = plan(plan_host(facts(f"--config-dir={DIR}"), ON, ManagedState(), allow_static_pods=False))
    assert [(ch.path, ch.content == ON.file(c.CM_KEY_KUBELET)) for ch in result.changes] == [(OURS, True)]
    assert not result.restart_runtime
    assert result.expect.gate is True and result.expect.runtime_readback is None


def test_crio_writes_both_and_restarts_crio() -> None:
    f = facts(
        f"--config-dir={DIR}", runtime="cri-o://1.33.2", runtime_dropins=(("10-crun.conf", "[crio]\n"),)
    )
    result = plan(plan_host(f, ON, ManagedState(), allow_static_pods=False))
    assert [ch.path for ch in result.changes] == [OURS, CRIO_OURS]
    assert result.restart_runtime and result.runtime_unit == "crio"
    assert result.expect.runtime_readback is runtimes.CRIO


@pytest.mark.parametrize(
    ("f", "mode", "reason", "fix"),
    [
        (facts(), ON, "started without --config-dir", "add --config-dir=/etc/kubernetes/kubelet.conf.d"),
        (
            facts(kubelet="v1.27.12"),
            ON,
            "started without --config-dir",
            "set spec.kubeletConfig: EditConfigFile",
        ),
        (
            facts(f"--config-dir={DIR}", kubelet="v1.29.6"),
            ON,
            "ignores --config-dir without",
            "KUBELET_CONFIG",
        ),
        (
            facts("--feature-gates=EventedPLEG=false", f"--config-dir={DIR}"),
            ON,
            "command line sets",
            "remove",
        ),
        (
            facts("--feature-gates=AllAlpha=true", f"--config-dir={DIR}"),
            OFF,
            "AllAlpha=true",
            "remove AllAlpha",
        ),
        (
            facts(f"--config-dir={DIR}", kubelet="v1.25.16"),
            ON,
            "does not know the EventedPLEG gate",
            "upgrade",
        ),
        (facts(f"--config-dir={DIR}", kubelet_help="no gates"), ON, "does not list EventedPLEG", "1.26-1.37"),
        (facts(f"--config-dir={DIR}", kubelet_help=None), ON, "could not run `kubelet --help`", "runnable"),
        (
            facts(f"--config-dir={DIR}", runtime="docker://24.0.1"),
            ON,
            "only containerd and CRI-O",
            "containerd",
        ),
        (
            facts(f"--config-dir={DIR}", static_pod_manifests=("etcd.yaml",)),
            ON,
            "runs static pods",
            "includeControlPlane",
        ),
        (
            facts(f"--config-dir={DIR}", kubelet_dropins=((c.KUBELET_DROPIN_NAME, HEADER + "# theirs\n"),)),
            ON,
            "was not written by the operator",
            "move or rename",
        ),
        (
            facts(
                f"--config-dir={DIR}",
                kubelet_dropins=(("zz.conf", HEADER + "featureGates: {EventedPLEG: false}"),),
            ),
            ON,
            "zz.conf sorts after",
            "remove EventedPLEG from",
        ),
        (
            facts(f"--config-dir={DIR}", kubelet_dropins=(("20-x.conf", "port: 1\n"),)),
            ON,
            "no apiVersion/kind",
            "fix or remove",
        ),
        (
            facts(
                f"--config-dir={DIR}",
                kubelet_dropins=(("50-mine.conf", HEADER + "featureGates: {EventedPLEG: true}"),),
            ),
            OFF,
            "would stay on after removing",
            "50-mine.conf",
        ),
        (
            facts(f"--config-dir={DIR}", unit_argv=("/usr/bin/kubelet", "--config=/other.yaml")),
            ON,
            "differs from its unit",
            "restart the kubelet once",
        ),
        (
            facts(running_argv=None, unit_argv=None),
            ON,
            "kubelet.service has no main process",
            "start kubelet.service",
        ),
    ],
)
def test_refusals(f: HostFacts, mode: render.RenderedConfig, reason: str, fix: str) -> None:
    result = refusal(plan_host(f, mode, ManagedState(), allow_static_pods=False))
    assert reason in result.reason
    assert fix in result.fix
    assert result.message.startswith("Unsupported: ")


def test_kubelet_older_than_128_is_only_offered_edit_config_file() -> None:
    result = refusal(plan_host(facts(kubelet="v1.27.12"), ON, ManagedState(), allow_static_pods=False))
    assert result.fix.startswith("set spec.kubeletConfig: EditConfigFile")  # --config-dir arrived in 1.28


def test_1_29_with_the_alpha_env_var_is_fine() -> None:
    f = facts(f"--config-dir={DIR}", kubelet="v1.29.6", running_env={"KUBELET_CONFIG_DROPIN_DIR_ALPHA": "1"})
    assert plan(plan_host(f, ON, ManagedState(), allow_static_pods=False)).changes[0].path == OURS


def test_static_pods_are_allowed_on_opt_in() -> None:
    f = facts(f"--config-dir={DIR}", static_pod_manifests=("etcd.yaml",))
    assert plan(plan_host(f, ON, ManagedState(), allow_static_pods=True)).changes


def test_fix_names_the_env_file_the_unit_reads() -> None:
    unit = parse_units(["[Service]\nEnvironmentFile=-/etc/sysconfig/kubelet\nExecStart=/usr/bin/kubelet\n"])
    result = refusal(plan_host(facts(unit=unit), ON, ManagedState(), allow_static_pods=False))
    assert "KUBELET_EXTRA_ARGS in /etc/sysconfig/kubelet" in result.fix


def test_edit_config_file_when_opted_in() -> None:
    result = plan(plan_host(facts(), ON_EDIT, ManagedState(), allow_static_pods=False))
    (change,) = result.changes
    assert change.path == CONFIG
    assert change.content is not None and "EventedPLEG: true" in change.content
    assert result.config_edit is not None and result.config_edit.previous is None
    assert "kubeadm upgrade rewrites this file" in result.warnings[0]


def test_disable_removes_managed_files_and_restores_the_config_bytes() -> None:
    edited = "edited: true\n"
    import hashlib  # noqa: PLC0415

    managed = ManagedState(
        hash="h",
        enabled=True,
        files={OURS: "x", CRIO_OURS: "y"},
        config_edit=ConfigEdit(CONFIG, None, hashlib.sha256(edited.encode()).hexdigest()),
    )
    f = facts(
        f"--config-dir={DIR}",
        runtime="cri-o://1.33.2",
        config_text=edited,
        config_baseline=CONFIG_TEXT,
        runtime_dropins=((c.CRIO_DROPIN_NAME, "# Managed by evented-pleg-operator\n"),),
    )
    result = plan(plan_host(f, OFF, managed, allow_static_pods=False))
    changes = {ch.path: ch.content for ch in result.changes}
    assert changes == {OURS: None, CONFIG: CONFIG_TEXT, CRIO_OURS: None}
    assert result.restart_runtime
    assert result.expect.gate is False and result.expect.in_use is False


def test_disable_after_someone_edited_the_config_only_removes_our_key() -> None:
    managed = ManagedState(
        hash="h", enabled=True, config_edit=ConfigEdit(CONFIG, None, "not-the-current-sha")
    )
    now = HEADER + "featureGates:\n  EventedPLEG: true\n  Other: true\n"
    result = plan(
        plan_host(facts(config_text=now, config_baseline=CONFIG_TEXT), OFF, managed, allow_static_pods=False)
    )
    (change,) = result.changes
    assert change.content is not None
    assert "EventedPLEG" not in change.content and "Other: true" in change.content


# --- k3s and RKE2: recognised, never managed -------------------------------------------------------------


@pytest.mark.parametrize(
    ("present", "name", "config"),
    [
        (
            ("/etc/rancher/k3s", "/etc/systemd/system/k3s-agent.service"),
            "k3s",
            "/etc/rancher/k3s/config.yaml",
        ),
        (("/usr/local/lib/systemd/system/rke2-agent.service",), "RKE2", "/etc/rancher/rke2/config.yaml"),
    ],
)
@pytest.mark.parametrize("rendered", [ON, OFF])
def test_k3s_and_rke2_are_skipped_with_their_own_kubelet_arg(
    present: tuple[str, ...], name: str, config: str, rendered: render.RenderedConfig
) -> None:
    found = embedded.recognise(present)
    assert found is not None and found.found == present
    # RKE2 runs a real `kubelet` process; without a kubelet.service the node is still not ours to manage.
    f = facts(unit=None, unit_argv=None, embedded=found)
    result = refusal(plan_host(f, rendered, ManagedState(), allow_static_pods=False))
    assert result.message.startswith(f"Unsupported: {name}: the kubelet is embedded in {name} ")
    assert f'`kubelet-arg: ["feature-gates=EventedPLEG=true"]` in {config}' in result.fix


def test_a_kubeadm_node_with_leftover_rancher_files_is_still_managed() -> None:
    found = embedded.recognise(("/var/lib/rancher/k3s",))
    unit = parse_units(["[Service]\nExecStart=/usr/bin/kubelet\n"])
    f = facts(f"--config-dir={DIR}", unit=unit, embedded=found)
    assert isinstance(plan_host(f, ON, ManagedState(), allow_static_pods=False), ApplyPlan)


def test_no_rancher_marks_means_no_distribution() -> None:
    assert embedded.recognise(("/etc/kubernetes", "/usr/bin/kubelet")) is None


# --- kubeadm without --config-dir: our kubelet.service drop-in adds it ----------------------------------

KUBEADM_UNIT = parse_units(
    [
        "[Service]\nExecStart=/usr/bin/kubelet\n",
        '[Service]\nEnvironment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"\n'
        "EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env\nEnvironmentFile=-/etc/default/kubelet\n"
        "ExecStart=\n"
        "ExecStart=/usr/bin/kubelet $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS\n",
    ]
)
UNIT_DROPIN = "/etc/systemd/system/kubelet.service.d/99-eventedpleg.conf"
MISSING = frozenset({"/etc/systemd/system/kubelet.service.d", DIR})


def kubeadm(kubelet: str = "v1.33.2", **changes: object) -> HostFacts:
    base = facts(kubelet=kubelet, unit=KUBEADM_UNIT, kubelet_dropins=(), missing_dirs=MISSING, env_files={})
    return replace(base, **changes)  # type: ignore[arg-type]


def test_kubeadm_without_config_dir_gets_our_unit_drop_in_and_our_kubelet_drop_in() -> None:
    result = plan(plan_host(kubeadm(), ON, ManagedState(), allow_static_pods=False))
    assert [ch.path for ch in result.changes] == [UNIT_DROPIN, OURS]
    unit_text = result.changes[0].content or ""
    assert unit_text.splitlines()[0].startswith("# Managed by evented-pleg-operator")
    assert unit_text.endswith(
        f'[Service]\nEnvironment="KUBELET_CONFIG_ARGS=--config={CONFIG} --config-dir={DIR}"\n'
    )
    assert result.reload_units
    assert result.created_dirs == ("/etc/systemd/system/kubelet.service.d", DIR)


def test_kubelet_129_also_gets_the_alpha_variable() -> None:
    result = plan(plan_host(kubeadm(kubelet="v1.29.6"), ON, ManagedState(), allow_static_pods=False))
    assert 'Environment="KUBELET_CONFIG_DROPIN_DIR_ALPHA=on"\n' in (result.changes[0].content or "")


def test_turning_it_off_removes_both_drop_ins_and_the_directories_we_created() -> None:
    managed = ManagedState(
        hash="h",
        enabled=True,
        files={UNIT_DROPIN: "x", OURS: "y"},
        created_dirs=("/etc/systemd/system/kubelet.service.d", DIR),
    )
    ours = "# Managed by evented-pleg-operator: adds --config-dir\n[Service]\n"
    f = kubeadm(unit_dropin=ours, missing_dirs=frozenset())
    result = plan(plan_host(f, OFF, managed, allow_static_pods=False))
    assert [(ch.path, ch.content) for ch in result.changes] == [(OURS, None), (UNIT_DROPIN, None)]
    assert result.reload_units
    assert result.remove_dirs == (DIR, "/etc/systemd/system/kubelet.service.d")


def test_config_args_from_an_environment_file_cannot_be_extended_and_the_fix_says_so() -> None:
    f = kubeadm(env_files={"/etc/default/kubelet": f'KUBELET_CONFIG_ARGS="--config={CONFIG}"\n'})
    result = refusal(plan_host(f, ON, ManagedState(), allow_static_pods=False))
    assert "started without --config-dir" in result.reason
    assert result.fix.startswith(f"add --config-dir={DIR} to KUBELET_EXTRA_ARGS in /etc/default/kubelet")
