"""A test tier that cannot run on this machine (no root, binaries not built) is skipped test by test, with
the reason, and the reason is said again at the end of the run so a skip is never silent."""

from __future__ import annotations

from collections.abc import Callable

import pytest


class TierSkips:
    """A pytest plugin for the tests marked `marker`; register it from the tier's conftest
    (`pytest_configure`). Other end-of-run notes of the tier go into `notes` too."""

    def __init__(self, marker: str, why_not: Callable[[], str | None]) -> None:
        self.marker = marker
        self.why_not = why_not
        self.notes: list[str] = []

    @pytest.hookimpl(trylast=True)  # after `-m` deselection: name only the tests that would have run
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        ours = [i for i in items if i.get_closest_marker(self.marker)]
        why = self.why_not() if ours else None
        if why:
            self.notes.append(f"{len(ours)} {self.marker} tests SKIPPED: {why}")
            for item in ours:
                item.add_marker(pytest.mark.skip(reason=f"{self.marker.upper()} SKIPPED: {why}"))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        for line in self.notes:
            terminalreporter.write_sep("!", line, red=True, bold=True)
