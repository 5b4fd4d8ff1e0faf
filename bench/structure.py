"""The product's structure per folder: modules, internal imports and import depth.

    python bench/structure.py [ROOT]          # ROOT defaults to operator/eventedpleg of this checkout
    git worktree add /tmp/before REV && python bench/structure.py /tmp/before/operator/eventedpleg

For every package (a folder with an __init__.py): how many modules it holds (__init__ not counted), how many
import edges run between its own modules, and its depth: the longest chain of such imports, in modules (a
folder whose modules import nothing of each other has depth 1). Imports are read with `ast`: nothing runs.
"""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path


def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, name: str, known: set[str]) -> set[str]:
    """The modules of `known` that the module at `path` imports (absolute and relative imports)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {m for m in found if m in known and m != name}


def main(argv: list[str]) -> int:
    default = Path(__file__).parent.parent / "operator" / "eventedpleg"
    root = Path(argv[1] if len(argv) > 1 else default).resolve()
    files = {module_name(root, p): p for p in sorted(root.rglob("*.py"))}
    edges = {name: imported(path, name, set(files)) for name, path in files.items()}
    packages = sorted({name.rpartition(".")[0] for name, p in files.items() if p.name != "__init__.py"})
    print(f"{'package':<34} {'modules':>7} {'internal imports':>16} {'depth':>5}")
    for package in packages:
        members = {n for n, p in files.items() if n.rpartition(".")[0] == package and p.name != "__init__.py"}
        inside = {n: edges[n] & members for n in members}

        @cache
        def depth(name: str, inside: dict[str, set[str]] = inside) -> int:
            return 1 + max((depth(m) for m in inside[name]), default=0)

        total = sum(len(v) for v in inside.values())
        print(f"{package:<34} {len(members):>7} {total:>16} {max(map(depth, members)):>5}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
