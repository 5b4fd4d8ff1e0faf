"""Render the chart with the real helm (built from the Go module proxy by eventedpleg_lab.localcluster)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from eventedpleg_lab.localcluster import build, debtools

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "manifests" / "evented-pleg-operator"
RELEASE = "epo"
NAMESPACE = "evented-pleg-system"

Doc = dict[str, Any]


def helm_path() -> str:
    found = build.locate("helm")
    if found is None:
        build.ensure(("helm",))
        found = build.locate("helm")
    assert found is not None
    return str(found)


def helm_env(home: Path | None = None) -> dict[str, str]:
    """helm's cache/config/data under `home` (a temp dir) rather than the user's ~/.cache and ~/.config."""
    env = dict(os.environ)
    if home is not None:
        for var, sub in (
            ("HELM_CACHE_HOME", "cache"),
            ("HELM_CONFIG_HOME", "config"),
            ("HELM_DATA_HOME", "data"),
        ):
            env[var] = str(home / sub)
    return env


def helm(
    *args: str, env: dict[str, str] | None = None, check: bool = False
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [helm_path(), *args], capture_output=True, text=True, check=check, timeout=300, env=env
    )


def set_json_args(values: dict[str, Any]) -> list[str]:
    """`--set-json key=<json>` per top-level dotted key: the values arrive typed, exactly as given."""
    args: list[str] = []
    for key, value in values.items():
        args += ["--set-json", f"{key}={json.dumps(value)}"]
    return args


def template(
    values: dict[str, Any] | None = None,
    *,
    namespace: str = NAMESPACE,
    extra: Sequence[str] = (),
    chart: Path = CHART,
) -> subprocess.CompletedProcess[str]:
    """`helm template` of the tree's chart, or of `chart` (a directory or a package)."""
    return helm("template", RELEASE, str(chart), "-n", namespace, *set_json_args(values or {}), *extra)


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys (PyYAML keeps the last one silently; the API server's
    strict decoding rejects the object)."""


def _no_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def parse(text: str) -> list[Doc]:
    return [doc for doc in yaml.load_all(text, Loader=_StrictLoader) if doc]


@dataclass(frozen=True)
class Rendered:
    text: str
    docs: list[Doc]

    def find(self, kind: str, name: str | None = None) -> Doc:
        matches = self.all(kind, name)
        assert len(matches) == 1, f"{kind}/{name}: {len(matches)} objects"
        return matches[0]

    def all(self, kind: str, name: str | None = None) -> list[Doc]:
        return [d for d in self.docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]

    def kinds(self) -> list[str]:
        return sorted(f"{d['kind']}/{d['metadata']['name']}" for d in self.docs)


def render(
    values: dict[str, Any] | None = None, *, namespace: str = NAMESPACE, chart: Path = CHART
) -> Rendered:
    done = template(values, namespace=namespace, chart=chart)
    assert done.returncode == 0, done.stderr
    return Rendered(done.stdout, parse(done.stdout))


def pod_specs(docs: Sequence[Doc]) -> Iterator[tuple[Doc, Doc]]:
    """(object, pod spec) for every object that makes pods."""
    for doc in docs:
        spec = doc.get("spec", {})
        if doc["kind"] == "Pod":
            yield doc, spec
        elif isinstance(spec.get("template"), dict):
            yield doc, spec["template"]["spec"]


def prometheus_binaries() -> tuple[Path, Path]:
    """(prometheus, promtool) from Debian's package (hack/test.sh fetches it); the test is skipped, saying
    why, only when the package cannot be fetched (no apt-get, no archive)."""
    try:
        return debtools.prometheus()
    except build.BuildError as exc:
        pytest.skip(f"Debian's prometheus package cannot be fetched: {exc}")
