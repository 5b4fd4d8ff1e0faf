"""Rendered drop-ins: golden files, parsed back with real YAML/TOML parsers, stable content hash."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pytest
import tomlkit
import yaml

from eventedpleg import constants as c
from eventedpleg.core import render, runtimes

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "render"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"

CASES = [
    ("kubelet-enabled.conf", render.KUBELET_TEMPLATE, True),
    ("kubelet-disabled.conf", render.KUBELET_TEMPLATE, False),
    ("crio-enabled.conf", runtimes.CRIO_TEMPLATE, True),
    ("crio-disabled.conf", runtimes.CRIO_TEMPLATE, False),
]


@pytest.mark.parametrize(("golden", "template", "enabled"), CASES)
def test_render_matches_golden(golden: str, template: str, enabled: bool) -> None:
    text = render.render_file(template, enabled=enabled, owner="cluster")
    path = GOLDEN / golden
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{golden} changed; rerun with UPDATE_GOLDEN=1 if intended"


@pytest.mark.parametrize("enabled", [True, False])
def test_kubelet_dropin_is_a_kubelet_configuration(enabled: bool) -> None:
    doc = yaml.safe_load(render.render_file(render.KUBELET_TEMPLATE, enabled=enabled, owner="x"))
    # The kubelet refuses a drop-in without apiVersion/kind (docs/compatibility.md §3).
    assert doc == {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "featureGates": {"EventedPLEG": enabled},
    }


@pytest.mark.parametrize("enabled", [True, False])
def test_crio_dropin_is_valid_toml(enabled: bool) -> None:
    text = render.render_file(runtimes.CRIO_TEMPLATE, enabled=enabled, owner="x")
    assert tomllib.loads(text) == {"crio": {"runtime": {"enable_pod_events": enabled}}}
    assert tomlkit.parse(text).unwrap() == tomllib.loads(text)
    assert "enable_pod_events:" not in text  # the docs' invalid-TOML form (docs/compatibility.md §2)


def test_docs_snippet_form_is_rejected() -> None:
    with pytest.raises(render.RenderError, match="not valid TOML"):
        render.validate(runtimes.CRIO_TEMPLATE, "[crio.runtime]\nenable_pod_events: true\n", enabled=True)


def test_validate_rejects_a_file_that_says_something_else() -> None:
    with pytest.raises(render.RenderError):
        render.validate(render.KUBELET_TEMPLATE, "apiVersion: v1\nkind: Pod\n", enabled=True)
    with pytest.raises(render.RenderError):
        render.validate(runtimes.CRIO_TEMPLATE, "[crio.runtime]\nenable_pod_events = false\n", enabled=True)


def test_enabled_set_ships_both_files_and_disabled_ships_none() -> None:
    on = render.render(enabled=True, owner="cluster", kubelet_config_mode="DropInOnly")
    off = render.render(enabled=False, owner="cluster", kubelet_config_mode="DropInOnly")
    assert {key for key, _ in on.files} == {c.CM_KEY_KUBELET, c.CM_KEY_CRIO}
    assert off.files == ()
    assert on.configmap_name == c.CONFIGMAP_PREFIX + on.hash


def test_hash_is_stable_and_sensitive() -> None:
    def h(**kw: object) -> str:
        args = {"enabled": True, "owner": "cluster", "kubelet_config_mode": "DropInOnly", **kw}
        return render.render(**args).hash  # type: ignore[arg-type]

    assert h() == h()
    assert len({h(), h(enabled=False), h(owner="other"), h(kubelet_config_mode="EditConfigFile")}) == 4
    assert render.content_hash({"a": "1", "b": "2"}) == render.content_hash({"b": "2", "a": "1"})
    assert render.content_hash({"a": "1"}) != render.content_hash({"a": "1 "})


def test_configmap_round_trip() -> None:
    rendered = render.render(enabled=True, owner="cluster", kubelet_config_mode="DropInOnly")
    back = render.from_configmap(rendered.configmap_data())
    assert back == rendered


def test_tampered_configmap_is_rejected() -> None:
    data = render.render(enabled=True, owner="cluster", kubelet_config_mode="DropInOnly").configmap_data()
    data[c.CM_KEY_CRIO] = "[crio.runtime]\nenable_pod_events: true\n"
    with pytest.raises(render.RenderError):
        render.from_configmap(data)
    with pytest.raises(render.RenderError, match="malformed"):
        render.from_configmap({c.CM_KEY_MANIFEST: "{"})
