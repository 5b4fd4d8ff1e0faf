"""KubeletConfiguration merging as the kubelet does it (docs/compatibility.md §3, KEP-3983)."""

from __future__ import annotations

import pytest
import yaml

from eventedpleg.core.node.facts import kubeletconfig as kc

HEADER = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"


def test_merge_patch_merges_maps_and_replaces_lists() -> None:
    base = {"featureGates": {"A": True}, "clusterDNS": ["1.1.1.1"], "port": 10250}
    patch = {"featureGates": {"B": False}, "clusterDNS": ["8.8.8.8"], "port": None}
    assert kc.merge_patch(base, patch) == {"featureGates": {"A": True, "B": False}, "clusterDNS": ["8.8.8.8"]}


def test_only_conf_files_in_walk_order() -> None:
    files = [
        ("b.conf", ""),
        ("a.conf", ""),
        ("sub/0.conf", ""),
        ("README", ""),
        ("z.conf.bak", ""),
        ("10.conf", ""),
    ]
    assert [name for name, _ in kc.ordered_dropins(files)] == ["10.conf", "a.conf", "b.conf", "sub/0.conf"]


def test_drop_in_needs_api_version_and_kind() -> None:
    with pytest.raises(kc.KubeletConfigError, match="no apiVersion/kind"):
        kc.load_dropin("featureGates: {EventedPLEG: true}\n", where="/d/x.conf")
    assert kc.load_dropin(HEADER, where="/d/x.conf")["kind"] == "KubeletConfiguration"


def test_docs_example_merge() -> None:
    # kubernetes.io "kubelet configuration merging": featureGates keys from several files survive.
    config = ("/var/lib/kubelet/config.yaml", HEADER + "featureGates:\n  A: true\nport: 20250\n")
    dropins = [
        ("20-b.conf", HEADER + "featureGates:\n  B: true\n"),
        ("10-a.conf", HEADER + "port: 10250\n"),
    ]
    merged = kc.merged(config, dropins)
    assert merged["featureGates"] == {"A": True, "B": True}
    assert merged["port"] == 10250


@pytest.mark.parametrize(
    ("config", "dropins", "cli", "on"),
    [
        ("", [], {}, False),
        ("featureGates: {EventedPLEG: true}", [], {}, True),
        (
            "featureGates: {EventedPLEG: true}",
            [("99.conf", HEADER + "featureGates: {EventedPLEG: false}")],
            {},
            False,
        ),
        (
            "",
            [("99.conf", HEADER + "featureGates: {EventedPLEG: true}")],
            {"EventedPLEG": False},
            False,
        ),  # CLI wins
        ("featureGates: {AllAlpha: true}", [], {}, True),  # docs/compatibility.md §5 guardrail 9
        ("featureGates: {AllAlpha: true, EventedPLEG: false}", [], {}, False),
    ],
)
def test_effective_gate(config: str, dropins: list[tuple[str, str]], cli: dict[str, bool], on: bool) -> None:
    sources = kc.gate_sources(("/c", HEADER + config), dropins, cli)
    assert kc.effective_gate(sources) is on


def test_edit_config_gate_round_trip() -> None:
    text = HEADER + "cgroupDriver: systemd\nfeatureGates:\n  Foo: true\n"
    on = kc.edit_config_gate(text, True, where="/c")
    assert yaml.safe_load(on)["featureGates"] == {"Foo": True, "EventedPLEG": True}
    assert kc.config_gate(on, where="/c") is True
    off = kc.edit_config_gate(on, None, where="/c")
    assert yaml.safe_load(off) == yaml.safe_load(text)
    bare = kc.edit_config_gate(kc.edit_config_gate(HEADER, True, where="/c"), None, where="/c")
    assert "featureGates" not in yaml.safe_load(bare)
