"""The Examples section of a command's `--help` (a click epilog): commands a person runs, each with a
comment saying what it does. tests/unit/cli/test_help_examples.py checks that every command has one and that
each example parses as that command's own options and arguments."""

from __future__ import annotations


def examples(*pairs: tuple[str, str], before: str = "") -> str:
    """The epilog: `before` (an epilog of its own), then one `# comment` and one command line per pair.
    "\\b" keeps click from rewrapping the lines."""
    lines = ["\b", "Examples:"]
    for comment, command in pairs:
        lines += [f"  # {comment}", f"  {command}"]
    section = "\n".join(lines)
    return f"{before}\n\n{section}" if before else section
