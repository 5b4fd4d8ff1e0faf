"""The chart's README.md, generated from values.yaml's `# --` comments (the helm-docs convention: a
`# -- description` comment, continued on the `#` lines under it, documents the key that follows; a
documented map is one row, its keys are not listed again) and Chart.yaml.

    python -m eventedpleg_lab.chartdocs           # rewrite manifests/evented-pleg-operator/README.md
    python -m eventedpleg_lab.chartdocs --check   # exit 1 when it is stale or a value has no description

helm-docs itself is a Go program; no PyPI package reads this convention, and this is the small part of it
the chart uses."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parents[2] / "manifests" / "evented-pleg-operator"
KEY = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z0-9_.-]+)\s*:(?:\s|$)")
DOC = re.compile(r"^(?P<indent>\s*)#\s--\s?(?P<text>.*)$")
MORE = re.compile(r"^(?P<indent>\s*)#\s?(?P<text>.*)$")


@dataclass(frozen=True)
class ValueRow:
    key: str  # dotted path
    value: Any
    description: str

    @property
    def kind(self) -> str:
        kinds = {bool: "bool", int: "int", float: "float", str: "string", list: "list", dict: "object"}
        return kinds.get(type(self.value), "null" if self.value is None else type(self.value).__name__)

    def cells(self) -> tuple[str, ...]:
        default = json.dumps(self.value, separators=(",", ":"))
        return (f"`{self.key}`", self.kind, f"`{default}`", self.description.replace("|", "\\|"))


def described(values_text: str) -> dict[str, str]:
    """Dotted key -> its `# --` description, in file order."""
    docs: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    pending: list[str] | None = None
    for line in values_text.splitlines():
        if not line.strip():
            pending = None
            continue
        if match := DOC.match(line):
            pending = [match["text"].strip()]
            continue
        if line.lstrip().startswith("#"):
            more = MORE.match(line)
            if pending is not None and more is not None:
                pending.append(more["text"].strip())
            else:
                pending = None
            continue
        if (match := KEY.match(line)) is None:
            continue  # a list item or a flow value's continuation
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match["key"]))
        if pending is not None:
            docs[".".join(key for _, key in stack)] = " ".join(part for part in pending if part)
        pending = None
    return docs


def _leaves(value: Any, prefix: str) -> list[str]:
    if isinstance(value, dict) and value:
        return [leaf for key, child in value.items() for leaf in _leaves(child, f"{prefix}{key}.")]
    return [prefix.rstrip(".")]


def _lookup(values: dict[str, Any], dotted: str) -> Any:
    node: Any = values
    for part in dotted.split("."):
        node = node[part]
    return node


def rows(values_text: str) -> tuple[list[ValueRow], list[str]]:
    """The documented keys, and the leaves no documented key covers."""
    values = yaml.safe_load(values_text)
    docs = described(values_text)
    table = [ValueRow(key, _lookup(values, key), text) for key, text in docs.items()]
    missing = [
        leaf
        for leaf in _leaves(values, "")
        if not any(leaf == key or leaf.startswith(key + ".") for key in docs)
    ]
    return table, missing


def readme(chart: Path = CHART) -> tuple[str, list[str]]:
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    table, missing = rows((chart / "values.yaml").read_text())
    lines = [
        "<!-- Generated from values.yaml and Chart.yaml by `python -m eventedpleg_lab.chartdocs`; "
        "do not edit. -->",
        f"# {meta['name']}",
        "",
        str(meta["description"]),
        "",
        f"Version {meta['version']}, app version {meta['appVersion']}, Kubernetes {meta['kubeVersion']}.",
        "",
        "The project's README explains NodeConfigs, the rollout and its safety rules; docs/runbooks.md "
        "explains each alert of `prometheusRule`. values.schema.json validates every value below.",
        "",
        "## Values",
        "",
        "| Key | Type | Default | Description |",
        "|-----|------|---------|-------------|",
        *("| " + " | ".join(row.cells()) + " |" for row in table),
    ]
    return "\n".join(lines) + "\n", missing


def main(argv: list[str]) -> int:
    text, missing = readme()
    target = CHART / "README.md"
    if missing:
        print(f"values.yaml: no `# --` description for {', '.join(missing)}", file=sys.stderr)
        return 1
    if "--check" in argv:
        if not target.is_file() or target.read_text() != text:
            print(f"{target}: stale; run python -m eventedpleg_lab.chartdocs", file=sys.stderr)
            return 1
        return 0
    target.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
