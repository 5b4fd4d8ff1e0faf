"""tests/unit mirrors the packages it tests: a test of eventedpleg.core.rollout.drain lives in
tests/unit/core/rollout/drain/, one of eventedpleg_lab.lab in tests/unit/lab/lab/, and the root holds only the
tests of top-level modules (protocol, probeserver) and the cross-cutting ones (docs, names, workflows). Every
folder is a package, and no test file name repeats in any folder of any tier, so a test is found by its
name alone."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

UNIT = Path(__file__).resolve().parent
SOURCES = UNIT.parents[1] / "operator"
PRODUCTION, LAB = SOURCES / "eventedpleg", SOURCES / "eventedpleg_lab"


def _folders(unit: Path) -> list[Path]:
    return sorted(d for d in unit.rglob("*") if d.is_dir() and d.name != "__pycache__")


def unmirrored(unit: Path, production: Path, lab: Path) -> list[str]:
    """Folders under `unit` that are no package of the product (or of the lab, under lab/)."""
    out: list[str] = []
    for folder in _folders(unit):
        parts = folder.relative_to(unit).parts
        package = lab.joinpath(*parts[1:]) if parts[0] == "lab" else production.joinpath(*parts)
        if not (package / "__init__.py").is_file():
            out.append("/".join(parts))
    return out


def not_packages(unit: Path) -> list[str]:
    return [
        folder.relative_to(unit).as_posix()
        for folder in _folders(unit)
        if not (folder / "__init__.py").is_file()
    ]


def repeated_names(unit: Path) -> dict[str, list[str]]:
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(unit.rglob("test_*.py")):
        where[path.name].append(path.relative_to(unit).as_posix())
    return {name: paths for name, paths in where.items() if len(paths) > 1}


def test_every_folder_of_the_unit_tests_is_a_package_of_the_product_or_the_lab() -> None:
    assert (PRODUCTION / "__init__.py").is_file()
    assert (LAB / "__init__.py").is_file()
    assert _folders(UNIT)  # the tests are in folders at all
    assert unmirrored(UNIT, PRODUCTION, LAB) == []


def test_every_folder_of_the_unit_tests_is_a_python_package() -> None:
    assert not_packages(UNIT) == []


def test_no_test_file_name_repeats_in_another_folder_or_tier() -> None:
    assert repeated_names(UNIT.parent) == {}  # tests/: unit, agent, chart, cluster, lab, realnode, image


def test_the_checks_see_a_stray_folder_a_missing_package_and_a_repeated_name(tmp_path: Path) -> None:
    production, lab, unit = tmp_path / "eventedpleg", tmp_path / "eventedpleg_lab", tmp_path / "unit"
    for package in (production / "core" / "rollout", lab / "sim"):
        package.mkdir(parents=True)
        (package / "__init__.py").touch()
    (production / "core" / "__init__.py").touch()
    (lab / "__init__.py").touch()
    (production / "models").mkdir()  # a folder, not a package
    for folder in ("core/rollout", "lab/sim", "models", "lab/rollout", "core/__pycache__"):
        (unit / folder).mkdir(parents=True, exist_ok=True)
    for init in ("core", "core/rollout", "lab", "lab/sim", "lab/rollout"):
        (unit / init / "__init__.py").touch()
    (unit / "core" / "rollout" / "test_status.py").touch()
    (unit / "lab" / "sim" / "test_status.py").touch()
    (unit / "test_docs.py").touch()
    assert unmirrored(unit, production, lab) == ["lab/rollout", "models"]
    assert not_packages(unit) == ["models"]
    assert repeated_names(unit) == {
        "test_status.py": ["core/rollout/test_status.py", "lab/sim/test_status.py"]
    }


def test_no_package_of_the_product_holds_more_than_15_modules() -> None:
    """A folder a newcomer can read through: past 15 modules it wants splitting by what they hold."""
    packages = [init.parent for init in PRODUCTION.rglob("__init__.py")]
    counts = {
        package.relative_to(PRODUCTION.parent).as_posix(): len(
            [m for m in package.glob("*.py") if m.name != "__init__.py"]
        )
        for package in packages
    }
    assert counts["eventedpleg/controller"] > 1  # it reads the real tree
    assert {name: n for name, n in counts.items() if n > 15} == {}


def test_every_package_of_the_product_says_what_it_holds() -> None:
    """A newcomer opening a folder reads first what it holds: each package's docstring."""
    silent = [
        init.parent.relative_to(PRODUCTION.parent).as_posix()
        for init in sorted(PRODUCTION.rglob("__init__.py"))
        if not ast.get_docstring(ast.parse(init.read_text()))
    ]
    assert silent == []


# No function of core/ is longer than this: a decision that needs more is split by what it decides.
MAX_LINES = 60


def long_functions(root: Path) -> dict[str, int]:
    """Every function (method included) under `root` over MAX_LINES, by "path:name", with its length."""
    found: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_LINES:
                    found[f"{path.relative_to(root.parent).as_posix()}:{node.name}"] = lines
    return found


def test_no_function_of_the_core_is_over_60_lines() -> None:
    assert long_functions(PRODUCTION / "core") == {}, "split these by what they decide"


def test_the_size_check_sees_a_long_function(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES))  # with its def line: MAX_LINES + 1
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "m.py").write_text(f"def short():\n    pass\n\n\ndef long():\n{body}")
    assert long_functions(tmp_path / "core") == {"core/m.py:long": MAX_LINES + 1}
