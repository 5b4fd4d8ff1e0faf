"""Host writes on real filesystem layouts: a drop-in directory that is a mount of its own (a writable
tmpfs, a read-only mount, a full tmpfs) is written in place or refused with that filesystem's own errno,
never EXDEV; the temp name, where one is needed, is random and opened O_EXCL|O_NOFOLLOW; a symlink is
restored as the same link; listings stop at their caps. The mounts are real (tmpfs, as root)."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from eventedpleg.agent import hostfiles
from eventedpleg.agent.hostfiles import (
    MAX_LIST_DEPTH,
    MAX_LIST_ENTRIES,
    TEMP_PREFIX,
    TEMP_SUFFIX,
    HostFiles,
)
from eventedpleg.core.node.blocks.hostfault import fault

DIR = "/etc/kubernetes/kubelet.conf.d"
DROPIN = f"{DIR}/99-eventedpleg.conf"


def _mount(*argv: str) -> None:
    done = subprocess.run(["mount", *argv], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount here (needs root): {done.stderr.strip()}")


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    """A host root whose drop-in directory will be a mount point; unmounted after the test."""
    host = tmp_path / "host"
    (host / DIR.lstrip("/")).mkdir(parents=True)
    yield host
    subprocess.run(["umount", str(host / DIR.lstrip("/"))], capture_output=True, check=False)


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


@pytest.fixture(params=["O_TMPFILE", "named temp"])
def files(request: pytest.FixtureRequest, root: Path, monkeypatch: pytest.MonkeyPatch) -> HostFiles:
    """HostFiles over `root`, through O_TMPFILE or (as on a filesystem without it) a random temp name."""
    if request.param == "named temp":
        monkeypatch.setattr(hostfiles, "_PROC_FD", Path("/nonexistent/proc/self/fd"))
    return HostFiles(root)


def test_a_drop_in_directory_that_is_a_writable_mount_is_written_in_place(
    root: Path, files: HostFiles
) -> None:
    dropins = root / DIR.lstrip("/")
    _mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(dropins))
    (dropins / "10-site.conf").write_text("site\n")
    files.write_atomic(DROPIN, b"first\n")
    files.write_atomic(DROPIN, b"second\n", mode=0o600)  # over an existing file: linked in, renamed over
    assert (dropins / "99-eventedpleg.conf").read_bytes() == b"second\n"
    assert (dropins / "99-eventedpleg.conf").stat().st_mode & 0o777 == 0o600
    assert _names(dropins) == ["10-site.conf", "99-eventedpleg.conf"]  # no temp name left


def test_a_read_only_mount_is_refused_as_read_only_naming_the_target(root: Path, files: HostFiles) -> None:
    dropins = root / DIR.lstrip("/")
    _mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(dropins))
    (dropins / "10-site.conf").write_text("site\n")
    _mount("-o", "remount,ro", str(dropins))
    with pytest.raises(OSError) as refused:
        files.write_atomic(DROPIN, b"x\n")
    assert refused.value.errno == errno.EROFS and refused.value.filename == DROPIN
    line = fault("write", DROPIN, refused.value.errno).line()
    assert line == (
        f"write {DROPIN} failed (EROFS: Read-only file system): make that filesystem writable (remount it "
        "read-write) or move that directory off it"
    )
    assert _names(dropins) == ["10-site.conf"]


def test_a_full_mount_is_refused_as_full_and_nothing_is_left(root: Path, files: HostFiles) -> None:
    dropins = root / DIR.lstrip("/")
    _mount("-t", "tmpfs", "-o", "size=64k", "tmpfs", str(dropins))
    (dropins / "10-site.conf").write_text("site\n")
    filler = os.open(dropins / "zz-filler", os.O_WRONLY | os.O_CREAT)
    try:
        with pytest.raises(OSError) as filled:
            while True:
                os.write(filler, b"\0" * 4096)
        assert filled.value.errno == errno.ENOSPC
    finally:
        os.close(filler)
    with pytest.raises(OSError) as refused:
        files.write_atomic(DROPIN, b"x = 1\n" * 4096)
    assert refused.value.errno == errno.ENOSPC and refused.value.filename == DROPIN
    assert "free space" in fault("write", DROPIN, errno.ENOSPC).line()
    assert _names(dropins) == ["10-site.conf", "zz-filler"]


def test_a_planted_hard_link_or_symlink_at_a_temp_name_is_never_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without O_TMPFILE: a file planted at the temp name drawn first (a hard link to a precious file, a
    symlink to one) is refused by O_EXCL|O_NOFOLLOW; the next random name is used; the plants stay."""
    monkeypatch.setattr(hostfiles, "_PROC_FD", Path("/nonexistent/proc/self/fd"))
    host = tmp_path / "host"
    dropins = host / DIR.lstrip("/")
    dropins.mkdir(parents=True)
    precious = host / "etc/shadow"
    precious.write_text("precious\n")
    precious.chmod(0o600)
    planted = [f"{TEMP_PREFIX}{'a' * 16}{TEMP_SUFFIX}", f"{TEMP_PREFIX}{'b' * 16}{TEMP_SUFFIX}"]
    os.link(precious, dropins / planted[0])
    (dropins / planted[1]).symlink_to(precious)
    drawn = iter([*planted, f"{TEMP_PREFIX}{'c' * 16}{TEMP_SUFFIX}"])
    monkeypatch.setattr(hostfiles, "_temp_name", lambda: next(drawn))
    HostFiles(host).write_atomic(DROPIN, b"x = 1\n", mode=0o644)
    assert precious.read_text() == "precious\n" and precious.stat().st_mode & 0o777 == 0o600
    assert (dropins / "99-eventedpleg.conf").read_bytes() == b"x = 1\n"
    assert _names(dropins) == sorted(["99-eventedpleg.conf", *planted])
    # The sweep before the next write removes names of ours (never following them), nothing else.
    removed = HostFiles(host).sweep_temp_files([DROPIN])
    assert sorted(removed) == sorted(f"{DIR}/{name}" for name in planted)
    assert _names(dropins) == ["99-eventedpleg.conf"] and precious.read_text() == "precious\n"


