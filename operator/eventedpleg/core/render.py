"""Render the drop-ins a node gets, parse them back, and name the set by a content hash.

- kubelet: a KubeletConfiguration fragment for the `--config-dir` directory. The kubelet only reads `*.conf`
  files, needs apiVersion/kind in each, and JSON-merges maps key by key (docs/compatibility.md §3).
- CRI-O: `[crio.runtime] enable_pod_events = ...` as real TOML. The docs' `enable_pod_events: true` is
  invalid TOML and would stop crio from starting (docs/compatibility.md §2), so every file is parsed back
  here.
- containerd >= 1.7: nothing (it always emits events); `compat.RenderTargets` says so explicitly.

Which runtimes get which drop-in is their profile's (core.runtimes): every profile's drop-in is rendered
into the set, and each agent writes the one of its node's runtime.

Turning Evented PLEG off does not write `false` files: the rollout removes what we wrote and the node is
back to what its administrator configured (README: "Flip `eventedPleg: false`"). `render_file(..., False)`
exists for previews and tests.

Templates are package data (templates/ in the source tree, eventedpleg/templates in the wheel).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
import tomlkit
import yaml

from eventedpleg import constants as c
from eventedpleg.core import runtimes

KUBELET_TEMPLATE = "kubelet-dropin.conf.j2"
HASH_LENGTH = 12


class RenderError(ValueError):
    """A rendered file failed to parse back: it is never shipped."""


def _template_source(name: str) -> str:
    packaged = resources.files("eventedpleg").joinpath("templates", name)
    if packaged.is_file():
        return packaged.read_text()
    # Running from a source checkout (editable install): the top-level templates/ folder.
    return (Path(__file__).resolve().parents[3] / "templates" / name).read_text()


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FunctionLoader(_template_source),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # noqa: S701 - YAML/TOML config files, never HTML
        keep_trailing_newline=True,
    )


def render_file(template: str, *, enabled: bool, owner: str) -> str:
    text = _environment().get_template(template).render(enabled=enabled, owner=owner)
    validate(template, text, enabled=enabled)
    return text


def validate(template: str, text: str, *, enabled: bool) -> None:
    """Parse a rendered file with a real parser and check it says exactly what we meant."""
    if template == KUBELET_TEMPLATE:
        doc = yaml.safe_load(text)
        ok = (
            isinstance(doc, dict)
            and doc.get("apiVersion") == "kubelet.config.k8s.io/v1beta1"
            and doc.get("kind") == "KubeletConfiguration"
            and doc.get("featureGates") == {c.FEATURE_GATE: enabled}
            and set(doc) == {"apiVersion", "kind", "featureGates"}
        )
    elif dropin := next((d for d in runtimes.dropins() if d.template == template), None):
        try:
            doc = tomlkit.parse(text).unwrap()
        except tomlkit.exceptions.ParseError as exc:
            raise RenderError(f"{template} is not valid TOML: {exc}") from exc
        expected: object = enabled
        for key in reversed(dropin.setting):
            expected = {key: expected}
        ok = doc == expected
    else:
        raise RenderError(f"unknown template {template!r}")
    if not ok:
        raise RenderError(f"{template} rendered something other than EventedPLEG={enabled}:\n{text}")


@dataclass(frozen=True)
class RenderedConfig:
    """What the operator ships to agents in one immutable ConfigMap named after `hash`."""

    enabled: bool
    owner: str
    kubelet_config_mode: str
    files: tuple[tuple[str, str], ...]  # (ConfigMap key, content); empty when turning off
    hash: str

    @property
    def configmap_name(self) -> str:
        return c.CONFIGMAP_PREFIX + self.hash

    def file(self, key: str) -> str | None:
        return dict(self.files).get(key)

    def manifest(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "owner": self.owner,
            "kubeletConfig": self.kubelet_config_mode,
            "files": sorted(key for key, _ in self.files),
        }

    def configmap_data(self) -> dict[str, str]:
        return {c.CM_KEY_MANIFEST: json.dumps(self.manifest(), sort_keys=True), **dict(self.files)}


def content_hash(data: dict[str, str]) -> str:
    """Stable over key order; any byte of any file changes it."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:HASH_LENGTH]


def render(*, enabled: bool, owner: str, kubelet_config_mode: str) -> RenderedConfig:
    files: tuple[tuple[str, str], ...] = ()
    if enabled:
        files = tuple(
            sorted(
                [(c.CM_KEY_KUBELET, render_file(KUBELET_TEMPLATE, enabled=True, owner=owner))]
                + [
                    (d.configmap_key, render_file(d.template, enabled=True, owner=owner))
                    for d in runtimes.dropins()
                ]
            )
        )
    draft = RenderedConfig(enabled, owner, kubelet_config_mode, files, "")
    return RenderedConfig(enabled, owner, kubelet_config_mode, files, content_hash(draft.configmap_data()))


def from_configmap(data: dict[str, str]) -> RenderedConfig:
    """Rebuild (and re-check) a rendered set from its ConfigMap; the agent's side of `configmap_data`."""
    try:
        manifest = json.loads(data[c.CM_KEY_MANIFEST])
        enabled = bool(manifest["enabled"])
        files = tuple((key, data[key]) for key in manifest["files"])
        owner, mode = str(manifest["owner"]), str(manifest["kubeletConfig"])
    except (KeyError, TypeError, ValueError) as exc:
        raise RenderError(f"rendered-config ConfigMap is malformed: {exc!r}") from exc
    templates = {c.CM_KEY_KUBELET: KUBELET_TEMPLATE} | {
        d.configmap_key: d.template for d in runtimes.dropins()
    }
    for key, text in files:
        if key not in templates:
            raise RenderError(f"rendered-config ConfigMap has an unknown file {key!r}")
        validate(templates[key], text, enabled=enabled)
    draft = RenderedConfig(enabled, owner, mode, files, "")
    return RenderedConfig(enabled, owner, mode, files, content_hash(draft.configmap_data()))
