"""No branch of the product reads English: a decision never depends on the wording of a reason, message or
note. Code branches on typed fields (protocol.Cause, ConditionReason, NodeState), and the human text stays
beside them for people. Rewording a message must never silently change what the product does.

The check is on the source: a prefix, suffix or substring test on anything named like human text (reason,
message, why, note, detail), or an equality with a string literal that holds a space (a phrase, not a
code such as a Kubernetes condition reason `Unschedulable`), anywhere under operator/.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "operator"
HUMAN = re.compile(r"(reason|message|\bwhy\b|\bnote\b|detail)", re.IGNORECASE)
SUBSTRING = {"startswith", "endswith", "find", "index", "count"}


def _phrase(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and " " in node.value.strip()


def _human(node: ast.expr) -> bool:
    return bool(HUMAN.search(ast.unparse(node)))


def _substring_test(node: ast.AST) -> bool:
    """`reason.startswith(...)` and the like."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in SUBSTRING
        and _human(node.func.value)
    )


def _pairs(node: ast.Compare) -> list[tuple[ast.cmpop, ast.expr, ast.expr]]:
    sides = [node.left, *node.comparators]
    return [(op, sides[i], sides[i + 1]) for i, op in enumerate(node.ops)]


def _reads(op: ast.cmpop, left: ast.expr, right: ast.expr) -> bool:
    """A literal looked for inside human text, or human text equal to a phrase."""
    if isinstance(op, (ast.In, ast.NotIn)):
        return _human(right) and isinstance(left, ast.Constant)
    if isinstance(op, (ast.Eq, ast.NotEq)):
        return (_human(left) and _phrase(right)) or (_human(right) and _phrase(left))
    return False


def english_branches(source: str, where: str) -> list[str]:
    """Every place in `source` that decides on the wording of human text."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if _substring_test(node) or (
            isinstance(node, ast.Compare) and any(_reads(op, a, b) for op, a, b in _pairs(node))
        ):
            found.append(f"{where}:{getattr(node, 'lineno', 0)}: {ast.unparse(node)}")
    return found


def test_the_check_finds_each_kind_of_english_branch() -> None:
    bad = (
        "if note.reason.startswith(NO_AGENT): pass\n"
        "if 'not Ready' in marks.reason: pass\n"
        "if status['message'] == 'workload not Ready': pass\n"
    )
    assert len(english_branches(bad, "x.py")) == 3
    good = (
        "if note.cause is Cause.NO_AGENT: pass\n"
        "if cond.get('reason') == 'Unschedulable': pass\n"
        "if stalled.reason == ConditionReason.BUDGET_HELD_BY_OTHER_NODES: pass\n"
    )
    assert english_branches(good, "x.py") == []


def test_no_branch_reads_english() -> None:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        found += english_branches(path.read_text(), str(path.relative_to(ROOT)))
    assert found == [], "decisions on the wording of human text (branch on a typed cause):\n" + "\n".join(
        found
    )
