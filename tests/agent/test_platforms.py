"""docs/platforms.md, row by row: the real host check on a simulated host of each platform's layout reaches
the verdict the page states (eventedpleg_lab.platformdocs.PLATFORMS, the one table the page is generated
from); where the page says it works, the real apply turns Evented PLEG on and verifies it, writing nothing
under a read-only /usr; where it says Skipped, an apply leaves every file as it was."""

from __future__ import annotations

import pytest

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg.core import hostcheck
from eventedpleg.core.node.facts import platform
from eventedpleg.models.nodeconfig import KubeletConfigMode
from eventedpleg.protocol import NodeState
from eventedpleg_lab import platformdocs
from eventedpleg_lab.platformdocs import PLATFORMS, WORKS, PlatformRow
from tests.agent.conftest import Rig, RigFactory
from tests.agent.test_hostcheck import host_check

ROWS = {f"{row.platform}: {row.node}": row for row in PLATFORMS}


def _host_files(rig: Rig) -> dict[str, bytes]:
    return {k: v for k, v in rig.snapshot().items() if not k.startswith(c.AGENT_STATE_DIR.lstrip("/"))}


@pytest.mark.parametrize("name", ROWS)
def test_the_host_check_reaches_the_verdict_the_page_states(make_rig: RigFactory, name: str) -> None:
    row = ROWS[name]
    rig = make_rig(row.profile())
    host_check(rig)
    check = hostcheck.parse(rig.annotations.get(protocol.ANN_HOST_CHECK))
    assert check is not None
    for mode in KubeletConfigMode:
        expected = row.verdict(mode.value)
        refusal = check.refusal(mode.value)
        if expected == WORKS:
            assert refusal == "", (mode, refusal)
        else:
            assert refusal.startswith("Unsupported: ") and refusal.endswith(f". Fix: {expected}"), (
                mode,
                refusal,
            )


def _modes(row: PlatformRow, works: bool) -> list[KubeletConfigMode]:
    return [m for m in KubeletConfigMode if (row.verdict(m.value) == WORKS) == works]


@pytest.mark.parametrize("name", [n for n, row in ROWS.items() if _modes(row, works=True)])
def test_where_the_page_says_it_works_the_apply_verifies_evented_pleg(
    make_rig: RigFactory, name: str
) -> None:
    row = ROWS[name]
    for mode in _modes(row, works=True):
        rig = make_rig(row.profile())
        rig.apply(mode=mode)
        assert rig.state == NodeState.DONE, (mode, rig.annotations)
        assert rig.host.kubelet.evented, mode
        assert not rig.host.faults.files.refused, (
            rig.host.faults.files.refused
        )  # nothing under read-only /usr


@pytest.mark.parametrize("name", [n for n, row in ROWS.items() if _modes(row, works=False)])
def test_where_the_page_says_skipped_an_apply_changes_nothing(make_rig: RigFactory, name: str) -> None:
    row = ROWS[name]
    for mode in _modes(row, works=False):
        rig = make_rig(row.profile())
        before = _host_files(rig)
        rig.apply(mode=mode)
        assert rig.state == NodeState.SKIPPED, (mode, rig.annotations)
        assert rig.evidence["fix"] == row.verdict(mode.value)
        assert _host_files(rig) == before
        assert not any(cmd[:2] == ("systemctl", "restart") for cmd in rig.host.commands)


def test_every_platform_the_agent_recognises_has_a_row_and_a_layout_that_is_recognised() -> None:
    """A platform in core.node.facts.platform without a row would be a verdict the page does not state."""
    stated = {row.verdict(m.value) for row in PLATFORMS for m in KubeletConfigMode}
    for known in platform.PLATFORMS:
        assert any(known.fix in fix for fix in stated), known.name


def test_os_release_is_read_as_os_release_5_says() -> None:
    text = (
        "# comment\nNAME=\"Flatcar Container Linux by Kinvolk\"\nID=flatcar\nVERSION_ID='4230.2.3'\n\nBAD\n"
    )
    assert platform.os_release(text) == {
        "NAME": "Flatcar Container Linux by Kinvolk",
        "ID": "flatcar",
        "VERSION_ID": "4230.2.3",
    }
    assert platform.recognise('ID="talos"\n', ()) is platform.TALOS
    assert platform.recognise("ID=ubuntu\n", ("/home/kubernetes/kube-env",)) is platform.GKE
    assert platform.recognise("ID=ubuntu\n", ()) is None
    assert platform.recognise(None, ()) is None


def test_the_page_is_generated_from_these_rows() -> None:
    text = platformdocs.PAGE.read_text()
    assert platformdocs.regenerate(text) == text, "run python -m eventedpleg_lab.platformdocs"
    for row in PLATFORMS:
        assert f"| {row.platform} | {row.node} |" in text
