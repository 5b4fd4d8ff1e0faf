"""The release's version, one value in every place that carries it, and the release's checksums.

`[project] version` in pyproject.toml is the source (PEP 440); `set_version` writes the same version into
every other place that must state it literally, each in its own spelling (the lab's distribution and its
pin, the package's __version__ and the Dockerfile's default image label in PEP 440; the chart's `version`
and `appVersion` in SemVer), and `mismatches` lists any that disagree. hack/release.sh refuses to build
while any does; tests/unit/lab/test_versions_agree.py checks the tree.

    python -m eventedpleg_lab.release check             # exit 1 and one line per disagreement
    python -m eventedpleg_lab.release set 0.2.0-rc.1    # write it everywhere (either spelling)
    python -m eventedpleg_lab.release versions 0.2.0rc1 # "0.2.0rc1 0.2.0-rc.1": PEP 440, SemVer
    python -m eventedpleg_lab.release pin-image VALUES sha256:... amd64 arm64  # the packaged chart's image
    python -m eventedpleg_lab.release sums DIR          # SHA256SUMS for every file in DIR (sha256sum -c)
    python -m eventedpleg_lab.release digest ARCHIVE    # the image (index) digest in an OCI archive
    python -m eventedpleg_lab.release verify DIR [TAG]  # "VERSION DIGEST" once everything checks (below)
    python -m eventedpleg_lab.release platforms ARCHIVE # "linux/arm64 sha256:..." per platform in it
    python -m eventedpleg_lab.release tool syft         # the path of a release tool, built when missing
    python -m eventedpleg_lab.release cached-image V    # where hack/release.sh keeps its image between runs
    python -m eventedpleg_lab.release build             # hack/release.sh's files for this tree, in the cache

`ensure` is how the lab gets what it installs: the files hack/release.sh made for this tree (its wheel,
chart package, image archive, SBOMs, base package sets, release.json and SHA256SUMS), made again unless
the cache holds a release of this very commit whose checksums verify.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

# A release version in either spelling: PEP 440 (0.2.0, 0.2.0rc1: the wheel, the package's __version__) or
# SemVer 2 (0.2.0, 0.2.0-rc.1: the chart, the image tag, the git tag v0.2.0-rc.1). Pre-releases are
# alpha, beta and rc; `ReleaseVersion.parse` maps one spelling to the other.
VERSION_RE = re.compile(
    r"^(?P<release>\d+\.\d+\.\d+)(?:(?:(?P<pep>a|b|rc)|-(?P<semver>alpha|beta|rc)\.)(?P<n>\d+))?$"
)
_PRE = {"a": "alpha", "b": "beta", "rc": "rc"}
SUMS = "SHA256SUMS"


@dataclass(frozen=True)
class ReleaseVersion:
    """One release's version in both spellings a release needs."""

    python: str  # PEP 440, normalized: 0.2.0rc1
    semver: str  # SemVer 2: 0.2.0-rc.1

    @classmethod
    def parse(cls, text: str) -> ReleaseVersion:
        match = VERSION_RE.match(text)
        if match is None:
            raise ValueError(
                f"{text!r} is not a release version: MAJOR.MINOR.PATCH, optionally a pre-release"
                " (0.2.0rc1 or 0.2.0-rc.1; a/alpha, b/beta, rc)"
            )
        release, n = match.group("release"), match.group("n")
        pep = match.group("pep") or {v: k for k, v in _PRE.items()}.get(match.group("semver") or "")
        if pep is None:
            return cls(release, release)
        return cls(f"{release}{pep}{n}", f"{release}-{_PRE[pep]}.{n}")

    @property
    def prerelease(self) -> bool:
        return self.python != self.semver


@dataclass(frozen=True)
class Place:
    """One literal version in one file: `pattern` has a single group, the version, in `spelling`."""

    path: str
    pattern: str
    template: str  # the text written back, with {v}
    spelling: str = "python"  # or "semver"

    def find(self, repo: Path) -> str | None:
        match = re.search(self.pattern, (repo / self.path).read_text(), re.MULTILINE)
        return match.group(1) if match else None

    def write(self, repo: Path, version: str) -> None:
        file = repo / self.path
        text, count = re.subn(
            self.pattern, self.template.format(v=version), file.read_text(), count=1, flags=re.MULTILINE
        )
        if count != 1:
            raise ValueError(f"{self.path}: no match for {self.pattern}")
        file.write_text(text)


