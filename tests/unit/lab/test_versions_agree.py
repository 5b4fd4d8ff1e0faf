"""One version everywhere: pyproject.toml's, in the lab's distribution and its pin, __version__,
the chart's version and appVersion, and the Dockerfile's image label; and `set` writes all of them, each in
its spelling (PEP 440 for Python, SemVer for the chart). The packaged chart's image pin, and the platforms
of an image index in an OCI archive."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from eventedpleg import __version__
from eventedpleg_lab import release

REPO = Path(__file__).resolve().parents[3]


def test_the_tree_states_one_version() -> None:
    assert release.mismatches(REPO) == []
    assert release.version(REPO) == __version__


def copy_places(tmp_path: Path) -> Path:
    for place in (release.SOURCE, *release.PLACES):
        target = tmp_path / place.path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / place.path, target)
    return tmp_path


@pytest.mark.parametrize(
    ("given", "python", "semver"),
    [
        ("0.2.0", "0.2.0", "0.2.0"),
        ("0.2.0rc1", "0.2.0rc1", "0.2.0-rc.1"),
        ("0.2.0-rc.1", "0.2.0rc1", "0.2.0-rc.1"),
        ("1.10.0a3", "1.10.0a3", "1.10.0-alpha.3"),
        ("1.10.0-alpha.3", "1.10.0a3", "1.10.0-alpha.3"),
        ("2.0.12b10", "2.0.12b10", "2.0.12-beta.10"),
        ("2.0.12-beta.10", "2.0.12b10", "2.0.12-beta.10"),
    ],
)
def test_one_version_in_both_spellings(given: str, python: str, semver: str) -> None:
    parsed = release.ReleaseVersion.parse(given)
    assert (parsed.python, parsed.semver) == (python, semver)
    assert parsed.prerelease == (python != semver)
    # Each spelling maps back to the same version.
    assert release.ReleaseVersion.parse(python) == release.ReleaseVersion.parse(semver) == parsed


@pytest.mark.parametrize(
    "bad", ["v1.2.3", "1.2", "1.2.3-dev", "1.2.3-rc1", "1.2.3rc.1", "1.2.3-a.1", "1.2.3.post1", "1.2.3rc", ""]
)
def test_what_is_not_a_release_version_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="not a release version"):
        release.ReleaseVersion.parse(bad)


def test_versions_command_prints_both_spellings(capsys: pytest.CaptureFixture[str]) -> None:
    assert release.main(["versions", "0.2.0-rc.1"]) == 0
    assert capsys.readouterr().out == "0.2.0rc1 0.2.0-rc.1\n"
    assert release.main(["versions", "0.2"]) == 1
    assert "not a release version" in capsys.readouterr().err


def test_set_writes_every_place_and_check_sees_a_stray_one(tmp_path: Path) -> None:
    repo = copy_places(tmp_path)
    release.set_version(repo, "1.2.3-rc.1")
    assert release.version(repo) == "1.2.3rc1"
    assert release.mismatches(repo) == []
    chart = repo / "manifests/evented-pleg-operator/Chart.yaml"
    assert 'appVersion: "1.2.3-rc.1"' in chart.read_text()
    assert "\nversion: 1.2.3-rc.1\n" in chart.read_text()
    assert '"evented-pleg-operator==1.2.3rc1"' in (repo / "operator/pyproject.toml").read_text()
    assert "ARG VERSION=1.2.3rc1\n" in (repo / "Dockerfile").read_text()
    assert '__version__ = "1.2.3rc1"' in (repo / "operator/eventedpleg/__init__.py").read_text()
    chart.write_text(chart.read_text().replace("version: 1.2.3-rc.1", "version: 1.2.3rc1"))
    assert release.mismatches(repo) == [
        "manifests/evented-pleg-operator/Chart.yaml: 1.2.3rc1 (pyproject.toml says 1.2.3-rc.1)"
    ]


def test_check_refuses_a_source_version_that_is_not_pep440_normal(tmp_path: Path) -> None:
    repo = copy_places(tmp_path)
    release.set_version(repo, "1.2.3")
    release.SOURCE.write(repo, "1.2.3-rc.1")
    assert release.mismatches(repo) == ["pyproject.toml: 1.2.3-rc.1 is not PEP 440's normal form 1.2.3rc1"]


@pytest.mark.parametrize("bad", ["v1.2.3", "1.2", "1.2.3-dev", ""])
def test_set_refuses_what_is_not_a_release_version(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match="not a release version"):
        release.set_version(copy_places(tmp_path), bad)


def test_pin_image_sets_the_digest_and_architectures_of_a_copy_of_the_values(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    shutil.copy(REPO / "manifests/evented-pleg-operator/values.yaml", values)
    digest = "sha256:" + "0f" * 32
    release.pin_image(values, digest, ["arm64"])
    pinned = yaml.safe_load(values.read_text())["image"]
    assert pinned["digest"] == digest
    assert pinned["architectures"] == ["arm64"]
    # Everything else is the chart's own text, comments included.
    original = (REPO / "manifests/evented-pleg-operator/values.yaml").read_text().splitlines()
    changed = [a for a, b in zip(original, values.read_text().splitlines(), strict=True) if a != b]
    assert len(changed) == 2
    with pytest.raises(ValueError, match="no `  digest"):
        release.pin_image(values, digest, ["amd64"])  # already pinned: nothing left to pin
    with pytest.raises(ValueError, match="not an image digest"):
        release.pin_image(values, "sha256:abc", ["amd64"])
    with pytest.raises(ValueError, match="one or more architectures"):
        release.pin_image(values, digest, [])


def _blob(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


AMD, ARM = "sha256:" + "1" * 64, "sha256:" + "2" * 64


def _index_archive(archive: Path) -> str:
    """An OCI archive of an image index for linux/amd64 and linux/arm64; returns the index's digest."""
    listed = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {"digest": AMD, "platform": {"os": "linux", "architecture": "amd64"}},
                {"digest": ARM, "platform": {"os": "linux", "architecture": "arm64"}},
            ],
        }
    ).encode()
    top = "sha256:" + hashlib.sha256(listed).hexdigest()
    with tarfile.open(archive, "w") as tar:
        index = {"manifests": [{"mediaType": "application/vnd.oci.image.index.v1+json", "digest": top}]}
        _blob(tar, "index.json", json.dumps(index).encode())
        _blob(tar, f"blobs/sha256/{top.removeprefix('sha256:')}", listed)
    return top


