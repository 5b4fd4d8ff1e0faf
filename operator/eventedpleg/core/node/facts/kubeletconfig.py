"""KubeletConfiguration files as the kubelet reads them (docs/compatibility.md §3, KEP-3983).

- Drop-ins: only `*.conf` files in `--config-dir`, walked in lexical order (subdirectories included); each
  needs apiVersion/kind; each is applied over the previous result as a JSON merge patch, so maps such as
  `featureGates` merge key by key.
- `--feature-gates` on the command line then wins for the keys it names.
- `AllAlpha=true` turns on every alpha gate that is not set explicitly (docs/compatibility.md §5,
  guardrail 9).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import yaml

from eventedpleg import constants as c

API_VERSION = "kubelet.config.k8s.io/v1beta1"
KIND = "KubeletConfiguration"
DROPIN_SUFFIX = ".conf"
ALL_ALPHA = "AllAlpha"


class KubeletConfigError(ValueError):
    """A config file the kubelet would refuse (the message says which and why)."""


def load(text: str, *, where: str) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise KubeletConfigError(f"{where}: not valid YAML/JSON: {exc}") from exc
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise KubeletConfigError(f"{where}: not a mapping")
    return doc


def load_dropin(text: str, *, where: str) -> dict[str, Any]:
    """The kubelet fails with `failed to load kubelet dropin file, path: …, no apiVersion/kind` (§3)."""
    doc = load(text, where=where)
    if doc.get("apiVersion") != API_VERSION or doc.get("kind") != KIND:
        raise KubeletConfigError(f"failed to load kubelet dropin file, path: {where}, no apiVersion/kind")
    return doc


def merge_patch(base: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (what mergeKubeletConfigurations applies per drop-in)."""
    if not isinstance(patch, dict):
        return patch
    out = dict(base) if isinstance(base, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def dropin_sort_key(relpath: str) -> tuple[str, ...]:
    """filepath.WalkDir order: entries sorted by name within each directory, depth first."""
    return PurePosixPath(relpath).parts


def kubelet_reads(relpath: str) -> bool:
    """Other suffixes are skipped (`Skipped file in drop-in directory (does not have .conf extension)`)."""
    return relpath.endswith(DROPIN_SUFFIX)


def ordered_dropins(files: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    return sorted((f for f in files if kubelet_reads(f[0])), key=lambda f: dropin_sort_key(f[0]))


def gates_of(doc: Mapping[str, Any]) -> dict[str, bool]:
    raw = doc.get("featureGates")
    if not isinstance(raw, dict):
        return {}
    return {str(k): bool(v) for k, v in raw.items() if isinstance(v, bool)}


@dataclass(frozen=True)
class GateSource:
    """Where a gate that matters to us is set: a file, a drop-in, or the command line."""

    where: str
    gate: str
    value: bool


def gate_sources(
    config: tuple[str, str] | None,
    dropins: Iterable[tuple[str, str]],
    cli_gates: Mapping[str, bool],
    *,
    skip: str | None = None,
) -> list[GateSource]:
    """Every place that sets EventedPLEG or AllAlpha, in the kubelet's precedence order (lowest first).

    `skip` is the relative path of our own drop-in (its absence is what we are predicting).
    Files that fail to parse are left out here (the plan refuses them separately).
    """
    found: list[GateSource] = []
    docs: list[tuple[str, Mapping[str, Any]]] = []
    if config is not None:
        with contextlib.suppress(KubeletConfigError):
            docs.append((config[0], load(config[1], where=config[0])))
    for rel, text in ordered_dropins(dropins):
        if rel == skip:
            continue
        try:
            docs.append((rel, load_dropin(text, where=rel)))
        except KubeletConfigError:
            continue
    for where, doc in docs:
        for gate, value in gates_of(doc).items():
            if gate in (c.FEATURE_GATE, ALL_ALPHA):
                found.append(GateSource(where, gate, value))
    for gate, value in cli_gates.items():
        if gate in (c.FEATURE_GATE, ALL_ALPHA):
            found.append(GateSource("--feature-gates", gate, value))
    return found


def effective_gate(sources: Iterable[GateSource]) -> bool:
    """EventedPLEG after precedence: the last explicit EventedPLEG wins, else AllAlpha, else off (default)."""
    explicit: bool | None = None
    all_alpha = False
    for src in sources:
        if src.gate == c.FEATURE_GATE:
            explicit = src.value
        elif src.gate == ALL_ALPHA:
            all_alpha = src.value
    return explicit if explicit is not None else all_alpha


def merged(config: tuple[str, str] | None, dropins: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """The merged KubeletConfiguration (raises on a drop-in the kubelet would refuse)."""
    result: Any = load(config[1], where=config[0]) if config is not None else {}
    for rel, text in ordered_dropins(dropins):
        result = merge_patch(result, load_dropin(text, where=rel))
    return result if isinstance(result, dict) else {}


def config_gate(text: str, *, where: str) -> bool | None:
    """featureGates.EventedPLEG in a --config file, None when absent."""
    return gates_of(load(text, where=where)).get(c.FEATURE_GATE)


def edit_config_gate(text: str, value: bool | None, *, where: str) -> str:
    """Set (or with None remove) featureGates.EventedPLEG in a --config file (kubeletConfig: EditConfigFile).

    The file is re-serialised; the exact original bytes are kept in the agent's backup for rollback.
    """
    doc = load(text, where=where)
    gates = dict(doc.get("featureGates") or {})
    if value is None:
        gates.pop(c.FEATURE_GATE, None)
    else:
        gates[c.FEATURE_GATE] = value
    if gates:
        doc["featureGates"] = gates
    else:
        doc.pop("featureGates", None)
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
