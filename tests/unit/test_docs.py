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


README = ROOT / "README.md"
BENCHMARKS = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / "bench" / "results"
COSTS_ANCHOR = "what-it-costs-to-run"
# A duration as a run measures it: "225 s", "9.8 min", "17 minutes", "2 h".
DURATION = re.compile(r"\b\d+(?:\.\d+)?\s?(?:s|sec|seconds?|min|minutes?|h|hours?)\b")
# What a result file of bench/ is named after (bench/rollout.py -> rollout-1000.json, ...).
RESULT_KINDS = ("rollout", "cpu", "latency", "enablecost", "outofservice", "takeover", "requestcost")
HISTORY = ("this session", "last session", "previous round", "earlier round", "git show")


def _section(text: str, heading: str) -> str:
    """The text under `heading` (a level-2 heading) up to the next level-2 heading."""
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def _without_fences(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def _table_rows(section: str) -> list[list[str]]:
    rows = [line for line in section.splitlines() if line.startswith("|")]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    return [row for row in cells if not all(set(c) <= {"-", " "} for c in row)]


def _readme_commands() -> list[str]:
    """The commands of the README's first screen: the lines of its code block that run a script."""
    block = re.search(r"```bash\n(.*?)```", _section(README.read_text(), "## Two commands"), re.S)
    assert block is not None
    return [line.strip() for line in block[1].splitlines() if line.startswith("bash ")]


def _minutes(text: str) -> list[float]:
    """Every "168 s", "~9 min", "8.9 min" in `text`, in minutes."""
    found = re.findall(r"(\d+(?:\.\d+)?)\s?(s|min)\b", text)
    return [float(n) / 60 if unit == "s" else float(n) for n, unit in found]


def test_the_readme_first_screen_quotes_only_the_costs_tables_timings_on_one_line_that_links_it() -> None:
    """The first screen says what each command costs in one line; each duration there rounds a figure of
    the costs table (the timings of particular runs live in docs/benchmarks.md), within 10 %."""
    screen = _section(README.read_text(), "## Two commands")
    assert f"(docs/benchmarks.md#{COSTS_ANCHOR})" in screen
    timed = [line for line in screen.splitlines() if DURATION.search(line)]
    assert len(timed) == 1 and f"(docs/benchmarks.md#{COSTS_ANCHOR})" in timed[0], timed
    rows = _table_rows(_section(BENCHMARKS.read_text(), "## What it costs to run"))
    measured = [m for row in rows[1:] for m in _minutes(row[2])]
    quoted = _minutes(timed[0])
    assert len(quoted) == len(DURATION.findall(timed[0])) >= 2  # one per command at least
    for minutes in quoted:
        assert any(abs(minutes - m) <= 0.1 * m for m in measured), (minutes, sorted(measured))
    assert re.search(rf'<a id="{COSTS_ANCHOR}"></a>\n\n## What it costs to run\n', BENCHMARKS.read_text())


def test_every_row_of_the_costs_table_names_a_readme_command_a_figure_and_how_it_was_measured() -> None:
    rows = _table_rows(_section(BENCHMARKS.read_text(), "## What it costs to run"))
    assert rows[0] == ["README command", "what", "figure", "measured how"]
    commands = _readme_commands()
    assert len(commands) >= 3  # demo, demo --lab, test.sh
    covered: set[str] = set()
    for row in rows[1:]:
        assert len(row) == 4, row
        command, _, figure, how = row
        assert re.fullmatch(r"`bash hack/[^`]+`", command), row
        covered.add(command.strip("`"))
        assert re.search(r"\d", figure), row
        assert re.search(r"`[^`]*(?:hack/|\.ci/run)[^`]*`", how), row  # the exact command that measured it
    assert set(commands) <= covered, set(commands) - covered


def test_every_result_file_cited_exists_and_every_result_file_is_cited() -> None:
    text = BENCHMARKS.read_text()
    prose = _without_fences(text)
    kinds = "|".join(RESULT_KINDS)
    cited = set(re.findall(rf"(?:bench/results/|`)((?:{kinds})[\w.-]*\.(?:json|png|md|txt))\b", prose))
    files = {path.name for path in RESULTS.iterdir() if path.is_file()}
    assert cited, "no result file cited at all"
    assert cited - files == set()  # a figure whose file is gone
    assert {name for name in files if name not in text} == set()  # a file no figure is read from


# Our own tracker's numbers mean nothing to a reader of the code or docs (upstream ones, k8s#N, are sources).
TRACKER = re.compile(r"\bissues?" + r" #?\d+", re.IGNORECASE)


def test_no_file_names_our_own_tracker_numbers() -> None:
    chart = [
        p for p in sorted((ROOT / "manifests").rglob("*")) if p.suffix in {".yaml", ".md", ".tpl", ".txt"}
    ]
    texts = [*_texts(), *((p, p.read_text()) for p in (*chart, ROOT / "CHANGELOG.md"))]
    found = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p, text in texts for m in TRACKER.finditer(text)]
    assert found == []
    assert TRACKER.search("(is" + "sue 33 item 3)") and not TRACKER.search("k8s#124704, containerd#7318")


def test_the_docs_state_the_present() -> None:
    texts = [README, *sorted((ROOT / "docs").glob("*.md"))]
    found = [f"{p.relative_to(ROOT)}: {h}" for p in texts for h in HISTORY if h in p.read_text().lower()]
    assert found == []


def test_the_break_glass_steps_name_the_files_the_agent_writes() -> None:
    """docs/runbooks.md "Our files on a node, removed by hand" names every path the agent may write (the
    host plan's and the agent's constants, not retyped) and restarts the runtime before the kubelet."""
    from eventedpleg import constants as c  # noqa: PLC0415
    from eventedpleg.agent import statestore  # noqa: PLC0415
    from eventedpleg.core.node.facts import hostplan  # noqa: PLC0415

    text = (ROOT / "docs" / "runbooks.md").read_text()
    section = text.split("### Our files on a node, removed by hand\n", 1)[1]
    paths = (
        f"{hostplan.RECOMMENDED_CONFIG_DIR}/{c.KUBELET_DROPIN_NAME}",
        hostplan.UNIT_DROPIN,
        f"/{c.CRIO_DROPIN_DIR}/{c.CRIO_DROPIN_NAME}",
        f"/{c.AGENT_STATE_DIR}/{statestore.APPLIED}",
        f"/{c.AGENT_STATE_DIR}/{statestore.CONFIG_BASELINE}",
        hostplan.MANAGED_MARKER,
    )
    for path in paths:
        assert path in section, path
    rm_line = next(line for line in section.splitlines() if line.startswith("rm -f "))
    assert set(rm_line.split()[2:]) == set(paths[:3])
    assert section.index("systemctl restart crio") < section.index("systemctl restart kubelet")
