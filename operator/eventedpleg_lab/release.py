"""The release's version, one value in every place that carries it, and the release's checksums.

`[project] version` in pyproject.toml is the source; `set_version` writes the same value into every other
place that must state it literally (the lab's distribution and its pin, the package's __version__, the
chart's `version` and `appVersion`, the Dockerfile's default image label), and `mismatches` lists any that
disagree. hack/release.sh refuses to build while any does; tests/unit/test_versions_agree.py checks the tree.

    python -m eventedpleg_lab.release check             # exit 1 and one line per disagreement
    python -m eventedpleg_lab.release set 0.2.0         # write it everywhere
    python -m eventedpleg_lab.release sums DIR          # SHA256SUMS for every file in DIR (sha256sum -c)
    python -m eventedpleg_lab.release digest ARCHIVE    # the image manifest's digest in an OCI archive
    python -m eventedpleg_lab.release tool syft         # the path of a release tool, built when missing
    python -m eventedpleg_lab.release cached-image V    # where hack/release.sh keeps its image between runs
    python -m eventedpleg_lab.release build             # hack/release.sh's files for this tree, in the cache

`ensure` is how the lab gets what it installs: the files hack/release.sh made for this tree (its wheel,
chart package, image archive, SBOM, release.json and SHA256SUMS), made again unless the cache holds a
release of this very commit whose checksums verify.
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

# PEP 440 public versions as releases use them (1.2.3, 1.2.3rc1); also valid SemVer for the chart when
# the pre-release part is absent, which is what a published chart should carry.
VERSION_RE = re.compile(r"^\d+\.\d+\.\d+(?:(?:a|b|rc)\d+)?$")
SUMS = "SHA256SUMS"


@dataclass(frozen=True)
class Place:
    """One literal version in one file: `pattern` has a single group, the version."""

    path: str
    pattern: str
    template: str  # the text written back, with {v}

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


SOURCE = Place("pyproject.toml", r'^version = "([^"]+)"$', 'version = "{v}"')
PLACES = (
    Place("operator/pyproject.toml", r'^version = "([^"]+)"$', 'version = "{v}"'),
    Place("operator/pyproject.toml", r'"evented-pleg-operator==([^"]+)"', '"evented-pleg-operator=={v}"'),
    Place("operator/eventedpleg/__init__.py", r'^__version__ = "([^"]+)"$', '__version__ = "{v}"'),
    Place("manifests/evented-pleg-operator/Chart.yaml", r"^version: (\S+)$", "version: {v}"),
    Place("manifests/evented-pleg-operator/Chart.yaml", r'^appVersion: "([^"]+)"$', 'appVersion: "{v}"'),
    Place("Dockerfile", r"^ARG VERSION=(\S+)$", "ARG VERSION={v}"),
)


def version(repo: Path) -> str:
    found = SOURCE.find(repo)
    if found is None:
        raise ValueError("pyproject.toml has no [project] version")
    return found


def mismatches(repo: Path) -> list[str]:
    """One line per place whose version is not pyproject.toml's."""
    want = version(repo)
    problems = []
    for place in PLACES:
        found = place.find(repo)
        if found != want:
            problems.append(f"{place.path}: {found or 'no version'} (pyproject.toml says {want})")
    return problems


def set_version(repo: Path, new: str) -> None:
    if not VERSION_RE.match(new):
        raise ValueError(f"{new!r} is not a release version (MAJOR.MINOR.PATCH, optionally a|b|rcN)")
    for place in (SOURCE, *PLACES):
        place.write(repo, new)


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
    """The digest of the one image manifest an OCI archive holds (what `image@digest` pulls)."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        if member is None:
            raise ValueError(f"{archive}: no index.json (not an OCI archive)")
        manifests = json.load(member).get("manifests") or []
    if len(manifests) != 1:
        raise ValueError(f"{archive}: {len(manifests)} manifests in index.json, expected 1")
    digest: str = manifests[0]["digest"]
    return digest


class ReleaseError(RuntimeError):
    """hack/release.sh failed, or its files are not what it promises."""


@dataclass(frozen=True)
class ReleaseFiles:
    """The files of one hack/release.sh run (release.json says what they are)."""

    directory: Path
    version: str
    revision: str  # the commit, with "-dirty" when the tree had changes
    image_name: str  # localhost/evented-pleg-operator:VERSION, the name inside the archive
    image_digest: str  # the image manifest's digest: what a node pulls by

    @property
    def wheel(self) -> Path:
        return self.directory / f"evented_pleg_operator-{self.version}-py3-none-any.whl"

    @property
    def chart(self) -> Path:
        return self.directory / f"evented-pleg-operator-{self.version}.tgz"

    @property
    def archive(self) -> Path:
        return self.directory / f"evented-pleg-operator-{self.version}.oci.tar"

    @property
    def sbom(self) -> Path:
        return self.directory / f"evented-pleg-operator-{self.version}.spdx.json"


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
        directory, described["version"], described["revision"], image["name"], image["digest"]
    )


def cached_image(version_: str) -> Path:
    from eventedpleg_lab import image  # noqa: PLC0415 - the image builder only where an image is made

    return image.image_dir() / f"{image.NAME}-{version_}-release.oci.tar"


def release_dir(version_: str) -> Path:
    from eventedpleg_lab.localcluster import build  # noqa: PLC0415 - only the commands that build need it

    return build.cache_dir() / "release" / version_


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
        if len(args) == 2 and args[0] == "sums":
            print(write_sums(Path(args[1])))
            return 0
        if len(args) == 2 and args[0] == "digest":
            print(archive_digest(Path(args[1])))
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
        "usage: eventedpleg_lab.release check | set VERSION | sums DIR | digest ARCHIVE | tool NAME"
        " | cached-image VERSION | build",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
