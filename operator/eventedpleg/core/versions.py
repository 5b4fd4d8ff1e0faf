"""Parse the version strings Nodes report in status.nodeInfo.

Real values carry distro suffixes (`v1.30.2-eks-abc`, `v1.31.0+k3s1`, `containerd://1.7.13-0ubuntu1`); we keep
major.minor.patch and remember a pre-release tag, because an `-alpha`/`-rc` build is not the release our
matrix describes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

_SEMVER = re.compile(r"^v?(?P<major>\d+)\.(?P<minor>\d+)(?:\.(?P<patch>\d+))?(?P<rest>.*)$")
_PRERELEASE = re.compile(r"^-(alpha|beta|rc)[.\d]*", re.IGNORECASE)


class VersionError(ValueError):
    """A version string we cannot read; the node is reported Unsupported with this message."""


@dataclass(frozen=True, order=True)
class Version:
    major: int
    minor: int
    patch: int
    prerelease: str = ""

    def __str__(self) -> str:
        core = f"{self.major}.{self.minor}.{self.patch}"
        return f"{core}-{self.prerelease}" if self.prerelease else core

    @property
    def minor_pair(self) -> tuple[int, int]:
        return (self.major, self.minor)

    def at_least(self, major: int, minor: int, patch: int = 0) -> bool:
        return (self.major, self.minor, self.patch) >= (major, minor, patch)


def parse_version(text: str) -> Version:
    """`v1.30.2-eks-abc` → 1.30.2; `1.31.0+k3s1` → 1.31.0; `v1.37.0-rc.1` → 1.37.0-rc.1."""
    raw = text.strip()
    match = _SEMVER.match(raw)
    if not match:
        raise VersionError(f"cannot read a version from {text!r}")
    rest = match["rest"]
    pre = _PRERELEASE.match(rest)
    return Version(
        major=int(match["major"]),
        minor=int(match["minor"]),
        patch=int(match["patch"] or 0),
        prerelease=pre.group(0)[1:].lower() if pre else "",
    )


class RuntimeKind(StrEnum):
    CONTAINERD = "containerd"
    CRIO = "cri-o"
    OTHER = "other"


@dataclass(frozen=True)
class RuntimeVersion:
    kind: RuntimeKind
    version: Version | None
    raw: str

    def __str__(self) -> str:
        return self.raw


def parse_runtime(text: str) -> RuntimeVersion:
    """`containerd://1.7.13` → containerd 1.7.13; `cri-o://1.30.4` → cri-o 1.30.4; `docker://24` → other."""
    raw = text.strip()
    scheme, sep, rest = raw.partition("://")
    if not sep:
        raise VersionError(f"containerRuntimeVersion {text!r} is not of the form <runtime>://<version>")
    kinds = {"containerd": RuntimeKind.CONTAINERD, "cri-o": RuntimeKind.CRIO, "crio": RuntimeKind.CRIO}
    kind = kinds.get(scheme.lower(), RuntimeKind.OTHER)
    if kind is RuntimeKind.OTHER:
        return RuntimeVersion(kind, None, raw)
    return RuntimeVersion(kind, parse_version(rest), raw)
