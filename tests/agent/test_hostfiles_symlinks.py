"""Host writes never follow a symlink out of the directory they are meant for (real symlinks in tmp dirs)."""

from __future__ import annotations

import errno
import re
from pathlib import Path

import pytest

from eventedpleg.agent.hostfiles import HostFiles, HostPathError

DROPIN = "/etc/crio/crio.conf.d/99-eventedpleg.conf"


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """A host root and, beside it, a directory outside it that a symlink could point at."""
    root, outside = tmp_path / "host", tmp_path / "outside"
    (root / "etc/crio").mkdir(parents=True)
    outside.mkdir()
    return root, outside


def test_an_absolute_symlink_resolves_in_the_host_root_and_never_builds_a_tree_at_its_end(
    layout: tuple[Path, Path],
) -> None:
    root, outside = layout
    (root / "etc/crio/crio.conf.d").symlink_to(outside)  # absolute: on the host, that path is under /
    with pytest.raises(FileNotFoundError, match=re.escape("reached through /etc/crio/crio.conf.d")) as failed:
        HostFiles(root).write_atomic(DROPIN, b"x = 1\n")
    assert failed.value.filename == DROPIN
    assert list(outside.iterdir()) == []
    assert list((root / "etc/crio").iterdir()) == [root / "etc/crio/crio.conf.d"]  # no temp file left
    assert sorted(p.name for p in root.iterdir()) == ["etc"]  # nothing made at the link's target either


def test_an_absolute_symlink_to_a_host_directory_is_written_through(layout: tuple[Path, Path]) -> None:
    root, outside = layout
    (root / "var/lib/crio-conf").mkdir(parents=True)
    (root / "etc/crio/crio.conf.d").symlink_to("/var/lib/crio-conf")  # the host's path, not the container's
    HostFiles(root).write_atomic(DROPIN, b"x = 1\n")
    assert (root / "var/lib/crio-conf/99-eventedpleg.conf").read_bytes() == b"x = 1\n"
    assert list(outside.iterdir()) == []


def test_a_relative_symlink_inside_the_root_is_followed_where_the_daemon_follows_it(
    layout: tuple[Path, Path],
) -> None:
    root, _ = layout
    elsewhere = root / "var/lib/crio-conf"
    elsewhere.mkdir(parents=True)
    (root / "etc/crio/crio.conf.d").symlink_to("../../var/lib/crio-conf")  # CRI-O reads it there too
    HostFiles(root).write_atomic(DROPIN, b"x = 1\n")
    assert (elsewhere / "99-eventedpleg.conf").read_bytes() == b"x = 1\n"
    assert (root / "etc/crio/crio.conf.d").is_symlink()  # the link is left as the host made it
    assert [p.name for p in elsewhere.iterdir()] == ["99-eventedpleg.conf"]  # no temp file left there


def test_a_symlink_whose_target_lies_outside_the_root_is_refused_even_via_the_root(
    layout: tuple[Path, Path],
) -> None:
    root, outside = layout
    (root / "etc/crio/crio.conf.d").symlink_to("../../../outside")  # climbs out of the host root
    with pytest.raises(HostPathError, match="leading outside the host root") as refused:
        HostFiles(root).write_atomic(DROPIN, b"x = 1\n")
    assert refused.value.errno == errno.ELOOP and refused.value.filename == DROPIN
    assert list(outside.iterdir()) == []


def test_a_symlinked_ancestor_is_refused_before_any_directory_is_created(layout: tuple[Path, Path]) -> None:
    root, outside = layout
    (root / "etc/kubernetes").symlink_to("../../outside")
    with pytest.raises(HostPathError, match=re.escape("/etc/kubernetes is a symlink leading outside")):
        HostFiles(root).write_atomic("/etc/kubernetes/kubelet.conf.d/99-eventedpleg.conf", b"{}")
    assert list(outside.iterdir()) == []  # kubelet.conf.d was not created through the link


def test_remove_through_a_symlinked_directory_is_refused(layout: tuple[Path, Path]) -> None:
    root, outside = layout
    (outside / "99-eventedpleg.conf").write_text("precious")
    (root / "etc/crio/crio.conf.d").symlink_to("../../../outside")
    with pytest.raises(HostPathError):
        HostFiles(root).remove(DROPIN)
    assert (outside / "99-eventedpleg.conf").read_text() == "precious"
    (root / "etc/crio/crio.conf.d").unlink()
    (root / "etc/crio/crio.conf.d").symlink_to(outside)  # absolute: looked up under the host root
    HostFiles(root).remove(DROPIN)  # nothing there: nothing to remove
    assert (outside / "99-eventedpleg.conf").read_text() == "precious"


def test_a_symlinked_target_is_replaced_not_followed(layout: tuple[Path, Path]) -> None:
    root, outside = layout
    (root / "etc/crio/crio.conf.d").mkdir()
    victim = outside / "victim"
    victim.write_text("precious")
    (root / DROPIN.lstrip("/")).symlink_to(victim)
    HostFiles(root).write_atomic(DROPIN, b"x = 1\n")
    target = root / DROPIN.lstrip("/")
    assert not target.is_symlink() and target.read_bytes() == b"x = 1\n"
    assert victim.read_text() == "precious"


def test_plain_directories_are_written_as_before(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    files = HostFiles(root)
    files.write_atomic("/etc/kubernetes/kubelet.conf.d/99-eventedpleg.conf", b"{}")
    assert (root / "etc/kubernetes/kubelet.conf.d/99-eventedpleg.conf").read_bytes() == b"{}"
    files.remove("/etc/kubernetes/kubelet.conf.d/99-eventedpleg.conf")
    assert list((root / "etc/kubernetes/kubelet.conf.d").iterdir()) == []
