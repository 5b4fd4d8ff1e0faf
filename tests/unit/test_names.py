"""One name per meaning: a public class (or type alias) name is defined in one module only, across the
production package and the lab, so `NodeView`, `Action` or `Runtime` means one thing wherever it is read."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SOURCES = Path(__file__).resolve().parents[2] / "operator"
PRODUCTION, LAB = SOURCES / "eventedpleg", SOURCES / "eventedpleg_lab"
# Names allowed in more than one module, each with the reason. Keep it empty unless a name really must repeat.
ALLOWED: dict[str, str] = {}


def _type_names(tree: ast.Module) -> list[str]:
    """Top-level public classes, and CapWords aliases such as `Action = Cordon | Drain` (not CONSTANTS)."""
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names.extend(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return [n for n in names if n[:1].isupper() and not n.isupper()]


def defined_twice(*packages: Path) -> dict[str, list[str]]:
    """Public type names defined in more than one module under the packages, with those modules."""
    where: dict[str, list[str]] = defaultdict(list)
    for package in packages:
        for path in sorted(package.rglob("*.py")):
            module = ".".join(path.relative_to(package.parent).with_suffix("").parts)
            for name in _type_names(ast.parse(path.read_text(encoding="utf-8"))):
                where[name].append(module)
    return {name: mods for name, mods in where.items() if len(mods) > 1 and name not in ALLOWED}


def test_each_public_type_name_is_defined_once_in_the_production_package() -> None:
    assert PRODUCTION.is_dir()
    assert defined_twice(PRODUCTION) == {}


def test_the_lab_reuses_no_production_type_name_and_repeats_none_of_its_own() -> None:
    assert LAB.is_dir()
    assert defined_twice(PRODUCTION, LAB) == {}


def test_the_check_sees_a_class_and_an_alias_defined_twice(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("class NodeView:\n    pass\n\nAction = int | str\n_Private = 1\nLIMIT = 3\n")
    (pkg / "sub" / "b.py").write_text("class NodeView:\n    pass\n\n\nclass _Private:\n    pass\n")
    (pkg / "c.py").write_text("from typing import Callable\nAction: type = int\nLIMIT = 4\n")
    assert defined_twice(pkg) == {"NodeView": ["pkg.a", "pkg.sub.b"], "Action": ["pkg.a", "pkg.c"]}
