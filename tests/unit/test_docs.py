"""The repository stands alone: every source the code and docs cite is in it or upstream."""

from __future__ import annotations

import re
from pathlib import Path

from eventedpleg import docgen

ROOT = Path(__file__).resolve().parents[2]
COMPATIBILITY = ROOT / docgen.COMPATIBILITY
CITED_IN = ("operator", "tests", "bench", "docs", "hack", "README.md")
# Spelled in two parts so this file does not match itself.
OUTSIDE = ("domain" + "-facts", "../" + "shared", "real-node-" + "recipe", "DESIGN" + ".md")


def _texts() -> list[tuple[Path, str]]:
    out: list[tuple[Path, str]] = []
    for name in CITED_IN:
        top = ROOT / name
        files = [top] if top.is_file() else sorted(top.rglob("*"))
        for path in files:
            if path.is_file() and path.suffix in {".py", ".md", ".sh", ".yaml", ".toml", ".tpl", ".json"}:
                out.append((path, path.read_text(errors="replace")))
    return out


def test_every_numbered_section_has_its_stable_anchor_and_heading() -> None:
    text = COMPATIBILITY.read_text()
    for number, anchor in docgen.SECTION_ANCHORS.items():
        assert re.search(rf'<a id="{anchor}"></a>\n\n## {number}\. ', text), (number, anchor)


def test_every_citation_of_the_compatibility_doc_names_a_section_it_has() -> None:
    cited: set[str] = set()
    for path, text in _texts():
        for match in re.finditer(r"docs/compatibility\.md (§\d(?:(?:, | and |-)§?\d)*)", text):
            numbers = set(re.findall(r"\d", match[1]))
            assert numbers <= set(docgen.SECTION_ANCHORS), f"{path}: {match[0]}"
            cited |= numbers
    assert {"1", "2", "3", "4", "5"} <= cited  # the citations were found at all


def test_no_file_cites_a_document_outside_the_repository() -> None:
    found = [f"{path.relative_to(ROOT)}: {n}" for path, text in _texts() for n in OUTSIDE if n in text]
    assert found == []


def test_the_readme_matrix_links_its_sources_to_the_compatibility_doc() -> None:
    linked = docgen.link_sections(f"k8s#1; {docgen.COMPATIBILITY} §1, §5")
    assert linked == (
        "k8s#1; compatibility [§1](docs/compatibility.md#gate-history), "
        "[§5](docs/compatibility.md#known-bugs)"
    )
