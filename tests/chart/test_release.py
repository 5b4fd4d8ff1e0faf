"""hack/release.sh (without the image, which needs root and buildah: tests/image covers that build): the
wheel, the packaged chart and release.json all carry the tree's one version, and SHA256SUMS covers every
file and verifies. A version other than the tree's is refused before anything is built."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml

from eventedpleg import __version__
from tests.chart.chartlib import REPO, pod_specs, render


def release(tmp_path: Path, version: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "hack/release.sh", version, "--no-image"],
        cwd=REPO, env={**os.environ, "RELEASE_DIR": str(tmp_path)},
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip


@pytest.mark.slow
def test_release_files_agree_on_the_version(tmp_path: Path) -> None:
    done = release(tmp_path, __version__)
    assert done.returncode == 0, done.stdout + done.stderr
    names = sorted(p.name for p in tmp_path.iterdir())
    wheel = f"evented_pleg_operator-{__version__}-py3-none-any.whl"
    chart = f"evented-pleg-operator-{__version__}.tgz"
    assert names == sorted(["SHA256SUMS", chart, wheel, "nodeconfig.yaml", "release.json"])
    # What the README's install block and the chart's NOTES apply, so the directory alone is enough.
    assert (tmp_path / "nodeconfig.yaml").read_bytes() == (REPO / "examples" / "nodeconfig.yaml").read_bytes()
    with tarfile.open(tmp_path / chart) as tgz:
        member = tgz.extractfile("evented-pleg-operator/Chart.yaml")
        assert member is not None
        meta = yaml.safe_load(member)
    assert meta["version"] == meta["appVersion"] == __version__
    with zipfile.ZipFile(tmp_path / wheel) as zf:
        metadata = zf.read(f"evented_pleg_operator-{__version__}.dist-info/METADATA").decode()
        assert f"\nVersion: {__version__}\n" in metadata
        assert f"evented_pleg_operator-{__version__}.dist-info/licenses/LICENSE" in zf.namelist()
        assert not [n for n in zf.namelist() if n.startswith("eventedpleg_lab/")]
    described = json.loads((tmp_path / "release.json").read_text())
    assert described["version"] == __version__
    assert described["revision"].startswith(
        subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                       check=True).stdout.strip()
    )  # fmt: skip
    sums = (tmp_path / "SHA256SUMS").read_text().splitlines()
    assert sorted(line.split("  ")[1] for line in sums) == sorted(n for n in names if n != "SHA256SUMS")
    check = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=tmp_path, capture_output=True, check=False)
    assert check.returncode == 0, check.stdout
    # The package's defaults are true for this version: its image tag, the runbooks at its tag.
    rendered = render({"prometheusRule.enabled": True}, chart=tmp_path / chart)
    images = {c["image"] for _, spec in pod_specs(rendered.docs) for c in spec["containers"]}
    assert images == {f"ghcr.io/eventedpleg/evented-pleg-operator:{__version__}"}
    rule = rendered.find("PrometheusRule", "evented-pleg-operator")
    rules = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    tagged = f"https://github.com/eventedpleg/evented-pleg-operator/blob/v{__version__}/docs/runbooks.md"
    assert rules and {r["annotations"]["runbook_url"].split("#")[0] for r in rules} == {tagged}


@pytest.mark.parametrize("other", ["9.9.9", f"{__version__}-rc.1", f"{__version__}rc1"])
def test_another_version_is_refused_before_building(tmp_path: Path, other: str) -> None:
    done = release(tmp_path, other)
    assert done.returncode == 2
    assert f"error: the tree is {__version__}, not {other}" in done.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("bad", ["0.2", "v0.2.0", "0.2.0-rc1"])
def test_what_is_not_a_version_is_refused_with_the_forms_that_are(tmp_path: Path, bad: str) -> None:
    done = release(tmp_path, bad)
    assert done.returncode == 2
    assert "not a release version: MAJOR.MINOR.PATCH, optionally a pre-release (0.2.0rc1 or 0.2.0-rc.1" in (
        done.stderr
    )
    assert f"error: bad version {bad}" in done.stderr
    assert not list(tmp_path.iterdir())
