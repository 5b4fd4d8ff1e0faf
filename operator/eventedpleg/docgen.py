"""Generate the README's configuration reference (from the NodeConfig models) and compatibility matrix
(from core/compat.py's rows), between BEGIN/END GENERATED markers. `--check` fails on drift.

    python -m eventedpleg.docgen            # rewrite the sections in README.md
    python -m eventedpleg.docgen --check    # CI: exit 1 when README.md is out of date
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any, get_args

from pydantic import BaseModel

from eventedpleg.core import compat
from eventedpleg.models.nodeconfig import LabelSelector, NodeConfigSpec

README = Path(__file__).resolve().parents[2] / "README.md"
COMPATIBILITY = "docs/compatibility.md"
# Its sections by number, as the code cites them ("docs/compatibility.md §2"), and their stable anchors.
SECTION_ANCHORS = {
    "0": "matrix",
    "1": "gate-history",
    "2": "runtimes",
    "3": "kubelet-config",
    "4": "verification",
    "5": "known-bugs",
    "6": "cri-api",
    "7": "measured",
}
_CITATION = re.compile(re.escape(COMPATIBILITY) + r" (§\d(?:, §\d)*)")


def _triple(t: compat.Triple) -> str:
    return "∞" if t == compat.INFINITY else ".".join(map(str, t))


def link_sections(source: str) -> str:
    """`docs/compatibility.md §1, §5` -> `compatibility [§1](docs/compatibility.md#gate-history), [§5](…)`."""

    def links(match: re.Match[str]) -> str:
        numbers = [part.strip().lstrip("§") for part in match[1].split(",")]
        return "compatibility " + ", ".join(f"[§{n}]({COMPATIBILITY}#{SECTION_ANCHORS[n]})" for n in numbers)

    return _CITATION.sub(links, source)


def matrix_table() -> str:
    lines = ["| component | versions | verdict | why | source |", "|---|---|---|---|---|"]
    for rows in (compat.KUBELET_ROWS, compat.CONTAINERD_ROWS, compat.CRIO_ROWS):
        for row in rows:
            if row.low == (0, 0, 0):
                span = f"< {_triple(row.high)}"
            elif row.high == compat.INFINITY:
                span = f"≥ {_triple(row.low)}"
            else:
                span = f"{_triple(row.low)} to < {_triple(row.high)}"
            why = row.reason.replace(" {v}", "").replace("{v}", "").replace("|", "/")
            level = (
                f"{row.level} with `spec.guard` on (the default: wedges healed, a node that keeps wedging "
                "rolled back); Risky with it off"
                if row.unguarded
                else row.level
            )
            lines.append(f"| {row.component} | {span} | {level} | {why} | {link_sections(row.source)} |")
    return "\n".join(lines)


def _type(schema: dict[str, Any], defs: dict[str, Any]) -> str:
    if "$ref" in schema:
        return _type(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
    if "anyOf" in schema:
        return " or ".join(_type(s, defs) for s in schema["anyOf"] if s.get("type") != "null")
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    if schema.get("type") == "array":
        return f"list of {_type(schema.get('items', {}), defs)}"
    return str(schema.get("type", "object"))


def _default(value: Any) -> str:
    if value is None:
        return "absent"
    if isinstance(value, BaseModel):
        return "`{}`"
    if hasattr(value, "value"):
        value = value.value
    if isinstance(value, tuple):  # a list field kept hashable (DrainSpec.rules) reads as the API has it
        value = list(value)
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return '`""`' if value == "" else f"`{value}`"


def _fields(model: type[BaseModel], prefix: str) -> list[tuple[str, str, str, str]]:
    """(path, type, default, description) for every leaf field, nested models flattened."""
    schema = model.model_json_schema(by_alias=True)
    defs = schema.get("$defs", {})
    out: list[tuple[str, str, str, str]] = []
    for name, field in model.model_fields.items():
        alias = field.alias or name
        path = f"{prefix}{alias}"
        annotation = field.annotation
        nested = isinstance(annotation, type) and issubclass(annotation, BaseModel)
        if nested and annotation is not LabelSelector:
            out += _fields(annotation, f"{path}.")  # type: ignore[arg-type]  # narrowed by `nested`
            continue
        prop = schema["properties"][alias]
        default = "required" if field.is_required() else _default(field.default)
        out.append((path, _type(prop, defs), default, field.description or ""))
        optional = _optional_model(annotation)
        if optional is not None:  # an object that is off when absent: its row, then its fields
            out += _fields(optional, f"{path}.")
    return out


def _optional_model(annotation: Any) -> type[BaseModel] | None:
    """X for an `X | None`, `list[X]` or `tuple[X, ...]` field whose X is a model."""
    args = [a for a in get_args(annotation) if a is not type(None) and a is not Ellipsis]
    if len(args) == 1 and isinstance(args[0], type) and issubclass(args[0], BaseModel):
        return args[0]
    return None


def reference_table() -> str:
    out = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for path, kind, default, doc in _fields(NodeConfigSpec, "spec."):
        out.append(f"| `{path}` | {kind} | {default} | {doc} |")
    return "\n".join(out)


SECTIONS = {"reference": reference_table, "matrix": matrix_table}


def regenerate(text: str) -> str:
    for name, make in SECTIONS.items():
        pattern = re.compile(
            rf"(<!-- BEGIN GENERATED: {name} .*?-->\n)(.*?)(<!-- END GENERATED: {name} -->)", re.S
        )
        found = pattern.search(text)
        if found is None:
            raise SystemExit(f"README.md lacks the GENERATED: {name} markers")
        text = text[: found.start(2)] + make() + "\n" + text[found.end(2) :]
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    current = README.read_text()
    wanted = regenerate(current)
    if args.check:
        if wanted != current:
            print("README.md generated sections are out of date: run `python -m eventedpleg.docgen`")
            return 1
        return 0
    if wanted != current:
        README.write_text(wanted)
        print("wrote README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
