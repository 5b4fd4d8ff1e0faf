"""The image hack/release.sh built for real from the Dockerfile (`eventedpleg lab image`: mmdebstrap bases,
buildah with vfs storage and chroot isolation, one OCI image index for linux/amd64 and linux/arm64; the
archive the lab installs), then opened from that archive in a fresh buildah store and run, each platform:
the CLI and both subcommands answer (arm64 under qemu-user-static), the default user is 65532, no
installer is left, nsenter is there, and the labels are the release's, its base's package set included.

The `image` tests need root on Linux with buildah and mmdebstrap (Debian packages), and for arm64 qemu
through binfmt_misc, which hack/emulation.sh sets up (it installs qemu-user-static when missing); anywhere
else they SKIP and say why."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from eventedpleg import __version__
from eventedpleg_lab import image, release

REPO = Path(__file__).resolve().parents[2]


def test_context_is_the_dockerignore_allow_list() -> None:
    files = image.context_files(REPO)
    assert {"pyproject.toml", "README.md", "hack/constraints.txt", "crds/nodeconfig.yaml"} <= set(files)
    assert "operator/eventedpleg/cli/__init__.py" in files
    assert "manifests/evented-pleg-operator/values.yaml" in files
    tops = {f.split("/")[0] for f in files}
    assert tops == {
        "pyproject.toml", "README.md", "LICENSE", "hack", "operator", "templates", "crds", "manifests"
    }  # fmt: skip
    assert not [f for f in files if "__pycache__" in f or f.endswith(".pyc")]
    assert not [f for f in files if f.startswith("operator/eventedpleg_lab/")]  # the lab is not in the image
    assert [f for f in files if f.startswith("hack/")] == ["hack/constraints.txt"]  # not lock.sh


def test_inputs_digest_follows_every_input(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM x\n")
    (tmp_path / "a.txt").write_text("a")
    args = {"VERSION": "1"}
    first = image.inputs_digest(tmp_path, ["a.txt"], "base1", args)
    assert first == image.inputs_digest(tmp_path, ["a.txt"], "base1", dict(args))
    (tmp_path / "a.txt").write_text("b")
    changed = image.inputs_digest(tmp_path, ["a.txt"], "base1", args)
    (tmp_path / "Dockerfile").write_text("FROM y\n")
    dockerfile = image.inputs_digest(tmp_path, ["a.txt"], "base1", args)
    digests = {
        first,
        changed,
        dockerfile,
        image.inputs_digest(tmp_path, ["a.txt"], "base2", args),
        image.inputs_digest(tmp_path, ["a.txt"], "base1", {"VERSION": "2"}),
        image.inputs_digest(tmp_path, [], "base1", args),
    }
    assert len(digests) == 6


def test_a_foreign_platform_is_built_for_its_architecture(tmp_path: Path) -> None:
    argv = image.bud_argv(tmp_path / "s", tmp_path / "r", REPO, image.TAG, {}, None, "arm64")
    assert "--platform=linux/arm64" in argv
    assert not [a for a in image.bud_argv(tmp_path, tmp_path, REPO, image.TAG, {}, None) if "--platform" in a]
    assert "--architectures=arm64" in image.mmdebstrap_argv(tmp_path / "rootfs.tar", "arm64")
    assert image.base_name(image.host_arch()) == image.BASE_IMAGE
    foreign = next(a for a in image.ARCHES if a != image.host_arch())
    assert image.base_name(foreign) == f"{image.BASE_IMAGE}-{foreign}"


def test_the_base_package_set_is_every_installed_package() -> None:
    status = (
        "Package: libc6\nStatus: install ok installed\nArchitecture: arm64\nVersion: 2.36-9+deb12u13\n"
        "Description: GNU C Library\n continuation: not a field\n\n"
        "Package: gone\nStatus: deinstall ok config-files\nArchitecture: arm64\nVersion: 1\n\n"
        "Package: base-files\nStatus: install ok installed\nArchitecture: arm64\nVersion: 12.4+deb12u13\n"
    )
    assert image.dpkg_packages(status) == ["base-files:arm64=12.4+deb12u13", "libc6:arm64=2.36-9+deb12u13"]


def test_a_foreign_architecture_needs_qemu_registered_with_the_f_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(image, "BINFMT", tmp_path)
    monkeypatch.setattr(image, "host_arch", lambda: "amd64")
    assert image.foreign_arch_problem("amd64") is None
    assert "install qemu-user-static" in (image.foreign_arch_problem("arm64") or "")
    entry = tmp_path / "qemu-aarch64"
    entry.write_text("enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: P\noffset 0\n")
    assert "lacks the F flag" in (image.foreign_arch_problem("arm64") or "")
    entry.write_text("disabled\nflags: PF\n")
    assert "is disabled" in (image.foreign_arch_problem("arm64") or "")
    entry.write_text("enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: PF\n")
    assert image.foreign_arch_problem("arm64") is None


def test_emulation_script_answers_for_the_host_and_refuses_an_unknown_architecture() -> None:
    script = str(REPO / "hack" / "emulation.sh")
    host = subprocess.run(["bash", script, image.host_arch()], capture_output=True, text=True, check=False)
    assert (host.returncode, host.stdout, host.stderr) == (0, "", "")
    unknown = subprocess.run(["bash", script, "mips"], capture_output=True, text=True, check=False)
    assert unknown.returncode == 2 and "no qemu mapping for mips" in unknown.stderr


def test_build_passes_the_ca_bundle_as_a_secret(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    argv = image.bud_argv(tmp_path / "s", tmp_path / "r", REPO, image.TAG, {"VERSION": "0.1.0"}, ca)
    assert f"--secret=id=pip-ca,src={ca}" in argv
    assert not [a for a in argv if a.startswith(("--volume", "-v"))]  # a bind mount leaves its mount point
    assert {"--isolation=chroot", "--pull-never", "--storage-driver=vfs"} <= set(argv)
    without = image.bud_argv(tmp_path / "s", tmp_path / "r", REPO, image.TAG, {}, None)
    assert not [a for a in without if a.startswith("--secret")]
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "--mount=type=secret,id=pip-ca" in dockerfile and image.BUILD_CA == "/run/secrets/pip-ca"


# --- the real build --------------------------------------------------------------------------------------


def _requested() -> list[str]:
    """The architectures hack/release.sh builds here (RELEASE_ARCHES; hack/test.sh sets amd64 alone)."""
    return os.environ.get("RELEASE_ARCHES", " ".join(image.ARCHES)).split()


def _why_not() -> str | None:
    if os.uname().sysname != "Linux" or os.geteuid() != 0:
        return "needs root on Linux (buildah --isolation chroot, mmdebstrap)"
    missing = [tool for tool in ("buildah", "mmdebstrap") if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} not installed (apt-get install buildah mmdebstrap)"
    for arch in _requested():  # what hack/release.sh does itself: qemu for the foreign architecture
        done = subprocess.run(
            ["bash", str(REPO / "hack" / "emulation.sh"), arch], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            return done.stderr.strip() or f"hack/emulation.sh {arch}: exit {done.returncode}"
    return None


@dataclass
class Opened:
    """The archive's image of one platform committed into a fresh store, as a working container."""

    built: release.ReleaseFiles
    arch: str
    buildah: list[str]
    container: str

    def run(self, *argv: str, user: str | None = None) -> subprocess.CompletedProcess[str]:
        who = [f"--user={user}"] if user else []
        return subprocess.run(
            [*self.buildah, "run", "--isolation=chroot", *who, self.container, "--", *argv],
            capture_output=True, text=True, check=False, timeout=600,
        )  # fmt: skip