CHART_YAML = "manifests/evented-pleg-operator/Chart.yaml"
SOURCE = Place("pyproject.toml", r'^version = "([^"]+)"$', 'version = "{v}"')
PLACES = (
    Place("operator/pyproject.toml", r'^version = "([^"]+)"$', 'version = "{v}"'),
    Place("operator/pyproject.toml", r'"evented-pleg-operator==([^"]+)"', '"evented-pleg-operator=={v}"'),
    Place("operator/eventedpleg/__init__.py", r'^__version__ = "([^"]+)"$', '__version__ = "{v}"'),
    Place(CHART_YAML, r"^version: (\S+)$", "version: {v}", "semver"),
    Place(CHART_YAML, r'^appVersion: "([^"]+)"$', 'appVersion: "{v}"', "semver"),
    Place("Dockerfile", r"^ARG VERSION=(\S+)$", "ARG VERSION={v}"),
)


def version(repo: Path) -> str:
    found = SOURCE.find(repo)
    if found is None:
        raise ValueError("pyproject.toml has no [project] version")
    return found


def mismatches(repo: Path) -> list[str]:
    """One line per place whose version is not pyproject.toml's (in that place's spelling)."""
    source = version(repo)
    try:
        want = ReleaseVersion.parse(source)
    except ValueError as exc:
        return [f"pyproject.toml: {exc}"]
    if want.python != source:
        return [f"pyproject.toml: {source} is not PEP 440's normal form {want.python}"]
    problems = []
    for place in PLACES:
        found, expected = place.find(repo), getattr(want, place.spelling)
        if found != expected:
            problems.append(f"{place.path}: {found or 'no version'} (pyproject.toml says {expected})")
    return problems


def set_version(repo: Path, new: str) -> None:
    """Write `new` (either spelling) everywhere, each place in its own spelling."""
    wanted = ReleaseVersion.parse(new)
    SOURCE.write(repo, wanted.python)
    for place in PLACES:
        place.write(repo, getattr(wanted, place.spelling))


# The packaged chart's image: `image.digest` and `image.architectures` in values.yaml, which hack/release.sh
# sets to the release's image index and its platforms, so `helm install` of a release pulls exactly the
# image released with it, on the nodes it runs on.
DIGEST_RE = re.compile(r'^(  digest: )""', re.MULTILINE)
ARCHES_RE = re.compile(r"^(  architectures: )\[[^\]\n]*\]", re.MULTILINE)


def pin_image(values: Path, digest: str, arches: Sequence[str]) -> None:
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise ValueError(f"{digest!r} is not an image digest (sha256:<64 hex>)")
    if not arches or not all(re.fullmatch(r"[a-z0-9]+", a) for a in arches):
        raise ValueError(f"{list(arches)!r}: name one or more architectures (amd64, arm64)")
    text, pinned = DIGEST_RE.subn(rf'\g<1>"{digest}"', values.read_text(), count=1)
    text, listed = ARCHES_RE.subn(rf"\g<1>[{', '.join(arches)}]", text, count=1)
    if pinned != 1 or listed != 1:
        raise ValueError(f'{values}: no `  digest: ""` and `  architectures: [...]` under image: to pin')
    values.write_text(text)


def _sha256(file: Path) -> str:
    digest = hashlib.sha256()
    with file.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_sums(directory: Path) -> Path:
    """SHA256SUMS in `sha256sum` format for every other file in `directory`, sorted by name."""
    lines = [
        f"{_sha256(file)}  {file.name}\n"
        for file in sorted(p for p in directory.iterdir() if p.is_file() and p.name != SUMS)
    ]
    target = directory / SUMS
    target.write_text("".join(lines))
    return target


def sum_problems(directory: Path) -> list[str]:
    """What `sha256sum -c SHA256SUMS` would complain about in `directory`, one line each (empty: all
    verify), and any file there the sums do not cover."""
    sums = directory / SUMS
    if not sums.is_file():
        return [f"{sums}: missing"]
    listed: dict[str, str] = {}
    for line in sums.read_text().splitlines():
        digest, _, name = line.partition("  ")
        listed[name] = digest
    problems = []
    for name, digest in listed.items():
        file = directory / name
        if not file.is_file():
            problems.append(f"{name}: missing")
        elif _sha256(file) != digest:
            problems.append(f"{name}: checksum does not match {SUMS}")
    extra = sorted(p.name for p in directory.iterdir() if p.is_file() and p.name not in {SUMS, *listed})
    problems += [f"{name}: not in {SUMS}" for name in extra]
    return problems