def test_a_symlinked_config_is_restored_as_the_same_link(tmp_path: Path) -> None:
    host = tmp_path / "host"
    (host / "etc/kubelet").mkdir(parents=True)
    (host / "etc/kubelet/config-v2.yaml").write_text("kind: KubeletConfiguration\n")
    config = host / "var/lib/kubelet/config.yaml"
    config.parent.mkdir(parents=True)
    config.symlink_to("../../../etc/kubelet/config-v2.yaml")
    files = HostFiles(host)
    copy = files.copy_of("/var/lib/kubelet/config.yaml")
    assert copy.link == "../../../etc/kubelet/config-v2.yaml"
    assert copy.content == b"kind: KubeletConfiguration\n"  # what it leads to, for the write's mode
    files.write_atomic("/var/lib/kubelet/config.yaml", b"edited\n")
    assert not config.is_symlink()
    files.restore("/var/lib/kubelet/config.yaml", copy)
    assert config.is_symlink() and str(config.readlink()) == "../../../etc/kubelet/config-v2.yaml"
    assert (host / "etc/kubelet/config-v2.yaml").read_text() == "kind: KubeletConfiguration\n"
    assert _names(config.parent) == ["config.yaml"]
    # A dangling link is a link too: restored as it was.
    (host / "var/lib/kubelet/gone.yaml").symlink_to("/nowhere.yaml")
    dangling = files.copy_of("/var/lib/kubelet/gone.yaml")
    assert dangling.content is None and dangling.link == "/nowhere.yaml"
    files.remove("/var/lib/kubelet/gone.yaml")
    files.restore("/var/lib/kubelet/gone.yaml", dangling)
    assert str((host / "var/lib/kubelet/gone.yaml").readlink()) == "/nowhere.yaml"


def test_a_listing_past_its_caps_fails_naming_the_directory_and_the_cap(tmp_path: Path) -> None:
    host = tmp_path / "host"
    wide = host / "etc/crio/crio.conf.d"
    wide.mkdir(parents=True)
    for i in range(MAX_LIST_ENTRIES):
        (wide / f"{i:03}.conf").write_text("")
    assert len(HostFiles(host).list_files("/etc/crio/crio.conf.d").files) == MAX_LIST_ENTRIES
    (wide / "one-more.conf").write_text("")
    with pytest.raises(OSError, match=f"more than {MAX_LIST_ENTRIES} entries") as wide_refused:
        HostFiles(host).list_files("/etc/crio/crio.conf.d")
    assert wide_refused.value.errno == errno.E2BIG
    assert wide_refused.value.filename == "/etc/crio/crio.conf.d"

    deep = host / "etc/kubernetes/kubelet.conf.d"
    (deep / "/".join("d" * MAX_LIST_DEPTH)).mkdir(parents=True)
    assert HostFiles(host).list_files(DIR).files == ()
    (deep / "/".join("d" * (MAX_LIST_DEPTH + 1))).mkdir()
    with pytest.raises(OSError, match=f"more than {MAX_LIST_DEPTH} levels deep") as deep_refused:
        HostFiles(host).list_files(DIR)
    assert deep_refused.value.errno == errno.E2BIG


def test_a_listing_stops_at_its_byte_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hostfiles, "MAX_LIST_BYTES", 1 << 20)
    host = tmp_path / "host"
    dropins = host / DIR.lstrip("/")
    dropins.mkdir(parents=True)
    (dropins / "a.conf").write_bytes(b"#" * (1 << 19))
    (dropins / "b.conf").write_bytes(b"#" * (1 << 19))
    assert len(HostFiles(host).list_files(DIR).files) == 2
    (dropins / "c.conf").write_text("#")
    with pytest.raises(OSError, match="more than 1 MiB") as refused:
        HostFiles(host).list_files(DIR)
    assert refused.value.errno == errno.E2BIG


def test_a_rollback_on_a_read_only_mount_finds_nothing_to_put_back(root: Path, files: HostFiles) -> None:
    """The write the read-only mount refused changed nothing: its rollback (our file absent before, a
    site file as it was) succeeds without writing, where a write or an unlink would be refused (EROFS)."""
    dropins = root / DIR.lstrip("/")
    _mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(dropins))
    (dropins / "10-site.conf").write_text("site\n")
    site = files.copy_of(f"{DIR}/10-site.conf")
    absent = files.copy_of(DROPIN)
    _mount("-o", "remount,ro", str(dropins))
    with pytest.raises(OSError):
        files.write_atomic(DROPIN, b"x\n")
    files.restore(DROPIN, absent)
    files.restore(f"{DIR}/10-site.conf", site)
    files.remove(DROPIN)
    assert _names(dropins) == ["10-site.conf"]
    with pytest.raises(OSError) as refused:  # a restore that must write is still refused, by its errno
        files.restore(f"{DIR}/10-site.conf", replace(site, content=b"other\n"))
    assert refused.value.errno == errno.EROFS