@pytest.fixture(scope="module")
def built() -> release.ReleaseFiles:
    reason = _why_not()
    if reason:
        pytest.skip(f"IMAGE NOT BUILT, image tests SKIPPED: {reason}")
    return release.ensure(REPO)  # hack/release.sh's image archive, the one the lab installs


@pytest.fixture(scope="module", params=image.ARCHES)
def opened(request: pytest.FixtureRequest, built: release.ReleaseFiles) -> Iterator[Opened]:
    arch: str = request.param
    if f"linux/{arch}" not in release.platform_digests(built.archive):
        pytest.skip(f"linux/{arch} is not in this release (RELEASE_ARCHES={' '.join(_requested())})")
    root = Path(tempfile.mkdtemp(prefix=f"store-{arch}-", dir=image.image_dir()))
    buildah = ["buildah", f"--root={root / 'store'}", f"--runroot={root / 'run'}", "--storage-driver=vfs"]
    done = subprocess.run(
        [*buildah, "from", "--pull-never", f"--arch={arch}", f"oci-archive:{built.archive}"],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    container = done.stdout.strip().splitlines()[-1]
    yield Opened(built, arch, buildah, container)
    subprocess.run([*buildah, "rm", container], capture_output=True, check=False)
    subprocess.run([*buildah, "rmi", "--all", "--force"], capture_output=True, check=False)
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.image
def test_archive_is_one_image_index_of_the_platforms_asked_for(built: release.ReleaseFiles) -> None:
    arches = [arch for arch in image.ARCHES if arch in _requested()]
    platforms = release.platform_digests(built.archive)
    assert sorted(platforms) == [f"linux/{arch}" for arch in arches]
    described = json.loads((built.directory / "release.json").read_text())
    assert described["image"]["platforms"] == [f"linux/{arch}" for arch in arches]
    # The packaged chart installs exactly this index, on exactly these architectures.
    with tarfile.open(built.chart) as tgz:
        member = tgz.extractfile("evented-pleg-operator/values.yaml")
        assert member is not None
        values = yaml.safe_load(member)["image"]
    assert values["digest"] == built.image_digest == release.archive_digest(built.archive)
    assert values["architectures"] == arches
    for arch in arches:
        sbom = json.loads(built.sbom(arch).read_text())
        assert sbom["spdxVersion"].startswith("SPDX-") and sbom["packages"], arch


@pytest.mark.image
def test_archive_is_an_oci_image_with_the_tag(opened: Opened) -> None:
    assert opened.built.archive.stat().st_size > 20_000_000
    done = subprocess.run(
        ["tar", "-xOf", str(opened.built.archive), "index.json"], capture_output=True, text=True, check=True
    )
    (manifest,) = json.loads(done.stdout)["manifests"]
    assert manifest["annotations"]["org.opencontainers.image.ref.name"] == image.TAG


@pytest.mark.image
def test_image_config_user_entrypoint_and_cmd(opened: Opened) -> None:
    done = subprocess.run(
        [*opened.buildah, "inspect", "--type=container", opened.container],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    config = json.loads(done.stdout)["OCIv1"]["config"]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["eventedpleg"]
    assert config["Cmd"] == ["operator"]
    labels = config["Labels"]
    assert labels["org.opencontainers.image.version"] == __version__
    # hack/release.sh labels the commit and its commit time, as release.json states them.
    described = json.loads((opened.built.directory / "release.json").read_text())
    assert labels["org.opencontainers.image.revision"] == described["revision"] == opened.built.revision
    assert labels["org.opencontainers.image.created"] == described["created"]
    assert described["created"].endswith("Z") and len(described["created"]) == len("2026-01-01T00:00:00Z")
    assert labels["org.opencontainers.image.base.name"] == image.base_name(opened.arch)
    assert json.loads(done.stdout)["OCIv1"]["architecture"] == opened.arch
    # The base is named by its package set: the sha256 of this platform's lines in *.base-packages.
    listing = opened.built.directory / f"evented-pleg-operator-{opened.built.version}.base-packages"
    prefix = f"{opened.arch} "
    listed = listing.read_text().splitlines()
    lines = [line.removeprefix(prefix) for line in listed if line.startswith(prefix)]
    assert any(line.startswith(f"libc6:{opened.arch}=") for line in lines)
    packages = "".join(f"{line}\n" for line in lines).encode()
    assert labels["io.eventedpleg.base.packages"] == f"sha256:{hashlib.sha256(packages).hexdigest()}"
    assert re.fullmatch(r"(sha256:)?[0-9a-f]{64}", labels["io.eventedpleg.base.id"])


@pytest.mark.image
def test_the_license_is_in_the_image(opened: Opened) -> None:
    done = opened.run(
        "sh",
        "-c",
        "cat /opt/venv/lib/python3*/site-packages/evented_pleg_operator-*.dist-info/licenses/LICENSE",
    )
    assert done.returncode == 0, done.stderr
    assert "Apache License" in done.stdout and "Version 2.0, January 2004" in done.stdout


@pytest.mark.image
@pytest.mark.parametrize(
    ("argv", "expect"),
    [
        (["eventedpleg", "--version"], __version__),
        (["eventedpleg", "operator", "--help"], "--leader-elect / --no-leader-elect"),
        (["eventedpleg", "agent", "--help"], "--host-root"),
    ],
)
def test_cli_runs_inside_the_image(opened: Opened, argv: list[str], expect: str) -> None:
    done = opened.run(*argv)
    assert done.returncode == 0, done.stdout + done.stderr
    assert expect in done.stdout


@pytest.mark.image
def test_the_platform_is_the_one_that_runs(opened: Opened) -> None:
    """arm64's binaries really run as arm64 (under qemu-user-static on an amd64 host), not a host copy."""
    done = opened.run("python3", "-c", "import platform; print(platform.machine())")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == {"amd64": "x86_64", "arm64": "aarch64"}[opened.arch]


@pytest.mark.image
def test_runs_as_65532_by_default(opened: Opened) -> None:
    done = opened.run("id", "-u")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "65532"
    # kopf asks getpass.getuser() for its identity; a uid without a passwd entry crashed the operator.
    named = opened.run("python3", "-c", "import getpass; print(getpass.getuser())")
    assert named.returncode == 0, named.stderr
    assert named.stdout.strip() == "nonroot"


@pytest.mark.image
def test_no_installer_and_no_ca_bundle_left(opened: Opened) -> None:
    script = (
        "for t in pip pip3 pip3.11 easy_install; do command -v $t && exit 1; done; "
        "python3 -m pip --version 2>/dev/null && exit 2; "
        "python3 -c 'import setuptools' 2>/dev/null && exit 3; "
        "ls /usr/share/python-wheels 2>/dev/null && exit 4; "
        "ls /opt/venv/bin/pip* 2>/dev/null && exit 5; "
        f"test -e {image.BUILD_CA} && exit 6; "
        "test -e /wheels && exit 8; "
        "exit 0"
    )
    done = opened.run("sh", "-c", script)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stdout}{done.stderr}"
    # The host's CA bundle (extra local CAs) reached pip through a RUN mount only, never a layer.
    host_ca = image.HOST_CA.read_text() if image.HOST_CA.is_file() else None
    assert opened.run("cat", "/etc/ssl/certs/ca-certificates.crt").stdout != host_ca
    # The checks above can fail: the venv's python is there and runs.
    assert opened.run("/opt/venv/bin/python", "-c", "import eventedpleg").returncode == 0


@pytest.mark.image
def test_nsenter_is_there_for_the_agent(opened: Opened) -> None:
    done = opened.run("nsenter", "--version")
    assert done.returncode == 0, done.stderr
    assert "util-linux" in done.stdout