def archive_digest(archive: Path) -> str:
    """The digest of the one image manifest or image index an OCI archive holds (what `image@digest`
    pulls)."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        if member is None:
            raise ValueError(f"{archive}: no index.json (not an OCI archive)")
        manifests = json.load(member).get("manifests") or []
    if len(manifests) != 1:
        raise ValueError(f"{archive}: {len(manifests)} manifests in index.json, expected 1")
    digest: str = manifests[0]["digest"]
    return digest


INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)


def platform_digests(archive: Path) -> dict[str, str]:
    """`os/arch` -> the digest of that platform's image manifest, in the image index an OCI archive holds
    (an archive of one image: its platform is not recorded there, so the key is "")."""
    top = archive_digest(archive)
    with tarfile.open(archive) as tar:
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
        if index["manifests"][0].get("mediaType") not in INDEX_TYPES:
            return {"": top}
        member = tar.extractfile(f"blobs/{top.replace(':', '/')}")
        if member is None:
            raise ValueError(f"{archive}: the image index {top} is not in the archive")
        listed = json.load(member)["manifests"]
    return {f"{m['platform']['os']}/{m['platform']['architecture']}": m["digest"] for m in listed}


class ReleaseError(RuntimeError):
    """hack/release.sh failed, or its files are not what it promises."""


@dataclass(frozen=True)
class ReleaseFiles:
    """The files of one hack/release.sh run (release.json says what they are)."""

    directory: Path
    version: str  # SemVer: the chart's version and the image's tag
    python_version: str  # PEP 440: the wheel's
    revision: str  # the commit, with "-dirty" when the tree had changes
    image_name: str  # localhost/evented-pleg-operator:VERSION, the name inside the archive
    image_digest: str  # the image manifest's digest: what a node pulls by

    @property
    def wheel(self) -> Path:
        return self.directory / f"evented_pleg_operator-{self.python_version}-py3-none-any.whl"

    @property
    def chart(self) -> Path:
        return self.directory / f"evented-pleg-operator-{self.version}.tgz"

    @property
    def archive(self) -> Path:
        return self.directory / f"evented-pleg-operator-{self.version}.oci.tar"

    def sbom(self, arch: str) -> Path:
        return self.directory / f"evented-pleg-operator-{self.version}.linux-{arch}.spdx.json"


def read_release(directory: Path) -> ReleaseFiles:
    """The release in `directory`; ReleaseError unless release.json is there, names an image, and every
    checksum verifies."""
    problems = sum_problems(directory)
    if problems:
        raise ReleaseError(f"{directory}: {'; '.join(problems)}")
    described = json.loads((directory / "release.json").read_text())
    image = described.get("image") or {}
    if not image.get("digest"):
        raise ReleaseError(f"{directory}: a release without its image (hack/release.sh --no-image)")
    return ReleaseFiles(
        directory,
        described["version"],
        described.get("python_version", described["version"]),
        described["revision"],
        image["name"],
        image["digest"],
    )


def verify_release(directory: Path, tag: str | None = None) -> ReleaseFiles:
    """What the release workflow's publish job checks before it signs a file built by another job: every
    file against SHA256SUMS (none missing, none added), release.json naming the image index the archive
    holds (its digest, and exactly its platforms), and, given the git tag, that the release is its
    version. ReleaseError names the first thing that does not hold."""
    files = read_release(directory)
    if tag is not None and tag != f"v{files.version}":
        raise ReleaseError(f"{directory}: release {files.version}, but the tag is {tag}")
    held = archive_digest(files.archive)
    if held != files.image_digest:
        raise ReleaseError(f"{files.archive.name} holds {held}, release.json says {files.image_digest}")
    described = json.loads((directory / "release.json").read_text())
    platforms = sorted(described["image"].get("platforms") or [])
    if platforms != sorted(platform_digests(files.archive)):
        raise ReleaseError(f"{files.archive.name} is not for exactly {', '.join(platforms)} (release.json)")
    return files


def cached_image(version_: str) -> Path:
    from eventedpleg_lab import image  # noqa: PLC0415 - the image builder only where an image is made

    return image.image_dir() / f"{image.NAME}-{version_}-release.oci.tar"


def release_dir(version_: str) -> Path:
    from eventedpleg_lab.localcluster import build  # noqa: PLC0415 - only the commands that build need it

    return build.cache_dir() / "release" / ReleaseVersion.parse(version_).semver


def _head(repo: Path) -> str | None:
    """HEAD's commit when the tree is clean (a release of it is that commit's), else None."""

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=False)

    head, clean = git("rev-parse", "HEAD"), git("diff", "--quiet", "HEAD", "--")
    return head.stdout.strip() if head.returncode == 0 and clean.returncode == 0 else None


def ensure(repo: Path, log: Callable[[str], None] = lambda _: None) -> ReleaseFiles:
    """hack/release.sh's files for the tree's version, in the cache (`release_dir`): the ones already
    there when they are a release of HEAD, the tree is clean and every checksum verifies; else made again
    (the image from the builder's cache when its inputs did not change, ~1 min; cold, minutes)."""
    version_ = version(repo)
    directory = release_dir(version_)
    head = _head(repo)
    if head is not None and (directory / "release.json").is_file():
        try:
            found = read_release(directory)
        except (ReleaseError, OSError, ValueError, KeyError) as exc:
            log(f"[release] {directory} is made again: {exc}")
        else:
            if found.revision == head:
                log(f"[release] {directory}: the release of {head[:12]} (checksums verified)")
                return found
    log(f"[release] bash hack/release.sh {version_} (into {directory})")
    done = subprocess.run(
        ["bash", "hack/release.sh", version_], cwd=repo, env={**os.environ, "RELEASE_DIR": str(directory)},
        capture_output=True, text=True, check=False, timeout=3600,
    )  # fmt: skip
    if done.returncode != 0:
        raise ReleaseError(f"hack/release.sh {version_}: {(done.stderr or done.stdout).strip()[-800:]}")
    return read_release(directory)


def tool(name: str) -> Path:
    from eventedpleg_lab.localcluster import build  # noqa: PLC0415 - only this command needs it

    if name == "helm":  # honours $EVENTEDPLEG_BIN_DIR, as everywhere else
        return build.ensure(("helm",))["helm"]
    tools = {comp.name: comp for comp in build.RELEASE_TOOLS}
    if name not in tools:
        raise ValueError(f"no release tool {name!r}; one of helm, {', '.join(sorted(tools))}")
    return build.ensure_component(tools[name])[tools[name].binaries[0]]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    repo = Path(__file__).resolve().parents[2]
    try:
        if args == ["check"]:
            problems = mismatches(repo)
            for problem in problems:
                print(f"error: version mismatch: {problem}", file=sys.stderr)
            if not problems:
                print(version(repo))
            return 1 if problems else 0
        if len(args) == 2 and args[0] == "set":
            set_version(repo, args[1])
            return 0
        if len(args) == 2 and args[0] == "versions":
            parsed = ReleaseVersion.parse(args[1])
            print(parsed.python, parsed.semver)
            return 0
        if len(args) >= 4 and args[0] == "pin-image":
            pin_image(Path(args[1]), args[2], args[3:])
            return 0
        if len(args) == 2 and args[0] == "sums":
            print(write_sums(Path(args[1])))
            return 0
        if len(args) == 2 and args[0] == "digest":
            print(archive_digest(Path(args[1])))
            return 0
        if len(args) in (2, 3) and args[0] == "verify":
            verified = verify_release(Path(args[1]), args[2] if len(args) == 3 else None)
            print(verified.version, verified.image_digest)
            return 0
        if len(args) == 2 and args[0] == "platforms":
            for platform, digest in platform_digests(Path(args[1])).items():
                print(platform, digest)
            return 0
        if len(args) == 2 and args[0] == "tool":
            print(tool(args[1]))
            return 0
        if len(args) == 2 and args[0] == "cached-image":
            print(cached_image(args[1]))
            return 0
        if args == ["build"]:
            print(ensure(repo, log=lambda line: print(line, file=sys.stderr)).directory)
            return 0
    except (OSError, ValueError, tarfile.TarError, RuntimeError, subprocess.SubprocessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(
        "usage: eventedpleg_lab.release check | set VERSION | versions VERSION"
        " | pin-image VALUES DIGEST ARCH... | platforms ARCHIVE | sums DIR | digest ARCHIVE"
        " | verify DIR [TAG] | tool NAME | cached-image VERSION | build",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
