"""One version everywhere (issue 24): pyproject.toml's, in the lab's distribution and its pin, __version__,
the chart's version and appVersion, and the Dockerfile's image label; and `set` writes all of them."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from eventedpleg import __version__
from eventedpleg_lab import release

REPO = Path(__file__).resolve().parents[2]


def test_the_tree_states_one_version() -> None:
    assert release.mismatches(REPO) == []
    assert release.version(REPO) == __version__


def copy_places(tmp_path: Path) -> Path:
    for place in (release.SOURCE, *release.PLACES):
        target = tmp_path / place.path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / place.path, target)
    return tmp_path


def test_set_writes_every_place_and_check_sees_a_stray_one(tmp_path: Path) -> None:
    repo = copy_places(tmp_path)
    release.set_version(repo, "1.2.3rc1")
    assert release.version(repo) == "1.2.3rc1"
    assert release.mismatches(repo) == []
    assert 'appVersion: "1.2.3rc1"' in (repo / "manifests/evented-pleg-operator/Chart.yaml").read_text()
    assert '"evented-pleg-operator==1.2.3rc1"' in (repo / "operator/pyproject.toml").read_text()
    chart = repo / "manifests/evented-pleg-operator/Chart.yaml"
    chart.write_text(chart.read_text().replace("version: 1.2.3rc1", "version: 9.9.9"))
    assert release.mismatches(repo) == [
        "manifests/evented-pleg-operator/Chart.yaml: 9.9.9 (pyproject.toml says 1.2.3rc1)"
    ]


@pytest.mark.parametrize("bad", ["v1.2.3", "1.2", "1.2.3-dev", ""])
def test_set_refuses_what_is_not_a_release_version(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match="not a release version"):
        release.set_version(copy_places(tmp_path), bad)


def test_sums_are_what_sha256sum_checks(tmp_path: Path) -> None:
    (tmp_path / "a.tgz").write_bytes(b"chart")
    (tmp_path / "b.whl").write_bytes(b"wheel")
    sums = release.write_sums(tmp_path)
    assert sums.read_text() == (
        f"{hashlib.sha256(b'chart').hexdigest()}  a.tgz\n{hashlib.sha256(b'wheel').hexdigest()}  b.whl\n"
    )
    done = subprocess.run(
        ["sha256sum", "-c", sums.name], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (tmp_path / "b.whl").write_bytes(b"tampered")
    tampered = subprocess.run(["sha256sum", "-c", "--quiet", sums.name], cwd=tmp_path, check=False)
    assert tampered.returncode == 1


def _release_files(directory: Path, *, digest: str = "sha256:" + "ab" * 32) -> None:
    directory.mkdir()
    (directory / "a.whl").write_bytes(b"wheel")
    image = {"name": "localhost/evented-pleg-operator:0.1.0", "digest": digest, "platforms": []}
    (directory / "release.json").write_text(
        f'{{"version": "0.1.0", "revision": "abc", "created": "x", "image": {json.dumps(image)}}}'
    )
    release.write_sums(directory)


def test_a_release_is_read_only_when_every_checksum_verifies(tmp_path: Path) -> None:
    _release_files(tmp_path / "r")
    found = release.read_release(tmp_path / "r")
    assert (found.version, found.revision, found.image_digest) == ("0.1.0", "abc", "sha256:" + "ab" * 32)
    assert found.archive == tmp_path / "r" / "evented-pleg-operator-0.1.0.oci.tar"
    (tmp_path / "r" / "a.whl").write_bytes(b"changed")
    (tmp_path / "r" / "stray").write_text("")
    with pytest.raises(release.ReleaseError) as refused:
        release.read_release(tmp_path / "r")
    assert "a.whl: checksum does not match SHA256SUMS" in str(refused.value)
    assert "stray: not in SHA256SUMS" in str(refused.value)
    (tmp_path / "r" / "a.whl").unlink()
    assert "a.whl: missing" in release.sum_problems(tmp_path / "r")


def test_a_release_without_its_image_is_not_one_the_lab_can_install(tmp_path: Path) -> None:
    _release_files(tmp_path / "r", digest="")
    with pytest.raises(release.ReleaseError, match=r"without its image \(hack/release.sh --no-image\)"):
        release.read_release(tmp_path / "r")