def _published(directory: Path, digest: str | None = None, platforms: tuple[str, ...] = ()) -> str:
    """A release directory as the build job uploads it; returns the archive's index digest."""
    directory.mkdir()
    top = _index_archive(directory / "evented-pleg-operator-0.1.0.oci.tar")
    image = {"name": "localhost/x:0.1.0", "digest": digest or top, "platforms": list(platforms)}
    described = {"version": "0.1.0", "revision": "abc", "created": "x", "image": image}
    (directory / "release.json").write_text(json.dumps(described))
    release.write_sums(directory)
    return top


def test_the_publish_job_signs_only_a_release_that_verifies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    both = ("linux/amd64", "linux/arm64")
    top = _published(tmp_path / "ok", platforms=both)
    assert release.main(["verify", str(tmp_path / "ok"), "v0.1.0"]) == 0
    assert capsys.readouterr().out == f"0.1.0 {top}\n"
    _published(tmp_path / "other-digest", "sha256:" + "ab" * 32, both)
    _published(tmp_path / "one-platform", None, both[:1])
    refusals = {
        "other-digest": ("v0.1.0", "holds"),
        "one-platform": ("v0.1.0", "not for exactly"),
        "ok": ("v0.1.1", "but the tag is v0.1.1"),
    }
    for name, (tag, why) in refusals.items():
        with pytest.raises(release.ReleaseError, match=why):
            release.verify_release(tmp_path / name, tag)
    (tmp_path / "ok" / "release.json").write_text("{}")  # changed after the sums were written
    with pytest.raises(release.ReleaseError, match=r"release\.json: checksum does not match SHA256SUMS"):
        release.verify_release(tmp_path / "ok")
    assert release.main(["verify", str(tmp_path / "ok")]) == 1


def test_platform_digests_of_an_image_index(tmp_path: Path) -> None:
    amd, arm = AMD, ARM
    listed = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {"digest": amd, "platform": {"os": "linux", "architecture": "amd64"}},
                {"digest": arm, "platform": {"os": "linux", "architecture": "arm64"}},
            ],
        }
    ).encode()
    top = "sha256:" + hashlib.sha256(listed).hexdigest()
    archive = tmp_path / "image.oci.tar"
    with tarfile.open(archive, "w") as tar:
        index = {"manifests": [{"mediaType": "application/vnd.oci.image.index.v1+json", "digest": top}]}
        _blob(tar, "index.json", json.dumps(index).encode())
        _blob(tar, f"blobs/sha256/{top.removeprefix('sha256:')}", listed)
    assert release.archive_digest(archive) == top
    assert release.platform_digests(archive) == {"linux/amd64": amd, "linux/arm64": arm}


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
    assert found.wheel.name == "evented_pleg_operator-0.1.0-py3-none-any.whl"
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
