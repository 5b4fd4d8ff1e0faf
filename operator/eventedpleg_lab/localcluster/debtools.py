"""Tools the tests run from Debian packages, fetched with `apt-get download` and unpacked with `dpkg-deb -x`
into the cache: never installed, so no service starts and nothing outside the cache changes.

Prometheus (the real server, for the alert gate's tests and eventedpleg_lab.prometheus, and its promtool,
for the chart's rules) comes this way: its Go module tree is large to build, and Debian ships the binaries.
Its package depends on libc6 (the binaries link only libc) and on JavaScript libraries for the classic web
UI, which the HTTP API does not use: the two binaries alone run.

The version is apt's candidate, not a pin: a Debian point release replaces the package in the archive, so
a pinned version would stop downloading; the cache keeps each version apart.

    python -m eventedpleg_lab.localcluster.debtools prometheus   # fetch (once) and print the binaries' paths
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from eventedpleg_lab.localcluster.build import BuildError, Log, _stderr, build_lock, cache_dir


@dataclass(frozen=True)
class DebTool:
    package: str
    binaries: tuple[str, ...]  # paths inside the package


PROMETHEUS = DebTool("prometheus", ("usr/bin/prometheus", "usr/bin/promtool"))


def _candidate(package: str) -> str:
    """The version apt would install (apt-cache policy's Candidate)."""
    shown = subprocess.run(["apt-cache", "policy", package], capture_output=True, text=True, check=False)
    for line in shown.stdout.splitlines():
        if line.strip().startswith("Candidate:"):
            version = line.split(":", 1)[1].strip()
            if version and version != "(none)":
                return version
    return ""


def ensure(tool: DebTool, *, log: Log = _stderr) -> dict[str, Path]:
    """Binary name -> path, downloading and unpacking the package on first use (cached per version)."""
    if shutil.which("apt-get") is None:
        raise BuildError(f"{tool.package}: no apt-get on this machine to download the Debian package")
    version = _candidate(tool.package)
    if not version:
        subprocess.run(["apt-get", "update"], capture_output=True, check=False)
        version = _candidate(tool.package)
    if not version:
        raise BuildError(f"{tool.package}: no Debian package candidate (apt-cache policy {tool.package})")
    dest = cache_dir() / "deb" / f"{tool.package}_{version.replace(':', '%3a')}"
    paths = {Path(b).name: dest / b for b in tool.binaries}
    if all(p.exists() for p in paths.values()):
        return paths
    dest.parent.mkdir(parents=True, exist_ok=True)
    with build_lock(dest.parent / ".deb.lock", log):  # not the Go builds' lock: no wait behind them
        if all(p.exists() for p in paths.values()):
            return paths
        log(f"[deb] {tool.package} {version}: apt-get download, unpacked into {dest}")
        with tempfile.TemporaryDirectory() as tmp:
            got = subprocess.run(
                ["apt-get", "download", f"{tool.package}={version}"],
                cwd=tmp, capture_output=True, text=True, check=False,
            )  # fmt: skip
            debs = list(Path(tmp).glob("*.deb"))
            if got.returncode != 0 or not debs:
                raise BuildError(
                    f"apt-get download {tool.package}={version} failed: {got.stderr.strip()[-300:]}"
                )
            partial = dest.with_name(dest.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            unpacked = subprocess.run(
                ["dpkg-deb", "-x", str(debs[0]), str(partial)], capture_output=True, text=True, check=False
            )
            if unpacked.returncode != 0:
                raise BuildError(f"dpkg-deb -x {debs[0].name} failed: {unpacked.stderr.strip()[-300:]}")
            shutil.rmtree(dest, ignore_errors=True)
            partial.rename(dest)
    missing = [str(p) for p in paths.values() if not p.exists()]
    if missing:
        raise BuildError(f"{tool.package} {version} does not hold {', '.join(missing)}")
    return paths


TOOLS = {PROMETHEUS.package: PROMETHEUS}


def prometheus(*, log: Log = _stderr) -> tuple[Path, Path]:
    """(prometheus, promtool): Debian's, unpacked into the cache on first use."""
    paths = ensure(PROMETHEUS, log=log)
    return paths["prometheus"], paths["promtool"]


if __name__ == "__main__":  # hack/test.sh fetches the tools of the chart tier before the tests run
    for name in sys.argv[1:] or sorted(TOOLS):
        if name not in TOOLS:
            sys.exit(f"unknown tool {name!r}; known: {', '.join(sorted(TOOLS))}")
        for path in ensure(TOOLS[name]).values():
            print(path)
