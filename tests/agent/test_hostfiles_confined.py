"""Host reads stay inside the host root (real files, links, FIFOs and devices in tmp dirs).

Beside each host root lies an `outside` tree whose files hold CANARY: no read may ever return it, whatever
links the host holds; refusals are OSErrors with the errno agent.hostfiles documents and the host path.
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventedpleg.agent.hostfiles import MAX_READ, HostFiles, HostPathError

CANARY = b"CANARY: outside the host root"
PARTS = ("etc", "kubernetes", "kubelet.conf.d", "10-x.conf")
FILE = "/" + "/".join(PARTS)
READS: dict[str, Callable[[HostFiles, str], object]] = {
    "read_bytes": HostFiles.read_bytes,
    "read_text": HostFiles.read_text,
    "copy_of": HostFiles.copy_of,
    "kind": HostFiles.kind,
}


def _layout(tmp_path: Path) -> tuple[Path, Path]:
    """root/etc/kubernetes/kubelet.conf.d/10-x.conf, and the same tree under outside/ holding CANARY."""
    root, outside = tmp_path / "host", tmp_path / "outside"
    for base, content in ((root, b"inside\n"), (outside, CANARY)):
        (base / FILE.lstrip("/")).parent.mkdir(parents=True)
        (base / FILE.lstrip("/")).write_bytes(content)
    return root, outside


def _replace_with_link(root: Path, position: int, target: str) -> None:
    at = root.joinpath(*PARTS[: position + 1])
    if at.is_dir():
        for path in sorted(at.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        at.rmdir()
    else:
        at.unlink()
    at.symlink_to(target)


@pytest.mark.parametrize("position", range(len(PARTS)), ids=PARTS)
@pytest.mark.parametrize("read", READS, ids=str)
def test_a_relative_link_climbing_out_at_any_component_is_refused(
    tmp_path: Path, position: int, read: str
) -> None:
    root, _ = _layout(tmp_path)
    # From root/<parts before it>: `position` levels up is the root, one more is tmp_path.
    _replace_with_link(root, position, "../" * (position + 1) + "outside/" + "/".join(PARTS[: position + 1]))
    assert (root.joinpath(*PARTS)).read_bytes() == CANARY  # the container's kernel would read the canary
    with pytest.raises(HostPathError, match="leading outside the host root") as refused:
        READS[read](HostFiles(root), FILE)
    assert refused.value.errno == errno.ELOOP and refused.value.filename == FILE


@pytest.mark.parametrize("position", range(len(PARTS)), ids=PARTS)
def test_an_absolute_link_at_any_component_resolves_in_the_host_root(tmp_path: Path, position: int) -> None:
    root, outside = _layout(tmp_path)
    target = outside.joinpath(*PARTS[: position + 1])
    _replace_with_link(root, position, str(target))
    files = HostFiles(root)
    assert files.read_bytes(FILE) is None  # that path does not exist on the host: nothing read outside
    assert files.copy_of(FILE).content is None
    # The host's own file at that path is what the host's daemons read, and what we read.
    decoy = root / str(target).lstrip("/") / Path(*PARTS[position + 1 :])
    decoy.parent.mkdir(parents=True, exist_ok=True)
    decoy.write_bytes(b"the host's file\n")
    assert files.read_bytes(FILE) == b"the host's file\n"
    assert files.copy_of(FILE).content == b"the host's file\n"


def test_a_listing_through_a_link_out_is_refused_and_a_link_out_inside_it_too(tmp_path: Path) -> None:
    root, _ = _layout(tmp_path)
    files = HostFiles(root)
    dropins = root / "etc/kubernetes/kubelet.conf.d"
    (dropins / "20-out.conf").symlink_to("../../../../outside/etc/kubernetes/kubelet.conf.d/10-x.conf")
    with pytest.raises(HostPathError) as refused:
        files.list_files("/etc/kubernetes/kubelet.conf.d")
    assert refused.value.filename == "/etc/kubernetes/kubelet.conf.d/20-out.conf"
    (dropins / "20-out.conf").unlink()
    _replace_with_link(root, 2, "../../../outside/etc/kubernetes/kubelet.conf.d")
    with pytest.raises(HostPathError):
        files.list_files("/etc/kubernetes/kubelet.conf.d")


def test_link_chains_inside_the_root_are_followed_and_a_chain_leading_out_is_refused(tmp_path: Path) -> None:
    root, _ = _layout(tmp_path)
    d = root / "etc/kubernetes/kubelet.conf.d"
    (d / "a.conf").symlink_to("b.conf")
    (d / "b.conf").symlink_to("/etc/kubernetes/c.conf")  # absolute: from the host root
    (root / "etc/kubernetes/c.conf").symlink_to("kubelet.conf.d/10-x.conf")
    files = HostFiles(root)
    assert files.read_bytes("/etc/kubernetes/kubelet.conf.d/a.conf") == b"inside\n"
    (root / "etc/kubernetes/c.conf").unlink()
    (root / "etc/kubernetes/c.conf").symlink_to("../../../outside/etc/kubernetes/kubelet.conf.d/10-x.conf")
    with pytest.raises(HostPathError) as refused:
        files.read_bytes("/etc/kubernetes/kubelet.conf.d/a.conf")
    assert refused.value.errno == errno.ELOOP
    assert "/etc/kubernetes/c.conf" in str(refused.value)  # names the link that leads out
    (d / "loop-1").symlink_to("loop-2")
    (d / "loop-2").symlink_to("loop-1")
    with pytest.raises(OSError, match="too many levels") as looped:
        files.read_bytes("/etc/kubernetes/kubelet.conf.d/loop-1")
    assert looped.value.errno == errno.ELOOP


@pytest.mark.timeout(20)
def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    root, _ = _layout(tmp_path)
    os.mkfifo(root / "etc/kubernetes/kubelet.conf.d/20-fifo.conf")  # no writer: an open() would block
    files = HostFiles(root)
    for read in (files.read_bytes, files.copy_of):
        with pytest.raises(OSError, match="a FIFO") as refused:
            read("/etc/kubernetes/kubelet.conf.d/20-fifo.conf")
        assert refused.value.errno == errno.ENXIO
        assert refused.value.filename == "/etc/kubernetes/kubelet.conf.d/20-fifo.conf"
    listing = files.list_files("/etc/kubernetes/kubelet.conf.d")
    assert listing.files == (("10-x.conf", "inside\n"),)
    assert listing.skipped == (("20-fifo.conf", "not a regular file (a FIFO); only regular files are read"),)


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a device needs root")
def test_a_device_is_refused_without_being_opened(tmp_path: Path) -> None:
    root, _ = _layout(tmp_path)
    device = root / "etc/kubernetes/kubelet.conf.d/30-null.conf"
    os.mknod(device, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # /dev/null's numbers
    before = device.stat().st_atime_ns
    with pytest.raises(OSError, match="a character device") as refused:
        HostFiles(root).read_bytes("/etc/kubernetes/kubelet.conf.d/30-null.conf")
    assert refused.value.errno == errno.ENXIO
    assert device.stat().st_atime_ns == before
    assert [rel for rel, _ in HostFiles(root).list_files("/etc/kubernetes/kubelet.conf.d").skipped] == [
        "30-null.conf"
    ]


def test_a_directory_and_a_file_on_the_way_are_refused(tmp_path: Path) -> None:
    root, _ = _layout(tmp_path)
    files = HostFiles(root)
    with pytest.raises(IsADirectoryError) as refused:
        files.read_bytes("/etc/kubernetes/kubelet.conf.d")
    assert refused.value.errno == errno.EISDIR and refused.value.filename == "/etc/kubernetes/kubelet.conf.d"
    with pytest.raises(NotADirectoryError) as refused_dir:
        files.read_bytes(FILE + "/more")
    assert refused_dir.value.errno == errno.ENOTDIR and refused_dir.value.filename == FILE + "/more"
    assert files.read_bytes("/etc/kubernetes/missing/10-x.conf") is None  # absence is not a failure
    assert files.copy_of("/etc/kubernetes/kubelet.conf.d/missing.conf").content is None


def test_a_file_over_the_cap_is_refused_and_one_at_it_read(tmp_path: Path) -> None:
    root, _ = _layout(tmp_path)
    big = root / "etc/kubernetes/kubelet.conf.d/99-big.conf"
    with big.open("wb") as fh:
        fh.truncate(MAX_READ)  # sparse: cheap to make
    files = HostFiles(root)
    assert len(files.read_bytes("/etc/kubernetes/kubelet.conf.d/99-big.conf") or b"") == MAX_READ
    with big.open("ab") as fh:
        fh.write(b"x")
    for read in (files.read_bytes, files.copy_of, files.list_files):
        target = "/etc/kubernetes/kubelet.conf.d" + ("" if read == files.list_files else "/99-big.conf")
        with pytest.raises(OSError) as refused:
            read(target)
        assert refused.value.errno == errno.EFBIG
        assert refused.value.filename == "/etc/kubernetes/kubelet.conf.d/99-big.conf"


def test_listings_take_regular_files_and_links_to_them_and_say_what_they_skipped(tmp_path: Path) -> None:
    root, _ = _layout(tmp_path)
    d = root / "etc/kubernetes/kubelet.conf.d"
    (d / "sub").mkdir()
    (d / "sub/40-deep.conf").write_text("deep\n")
    (d / "50-link.conf").symlink_to("/etc/kubernetes/kubelet.conf.d/sub/40-deep.conf")
    (d / "60-dangling.conf").symlink_to("nowhere.conf")
    (d / "70-dirlink").symlink_to("sub")
    (d / "80-binary.conf").write_bytes(b"\xff\xfe")
    listing = HostFiles(root).list_files("/etc/kubernetes/kubelet.conf.d")
    assert listing.files == (
        ("10-x.conf", "inside\n"),
        ("50-link.conf", "deep\n"),
        ("80-binary.conf", None),
        ("sub/40-deep.conf", "deep\n"),
    )
    assert [rel for rel, _ in listing.skipped] == ["60-dangling.conf", "70-dirlink"]
    assert "is a directory" in dict(listing.skipped)["70-dirlink"]
    assert HostFiles(root).list_files("/etc/nothing-here").files == ()


# --- property: against the kernel's own resolution in a chroot of the host root -----------------------

NAMES = ("a", "b", "c")
components = st.sampled_from((*NAMES, "..", "."))
link_targets = st.one_of(
    st.builds(
        lambda abs_, parts: ("/" if abs_ else "") + "/".join(parts),
        st.booleans(),
        st.lists(components, min_size=1, max_size=4),
    ),
    st.builds(lambda up: "../" * up + "outside/a", st.integers(1, 4)),  # towards the canary
)
entries = st.lists(
    st.tuples(
        st.lists(st.sampled_from(NAMES), min_size=1, max_size=3),
        st.sampled_from(("dir", "file", "link")),
        link_targets,
    ),
    max_size=10,
)
queries = st.lists(
    st.lists(components, min_size=1, max_size=4).map(lambda p: "/" + "/".join(p)), min_size=1, max_size=6
)

_ORACLE = """
import os, stat, sys
os.chroot(sys.argv[1]); os.chdir("/")
for path in sys.argv[2:]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        print("none" if exc.errno == 2 else f"err {exc.errno}"); continue
    mode = os.fstat(fd).st_mode
    if stat.S_ISDIR(mode): print(f"err {21}")
    else: print("ok " + os.read(fd, 1 << 16).hex())
    os.close(fd)
