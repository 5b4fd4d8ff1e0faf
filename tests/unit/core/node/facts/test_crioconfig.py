"""CRI-O drop-in rules: every file parsed, last wins, invalid TOML is fatal (docs/compatibility.md §2)."""

from __future__ import annotations

import pytest

from eventedpleg.core.node.facts.crioconfig import analyze_dropins, looks_like_backup, running_pod_events
from eventedpleg.core.runtimes import CRIO_DROPIN

OURS = CRIO_DROPIN.name


@pytest.mark.parametrize(
    ("output", "value"),
    [
        ("[crio]\n[crio.runtime]\nenable_pod_events = true\n", True),
        ("[crio]\n[crio.runtime]\n# enable_pod_events = false\n", False),  # `crio config`: default commented
        ("[crio.runtime]\n  enable_pod_events = false\n", False),
        ("garbage [ not toml\n  enable_pod_events = true\n", True),  # fall back to the line
        ("connection refused", None),
    ],
)
def test_running_pod_events(output: str, value: bool | None) -> None:
    assert running_pod_events(output, CRIO_DROPIN.setting) is value


@pytest.mark.parametrize(
    ("name", "backup"),
    [
        ("10-crun.conf", False),
        ("x.conf~", True),
        ("x.bak", True),
        (".hidden", True),
        ("a.rpmnew", True),
        ("a.dpkg-old", True),
        ("crio.conf", False),
    ],
)
def test_backup_names(name: str, backup: bool) -> None:
    assert looks_like_backup(name) is backup


def test_analysis_blocks_invalid_toml_and_later_overrides_and_warns_on_backups() -> None:
    files: list[tuple[str, str | None]] = [
        ("10-crun.conf", "[crio.runtime]\ndefault_runtime = 'crun'\n"),
        (OURS, "[crio.runtime]\nenable_pod_events = true\n"),
        ("99-eventedpleg.conf.bak", "[crio.runtime]\nenable_pod_events = false\n"),
        ("sub/50-docs.conf", "[crio.runtime]\nenable_pod_events: true\n"),
        ("20-old.conf~", "[crio.runtime]\nenable_pod_events = false\n"),  # before ours: harmless
        ("binary.bin", None),
    ]
    report = analyze_dropins(files, CRIO_DROPIN, enabling=True, runtime="CRI-O")
    assert len(report.blocking) == 3
    assert any("99-eventedpleg.conf.bak sorts after" in b for b in report.blocking)
    assert any("sub/50-docs.conf: invalid TOML" in b for b in report.blocking)
    assert any("binary.bin is not readable text" in b for b in report.blocking)
    assert sorted(w.split()[0] for w in report.warnings) == [
        "crio.conf.d/20-old.conf~",
        "crio.conf.d/99-eventedpleg.conf.bak",
    ]


def test_turning_off_only_cares_about_files_that_would_stop_crio() -> None:
    files: list[tuple[str, str | None]] = [("zz.conf", "[crio.runtime]\nenable_pod_events = true\n")]
    assert analyze_dropins(files, CRIO_DROPIN, enabling=False, runtime="CRI-O").ok
    assert not analyze_dropins([("zz.conf", "x = ")], CRIO_DROPIN, enabling=False, runtime="CRI-O").ok
