"""The simulated host follows the real rules (docs/compatibility.md §1-§4), so passing agent tests mean
something."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from eventedpleg.core.node.blocks.host import KubeletEndpoint
from eventedpleg.core.node.facts.promtext import Metrics, parse_metrics
from eventedpleg_lab.sim import profiles, systemd
from eventedpleg_lab.sim.clock import EPOCH, FakeClock
from eventedpleg_lab.sim.host import SimHost
from eventedpleg_lab.sim.kubelet import Status, Stream
from eventedpleg_lab.sim.profiles import HostProfile

DROPIN_DIR = profiles.CONFIG_DIR
HEADER = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"


def _host(tmp_path: Path, profile: HostProfile) -> tuple[SimHost, FakeClock]:
    clock = FakeClock()
    return SimHost(tmp_path / "root", profile, clock), clock


def _write(host: SimHost, path: str, text: str) -> None:
    target = host.path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def _restart_kubelet(host: SimHost, clock: FakeClock, wait: float = 60.0) -> None:
    assert host.run(["systemctl", "restart", "kubelet"]).ok  # Type=simple: succeeds even if it then exits
    clock.advance(wait)
    host.advance()  # the simulation moves when observed; look now


def _metrics(host: SimHost) -> Metrics:
    result = host.kubelet_get(KubeletEndpoint.METRICS)
    assert result.ok
    return parse_metrics(result.body)


def _stream(host: SimHost) -> Stream:
    return host.kubelet.stream


def _log(host: SimHost) -> str:
    return "\n".join(host.journal("kubelet", EPOCH - timedelta(days=1)))


def test_only_conf_drop_ins_are_read(tmp_path: Path) -> None:
    host, clock = _host(tmp_path, profiles.kubeadm_containerd())
    _write(host, f"{DROPIN_DIR}/50-gates.yaml", HEADER + "featureGates:\n  EventedPLEG: true\n")
    _restart_kubelet(host, clock)
    assert host.kubelet.evented is False
    assert "EventedPLEG" not in host.kubelet.gates


def test_drop_ins_merge_maps_key_by_key_in_lexical_order(tmp_path: Path) -> None:
    host, clock = _host(tmp_path, profiles.kubeadm_containerd().with_(verbosity=4))
    _write(host, f"{DROPIN_DIR}/20-a.conf", HEADER + "featureGates:\n  EventedPLEG: true\n")
    _write(host, f"{DROPIN_DIR}/30-b.conf", HEADER + "featureGates:\n  KubeletTracing: false\n")
    _restart_kubelet(host, clock)
    # 10-eviction.conf (GracefulNodeShutdown) + 20-a + 30-b all survive: maps merge, they are not replaced.
    assert host.kubelet.gates == {"EventedPLEG": True, "GracefulNodeShutdown": True, "KubeletTracing": False}
    assert "feature gates: &{map[EventedPLEG:true GracefulNodeShutdown:true KubeletTracing:false]}" in _log(
        host
    )
    assert "Skipped file in drop-in directory (does not have .conf extension)" in _log(host)

    _write(host, f"{DROPIN_DIR}/sub/40-c.conf", HEADER + "featureGates:\n  EventedPLEG: false\n")
    _restart_kubelet(host, clock)
    assert host.kubelet.gates["EventedPLEG"] is False  # later in WalkDir order wins, subdirectories included


def test_136_and_later_log_the_gates_in_the_structured_form(tmp_path: Path) -> None:
    host, clock = _host(tmp_path, profiles.kubelet_137().with_(verbosity=1))
    _write(host, f"{DROPIN_DIR}/20-a.conf", HEADER + "featureGates:\n  EventedPLEG: true\n")
    _restart_kubelet(host, clock)
    assert '] "Updated" featureGates={"EventedPLEG":true,"GracefulNodeShutdown":true}' in _log(host)
    assert "feature gates: &{map[" not in _log(host)


def test_command_line_feature_gates_win_over_drop_ins(tmp_path: Path) -> None:
    host, clock = _host(tmp_path, profiles.feature_gates_conflict())
    _write(host, f"{DROPIN_DIR}/99-on.conf", HEADER + "featureGates:\n  EventedPLEG: true\n")
    _restart_kubelet(host, clock)
    assert host.kubelet.evented is False


def test_all_alpha_turns_the_gate_on(tmp_path: Path) -> None:
    host, clock = _host(tmp_path, profiles.kubeadm_containerd())
    _write(host, f"{DROPIN_DIR}/50-alpha.conf", HEADER + "featureGates:\n  AllAlpha: true\n")
    _restart_kubelet(host, clock)
    assert host.kubelet.evented is True


def test_unknown_gate_stops_the_kubelet(tmp_path: Path) -> None:
    host, clock = _host(tmp_path, profiles.kubelet_125())
    config = host.path(profiles.KUBEADM_CONFIG)
    config.write_text(config.read_text() + "featureGates:\n  EventedPLEG: true\n")
    _restart_kubelet(host, clock)
    assert host.kubelet.status is Status.FAILED
    assert not host.kubelet_get(KubeletEndpoint.HEALTHZ).ok
    assert '"command failed" err="unrecognized feature gate: EventedPLEG"' in _log(host)
    assert host.run(["systemctl", "is-active", "kubelet"]).stdout.strip() == "activating"


def test_unknown_gate_on_the_command_line_has_the_flags_message(tmp_path: Path) -> None:
    host, clock = _host(
        tmp_path, profiles.kubelet_125().with_(extra_args=("--feature-gates=EventedPLEG=true",))
    )
    del clock
    assert host.kubelet.status is Status.FAILED
    assert (
        "failed to set feature gates from initial flags-based config: unrecognized feature gate: EventedPLEG"
        in (_log(host))
    )


def test_drop_in_without_api_version_stops_the_kubelet(tmp_path: Path) -> None:
    host, clock = _host(tmp_path, profiles.kubeadm_containerd())
    _write(host, f"{DROPIN_DIR}/20-bad.conf", "featureGates:\n  EventedPLEG: true\n")
    _restart_kubelet(host, clock)
    assert host.kubelet.status is Status.FAILED
    assert f"failed to load kubelet dropin file, path: {DROPIN_DIR}/20-bad.conf, no apiVersion/kind" in _log(
        host
    )


def test_config_dir_on_129_needs_the_alpha_env_var(tmp_path: Path) -> None:
    host, _ = _host(tmp_path, profiles.kubelet_129().with_(unit_environment={}))
    assert host.kubelet.status is Status.FAILED
    assert "KUBELET_CONFIG_DROPIN_DIR_ALPHA" in _log(host)


def test_help_lists_the_gate_in_the_feature_gate_format(tmp_path: Path) -> None:
    host, _ = _host(tmp_path, profiles.kubeadm_containerd())
    assert "EventedPLEG=true|false (ALPHA - default=false)" in host.run(["/usr/bin/kubelet", "--help"]).stdout
    old, _ = _host(tmp_path / "old", profiles.kubelet_125())
    assert "EventedPLEG" not in old.run(["/usr/bin/kubelet", "--help"]).stdout
    beta, _ = _host(tmp_path / "beta", profiles.kubeadm_containerd().with_(kubelet_version="v1.28.3"))
    assert "EventedPLEG=true|false (BETA - default=false)" in beta.run(["kubelet", "--help"]).stdout


def test_crio_parses_every_file_whatever_its_name(tmp_path: Path) -> None:
    host, _ = _host(tmp_path, profiles.crio())
    _write(host, "/etc/crio/crio.conf.d/zz-leftover.bak", "[crio.runtime]\nenable_pod_events = true\n")
    assert host.run(["systemctl", "restart", "crio"]).ok
    assert "enable_pod_events = true" in host.run(["crio", "status", "config"]).stdout


def test_crio_refuses_to_start_on_invalid_toml(tmp_path: Path) -> None:
    host, _ = _host(tmp_path, profiles.crio())
    _write(host, "/etc/crio/crio.conf.d/50-docs.txt", "[crio.runtime]\nenable_pod_events: true\n")
    result = host.run(["systemctl", "restart", "crio"])
    assert result.returncode == 1
    assert "Job for crio.service failed" in result.stderr
    assert host.run(["systemctl", "is-active", "crio"]).stdout.strip() == "failed"
    assert "level=fatal" in "\n".join(host.journal("crio", EPOCH))  # logged now, at EPOCH


def test_crio_config_prints_the_default_commented(tmp_path: Path) -> None:
    host, _ = _host(tmp_path, profiles.crio())
    assert "# enable_pod_events = false" in host.run(["crio", "config"]).stdout
    old, _ = _host(tmp_path / "old", profiles.crio().with_(runtime="cri-o://1.27.4"))
    assert old.run(["crio", "status", "config"]).returncode == 1  # `crio status` arrived in 1.28
    assert old.run(["crio-status", "config"]).ok


def test_relist_is_300s_while_evented_and_1s_otherwise(tmp_path: Path) -> None:
    host, clock = _host(tmp_path, profiles.kubeadm_containerd())
    generic = _metrics(host)
    count = generic.value("kubelet_pleg_relist_interval_seconds_count")
    assert count is not None and count > 3000  # an hour of uptime at 1 s
    _write(host, f"{DROPIN_DIR}/99-on.conf", HEADER + "featureGates:\n  EventedPLEG: true\n")
    _restart_kubelet(host, clock, wait=3600)
    evented = _metrics(host)
    assert evented.value("kubelet_pleg_relist_interval_seconds_count") == 11  # (3600 - 2 s startup) / 300
    assert evented.value("kubelet_pleg_relist_interval_seconds_sum") == 3300
    assert evented.value("kubernetes_feature_enabled", name="EventedPLEG", stage="ALPHA") == 1
    assert evented.value("kubelet_evented_pleg_connection_success_count") == 1


def test_137_keeps_the_one_second_relist(tmp_path: Path) -> None:
    host, clock = _host(tmp_path, profiles.kubelet_137())
    _write(host, f"{DROPIN_DIR}/99-on.conf", HEADER + "featureGates:\n  EventedPLEG: true\n")
    _restart_kubelet(host, clock, wait=62)
    assert _metrics(host).value("kubelet_pleg_relist_interval_seconds_count") == 60


def test_runtime_restart_makes_the_kubelet_fall_back_until_it_restarts(tmp_path: Path) -> None:
    host, clock = _host(tmp_path, profiles.kubeadm_containerd().with_(verbosity=4))
    _write(host, f"{DROPIN_DIR}/99-on.conf", HEADER + "featureGates:\n  EventedPLEG: true\n")
    _restart_kubelet(host, clock)
    assert _stream(host) is Stream.CONNECTED
    host.restart_runtime()
    clock.advance(100)
    host.advance()

    metrics = _metrics(host)
    assert metrics.value("kubelet_evented_pleg_connection_error_count") == 5
    assert _stream(host) is Stream.FALLEN_BACK
    log = _log(host)
    assert log.count("Evented PLEG: Failed to get container events, retrying") == 5
    assert "Fall back to Generic PLEG relisting since Evented PLEG is not working" in log
    # The fallback is one-way: another runtime restart changes nothing, a kubelet restart reconnects.
    host.restart_runtime()
    assert _metrics(host).value("kubelet_evented_pleg_connection_error_count") == 5
    _restart_kubelet(host, clock)
    assert host.kubelet.stream is Stream.CONNECTED


@pytest.mark.parametrize(
    ("profile", "line"),
    [
        (profiles.containerd_16(), "method GetContainerEvents not implemented"),
        (profiles.crio(), '"container events stream is closed" err="EOF"'),  # enable_pod_events unset
    ],
)
def test_runtime_without_events_makes_the_kubelet_fall_back(
    tmp_path: Path, profile: HostProfile, line: str
) -> None:
    host, clock = _host(tmp_path, profile.with_(verbosity=0))
    _write(host, f"{DROPIN_DIR}/99-on.conf", HEADER + "featureGates:\n  EventedPLEG: true\n")
    _restart_kubelet(host, clock)
    metrics = _metrics(host)
    assert metrics.value("kubelet_evented_pleg_connection_error_count") == 5
    assert metrics.value("kubelet_evented_pleg_connection_success_count") == 5  # the stream opens, then fails
    log = _log(host)
    assert log.count(line) == 5  # error level: visible at --v=0
    assert "Fall back to Generic PLEG" not in log  # V(4): not at --v=0


def test_a_thousand_hosts_are_cheap(tmp_path: Path) -> None:
    clock = FakeClock()
    hosts = [SimHost(tmp_path / f"h{i}", profiles.kubeadm_containerd(), clock) for i in range(200)]
    clock.advance(86400)
    assert all(h.node_ready() for h in hosts)
    assert all(len(h.logs.read("kubelet", EPOCH)) < 50 for h in hosts)


@pytest.mark.parametrize("name", [n for n, p in profiles.PROFILES.items() if p.distribution is None])
def test_systemd_loads_the_command_line_each_profile_runs(tmp_path: Path, name: str) -> None:
    profile = profiles.PROFILES[name]
    host, _ = _host(tmp_path, profile)
    loaded = systemd.load(host.root, "kubelet")
    assert loaded is not None and loaded.argv == profile.argv()


def test_a_unit_drop_in_takes_effect_only_after_daemon_reload(tmp_path: Path) -> None:
    host, clock = _host(tmp_path, profiles.kubeadm_default())
    argv = host.kubelet.argv
    _write(
        host,
        "/etc/systemd/system/kubelet.service.d/50-v.conf",
        '[Service]\nEnvironment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml --v=4"\n',
    )
    _restart_kubelet(host, clock)
    assert host.kubelet.argv == argv  # systemd still runs the definition it loaded
    assert host.run(["systemctl", "daemon-reload"]).ok
    _restart_kubelet(host, clock)
    assert host.kubelet.argv == (*argv[:4], "--v=4")