"""


def _ours(files: HostFiles, path: str) -> str | None:
    """None when we refused as leading out (the kernel clamps `..` at the chroot's root instead)."""
    try:
        data = files.read_bytes(path)
    except HostPathError:
        return None
    except OSError as exc:
        assert exc.filename == path
        return f"err {exc.errno}"
    return "none" if data is None else "ok " + data.hex()


@pytest.mark.skipif(os.geteuid() != 0, reason="the kernel oracle needs chroot (root)")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries, queries)
def test_reads_resolve_as_the_host_would_and_never_reach_outside(
    tree: list[tuple[list[str], str, str]], paths: list[str]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root, outside = Path(tmp, "host"), Path(tmp, "outside")
        root.mkdir()
        (outside / "a").mkdir(parents=True)
        (outside / "a/a").write_bytes(CANARY)
        for name in NAMES:
            (outside / name).with_suffix(".f").write_bytes(CANARY)
        for parts, kind, target in tree:
            at = root.joinpath(*parts)
            if not at.parent.is_dir() or at.parent.is_symlink() or os.path.lexists(at):
                continue
            if kind == "dir":
                at.mkdir()
            elif kind == "file":
                at.write_bytes(("IN:" + "/".join(parts)).encode())
            else:
                at.symlink_to(target)
        files = HostFiles(root)
        ours = [_ours(files, path) for path in paths]
        done = subprocess.run(
            [sys.executable, "-c", _ORACLE, str(root), *paths], capture_output=True, text=True, check=True
        )
        kernel = done.stdout.split("\n")[: len(paths)]
        for path, mine, theirs in zip(paths, ours, kernel, strict=True):
            assert CANARY.hex() not in (mine or "")
            if mine is not None:
                assert mine == theirs, path


def _snapshot(directory: Path) -> dict[str, bytes | str]:
    """Every entry under a directory: file bytes, link targets, "dir"."""
    out: dict[str, bytes | str] = {}
    for path in sorted(directory.rglob("*")):
        rel = str(path.relative_to(directory))
        if path.is_symlink():
            out[rel] = "-> " + str(path.readlink())
        elif path.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = path.read_bytes()
    return out


@pytest.mark.skipif(os.geteuid() != 0, reason="the kernel oracle needs chroot (root)")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries, queries)
def test_writes_land_where_the_host_reads_them_and_never_outside(
    tree: list[tuple[list[str], str, str]], paths: list[str]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root, outside = Path(tmp, "host"), Path(tmp, "outside")
        root.mkdir()
        (outside / "a").mkdir(parents=True)
        (outside / "a/a").write_bytes(CANARY)
        for parts, kind, target in tree:
            at = root.joinpath(*parts)
            if not at.parent.is_dir() or at.parent.is_symlink() or os.path.lexists(at):
                continue
            if kind == "dir":
                at.mkdir()
            elif kind == "file":
                at.write_bytes(("IN:" + "/".join(parts)).encode())
            else:
                at.symlink_to(target)
        before = _snapshot(outside)
        files = HostFiles(root)
        written: list[str] = []
        for path in paths:
            try:
                files.write_atomic(path, b"NEW:" + path.encode())
            except OSError as exc:
                assert exc.filename is not None  # a host path (the target's, or our temp file's)
                continue
            written.append(path)
        assert _snapshot(outside) == before
        assert not [p for p in root.rglob("*") if p.name.startswith(".eventedpleg-")]  # no temp file left
        if written:
            done = subprocess.run(
                [sys.executable, "-c", _ORACLE, str(root), *written],
                capture_output=True,
                text=True,
                check=True,
            )
            kernel = done.stdout.split("\n")[: len(written)]
            # A later write may have replaced an earlier one's file or a directory on its way: compare the
            # last write of each resolved file only, i.e. every read must be one of the writes' contents.
            contents = {"ok " + (b"NEW:" + p.encode()).hex() for p in written}
            for path, theirs in zip(written, kernel, strict=True):
                assert theirs in contents, (path, theirs)


def test_a_write_refused_by_an_immutable_directory_names_the_target(tmp_path: Path) -> None:
    """The kernel's own EPERM (chattr +i on ext4, as on the lab's nodes): no file can be made or named in
    the directory, and the fault names the target."""
    root = tmp_path / "root"
    guarded = root / "etc/kubernetes/kubelet.conf.d"
    guarded.mkdir(parents=True)
    if subprocess.run(["chattr", "+i", str(guarded)], capture_output=True, check=False).returncode != 0:
        pytest.skip("chattr +i is not possible here (not root, or the filesystem has no immutable attribute)")
    try:
        with pytest.raises(PermissionError) as raised:
            HostFiles(root).write_atomic("/etc/kubernetes/kubelet.conf.d/99-x.conf", b"x")
        assert raised.value.errno == errno.EPERM
        assert raised.value.filename == "/etc/kubernetes/kubelet.conf.d/99-x.conf"
        assert [p.name for p in guarded.parent.rglob("*")] == ["kubelet.conf.d"]  # no temp file left
    finally:
        subprocess.run(["chattr", "-i", str(guarded)], check=True)
