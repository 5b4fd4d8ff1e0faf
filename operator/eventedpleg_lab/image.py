"""The operator's image, built from the repository's Dockerfile without a daemon: buildah (from Debian) with
vfs storage and chroot isolation, written to an OCI archive that a node's runtime imports
(`ctr -n k8s.io images import`, CRI-O's storage).

The Dockerfile's base, debian:bookworm-slim, is made here the way Debian's official images are made: with
mmdebstrap from the Debian archive (no registry is needed), then committed into buildah's local storage
under that name. Both steps are cached under <cache>/image: the base is made only when missing, the image
only when a file of the build context, the Dockerfile, the base or a build argument changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

from eventedpleg import __version__
from eventedpleg_lab.localcluster.build import Log, cache_dir

NAME = "evented-pleg-operator"
TAG = f"localhost/{NAME}:{__version__}"
# The Dockerfile's `ARG BASE_IMAGE` without its digest: the name the local mmdebstrap base is committed
# under (one per architecture, `base_name`) and passed as that build argument, so buildah finds it without
# asking a registry.
BASE_IMAGE = "docker.io/library/debian:bookworm-slim"
# The architectures a release's image index holds (the chart's image.architectures lists the same); a
# foreign one is built under qemu-user-static through binfmt_misc (`foreign_arch_problem` says when not).
ARCHES = ("amd64", "arm64")
_MACHINES = {"x86_64": "amd64", "aarch64": "arm64"}
_QEMU = {"arm64": "qemu-aarch64", "amd64": "qemu-x86_64"}
BINFMT = Path("/proc/sys/fs/binfmt_misc")
SUITE = "bookworm"
MIRRORS = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
# What debian:*-slim leaves out (debuerreotype's slimify): documentation, manuals and translations. The
# rules stay in the image's /etc/dpkg/dpkg.cfg.d, so packages installed later are slimmed the same way.
SLIM_DPKG = (
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/groff/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/lintian/*",
    "path-exclude=/usr/share/linda/*",
    "path-exclude=/usr/share/locale/*",
)
# The rest of debuerreotype's minimizing config, written into the image once the bootstrap is done (apt
# in mmdebstrap needs its downloads): no apt caches or downloaded .debs left in a layer, compressed
# indexes, no translations.
SLIM_APT = (
    'Dir::Cache::pkgcache ""',
    'Dir::Cache::srcpkgcache ""',
    'APT::Keep-Downloaded-Packages "false"',
    'Acquire::GzipIndexes "true"',
    'Acquire::Languages "none"',
    'APT::AutoRemove::SuggestsImportant "false"',
)
SLIM_APT_FILE = "/etc/apt/apt.conf.d/docker-minimal"
# /usr merged the way debootstrap does it (usr-is-merged), not with the usrmerge package, which would pull
# perl into the base.
MERGED_USR_HOOKS = Path("/usr/share/mmdebstrap/hooks/merged-usr")
# The debian image's config (its Dockerfile: `CMD ["bash"]`, and the default PATH).
BASE_CONFIG = (
    "--env=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "--cmd=bash",
)
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
# The host's CA bundle reaches pip as the build secret pip-ca (the Dockerfile's wheel step), never a layer.
CA_SECRET_ID = "pip-ca"  # noqa: S105 - the id of a build secret, not a secret
BUILD_CA = f"/run/secrets/{CA_SECRET_ID}"
# arch-test: mmdebstrap needs it to bootstrap a foreign architecture.
DEBIAN_TOOLS = {
    "buildah": "buildah",
    "fuse-overlayfs": "fuse-overlayfs",
    "mmdebstrap": "mmdebstrap",
    "arch-test": "arch-test",
}


class ImageError(RuntimeError):
    pass


@dataclass(frozen=True)
class Built:
    archive: Path
    tag: str
    digest: str  # the inputs' digest the archive was built from
    size: int
    base_seconds: float | None  # None: the cached base was used
    image_seconds: float | None  # None: the cached archive was up to date


def host_arch() -> str:
    machine = os.uname().machine
    return _MACHINES.get(machine, machine)


def base_name(arch: str) -> str:
    """The local base of one architecture: BASE_IMAGE for the host's, a suffixed tag for a foreign one."""
    return BASE_IMAGE if arch == host_arch() else f"{BASE_IMAGE}-{arch}"


def foreign_arch_problem(arch: str) -> str | None:
    """Why `arch` binaries cannot run here (None: the host's, or qemu is registered with binfmt_misc with
    the F flag, so it also runs inside a chroot)."""
    if arch == host_arch():
        return None
    entry = BINFMT / _QEMU.get(arch, f"qemu-{arch}")
    if not entry.is_file():
        return f"no {entry} (mount binfmt_misc and install qemu-user-static)"
    text = entry.read_text()
    if not text.startswith("enabled"):
        return f"{entry} is disabled"
    if not any(line.startswith("flags:") and "F" in line for line in text.splitlines()):
        return f"{entry} lacks the F flag (loading the interpreter at registration makes it work in a chroot)"
    return None


def dpkg_packages(status: str) -> list[str]:
    """`name:arch=version` of every installed package in a dpkg status file, sorted: a base's package set."""
    found = []
    for stanza in status.split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in stanza.splitlines() if ": " in line and not line.startswith(" ")
        )
        if fields.get("Status") == "install ok installed":
            found.append(f"{fields['Package']}:{fields['Architecture']}={fields['Version']}")
    return sorted(found)


def image_dir() -> Path:
    return cache_dir() / "image"


def default_archive() -> Path:
    return image_dir() / f"{NAME}-{__version__}.oci.tar"


def find_repo(start: Path | None = None) -> Path:
    """The checkout holding the Dockerfile: this package's own (an editable install) or the working dir."""
    candidates = [Path(__file__).resolve().parents[2], start or Path.cwd()]
    for candidate in candidates:
        for path in (candidate, *candidate.parents):
            if (path / "Dockerfile").is_file() and (path / ".dockerignore").is_file():
                return path
    raise ImageError("no Dockerfile with a .dockerignore found: run this from the repository")


# --- the build context ---------------------------------------------------------------------------------


def _ignore_rules(dockerignore: str) -> list[tuple[bool, str]]:
    """(allow, pattern) in file order; the last matching rule decides, as in Docker."""
    rules = []
    for raw in dockerignore.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        allow = line.startswith("!")
        rules.append((allow, line.removeprefix("!").strip("/")))
    return rules


def _matches(rel: str, pattern: str) -> bool:
    if pattern.startswith("**/"):
        name = pattern.removeprefix("**/")
        return any(fnmatch(part, name) for part in rel.split("/"))
    parts = rel.split("/")
    # A pattern naming a directory covers everything below it.
    return any(fnmatch("/".join(parts[:i]), pattern) for i in range(1, len(parts) + 1))


def context_files(repo: Path) -> list[str]:
    """Every file the Docker build context holds under the repository's .dockerignore, sorted."""
    rules = _ignore_rules((repo / ".dockerignore").read_text())
    files: list[str] = []
    for root, dirs, names in os.walk(repo):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in names:
            rel = (Path(root) / name).relative_to(repo).as_posix()
            included = True
            for allow, pattern in rules:
                if _matches(rel, pattern):
                    included = allow
            if included:
                files.append(rel)
    return sorted(files)


def inputs_digest(repo: Path, files: Iterable[str], base_id: str, build_args: dict[str, str]) -> str:
    """What the image is a function of: the Dockerfile, the context's files, the base and the arguments."""
    h = hashlib.sha256()
    for rel in ["Dockerfile", *files]:
        h.update(rel.encode() + b"\0" + hashlib.sha256((repo / rel).read_bytes()).digest())
    h.update(f"base={base_id}\0".encode())
    for key in sorted(build_args):
        h.update(f"arg:{key}={build_args[key]}\0".encode())
    return h.hexdigest()


# --- the commands --------------------------------------------------------------------------------------


def mmdebstrap_argv(out: Path, arch: str | None = None) -> list[str]:
    return [
        "mmdebstrap",
        "--variant=minbase",
        *([f"--architectures={arch}"] if arch else []),
        "--format=tar",
        *(f"--dpkgopt={rule}" for rule in SLIM_DPKG),
        '--aptopt=Acquire::Languages "none"',
        "--customize-hook=printf '%s;\\n' "
        + " ".join(shlex.quote(o) for o in SLIM_APT)
        + f' > "$1{SLIM_APT_FILE}"',
        # apt's binary caches (72 MB) and any .deb left by the bootstrap: never part of a Debian image.
        '--customize-hook=rm -f "$1"/var/cache/apt/*.bin "$1"/var/cache/apt/archives/*.deb',
        *([f"--hook-dir={MERGED_USR_HOOKS}"] if MERGED_USR_HOOKS.is_dir() else []),
        SUITE,
        str(out),
        *MIRRORS,
    ]


def buildah_base(store: Path, run: Path) -> list[str]:
    return ["buildah", f"--root={store}", f"--runroot={run}", "--storage-driver=vfs"]


def bud_argv(
    store: Path,
    run: Path,
    repo: Path,
    tag: str,
    build_args: dict[str, str],
    ca_bundle: Path | None,
    arch: str | None = None,
) -> list[str]:
    argv = [*buildah_base(store, run), "bud", "--isolation=chroot", "--pull-never", f"--tag={tag}"]
    if arch:
        argv.append(f"--platform=linux/{arch}")
    argv += [f"--build-arg={k}={v}" for k, v in sorted(build_args.items())]
    if ca_bundle is not None:  # pip's trust store for the wheel step only: a secret, not a layer
        argv.append(f"--secret=id={CA_SECRET_ID},src={ca_bundle}")
    return [*argv, f"--file={repo / 'Dockerfile'}", str(repo)]


class ImageBuilder:
    """Runs mmdebstrap and buildah; remembers what the last archive was built from in a small JSON file."""

    def __init__(self, repo: Path, workdir: Path | None = None, log: Log | None = None) -> None:
        self.repo = repo
        self.dir = workdir or image_dir()
        self.store = self.dir / "store"
        self.runroot = self.dir / "run"
        self.log: Log = log or (lambda _m: None)

    # shell

    def _run(self, argv: Sequence[str], what: str) -> str:
        done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = (done.stdout + done.stderr).strip()[-2000:]
            raise ImageError(f"{what} failed (exit {done.returncode}): {' '.join(argv[:6])} ...\n{tail}")
        return done.stdout.strip()

    def _buildah(self, *args: str, what: str) -> str:
        return self._run([*buildah_base(self.store, self.runroot), *args], what)

    def ensure_tools(self) -> None:
        missing = [pkg for tool, pkg in DEBIAN_TOOLS.items() if shutil.which(tool) is None]
        if not missing:
            return
        if shutil.which("apt-get") is None:
            raise ImageError(f"missing {', '.join(missing)} and there is no apt-get to install them")
        self.log(f"[image] apt-get install {' '.join(missing)}")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        argv = ["apt-get", "install", "-y", "--no-install-recommends", *missing]
        if subprocess.run(argv, env=env, capture_output=True, check=False).returncode != 0:
            subprocess.run(["apt-get", "update"], env=env, capture_output=True, check=False)
            self._run(argv, "apt-get install")

    def base_id(self, arch: str | None = None) -> str | None:
        done = subprocess.run(
            [*buildah_base(self.store, self.runroot), "images", "--noheading", "--no-trunc", "--quiet",
             base_name(arch or host_arch())],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        return done.stdout.split()[0] if done.returncode == 0 and done.stdout.strip() else None

    def base_packages(self, arch: str) -> Path:
        """The base's package set (`dpkg_packages`), written when the base is made: what it is pinned to."""
        return self.dir / f"base-{arch}.packages"

    def ensure_base(self, arch: str | None = None) -> tuple[str, float | None]:
        """The base image's id, making it first (mmdebstrap, then a commit into the store) when missing."""
        arch = arch or host_arch()
        name, packages = base_name(arch), self.base_packages(arch)
        found = self.base_id(arch)
        if found and packages.is_file():
            return found, None
        start = time.monotonic()
        self.log(f"[image] making {name} ({arch}) with mmdebstrap from the Debian archive")
        with tempfile.TemporaryDirectory(dir=self.dir) as tmp:
            tar = Path(tmp) / "rootfs.tar"
            self._run(mmdebstrap_argv(tar, arch), "mmdebstrap")
            with tarfile.open(tar) as rootfs:
                member = rootfs.extractfile("./var/lib/dpkg/status")
                status = member.read().decode() if member else ""
            container = self._buildah("from", "scratch", what="buildah from scratch")
            try:
                self._buildah("add", container, str(tar), "/", what="buildah add")
                config = [*BASE_CONFIG, "--os=linux", f"--arch={arch}"]
                self._buildah("config", *config, container, what="buildah config")
                self._buildah("commit", "--rm", container, name, what="buildah commit")
            except ImageError:
                subprocess.run([*buildah_base(self.store, self.runroot), "rm", container], check=False)
                raise
        packages.write_text("".join(f"{line}\n" for line in dpkg_packages(status)))
        found = self.base_id(arch)
        if not found:
            raise ImageError(f"{name} is not in {self.store} after the commit")
        return found, time.monotonic() - start

    def build(
        self,
        out: Path,
        tag: str = TAG,
        ca_bundle: Path | None = HOST_CA,
        force: bool = False,
        labels: dict[str, str] | None = None,
        arches: Sequence[str] = (),
    ) -> Built:
        """`labels`: more build arguments (hack/release.sh passes REVISION and CREATED); they are inputs
        too, so the lab's builds, which pass none, are not redone for every commit. `arches`: the image
        index's architectures (hack/release.sh: ARCHES); none, one image of the host's architecture.

        Each architecture's image is labelled with its base: the local base's image id and the sha256 of
        its package set, which is also written beside the archive (ARCHIVE.base-packages, `arch line`)."""
        if os.geteuid() != 0:
            raise ImageError("building the image with buildah --isolation chroot needs root")
        for arch in arches:
            problem = foreign_arch_problem(arch)
            if problem:
                raise ImageError(f"cannot build linux/{arch} here: {problem}")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ensure_tools()
        platforms = tuple(arches) or (host_arch(),)
        bases = {arch: self.ensure_base(arch) for arch in platforms}
        args: dict[str, dict[str, str]] = {}
        for arch, (base, _) in bases.items():
            packages = self.base_packages(arch).read_bytes()
            args[arch] = {
                "VERSION": __version__,
                "BASE_IMAGE": base_name(arch),
                "BASE_ID": base,
                "BASE_PACKAGES": f"sha256:{hashlib.sha256(packages).hexdigest()}",
                **(labels or {}),
            }
        context = context_files(self.repo)
        digest = hashlib.sha256(
            "".join(
                inputs_digest(self.repo, context, bases[arch][0], {**args[arch], "tag": tag, "arch": arch})
                for arch in platforms
            ).encode()
        ).hexdigest()
        base_seconds = (
            sum(s for _, s in bases.values() if s is not None)
            if any(s is not None for _, s in bases.values())
            else None
        )
        stamp = out.with_name(out.name + ".inputs.json")
        listing = out.with_name(out.name + ".base-packages")
        if (
            not force
            and out.is_file()
            and listing.is_file()
            and stamp.is_file()
            and json.loads(stamp.read_text()).get("digest") == digest
        ):
            self.log(f"[image] {out} is up to date")
            return Built(out, tag, digest, out.stat().st_size, base_seconds, None)
        start = time.monotonic()
        bundle = ca_bundle if ca_bundle is not None and ca_bundle.is_file() else None
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_name(out.name + ".partial")
        partial.unlink(missing_ok=True)
        if not arches:
            self.log(f"[image] buildah bud {tag} (vfs, chroot isolation)")
            self._run(
                bud_argv(self.store, self.runroot, self.repo, tag, args[platforms[0]], bundle), "buildah bud"
            )
            self._buildah("push", tag, f"oci-archive:{partial}:{tag}", what="buildah push")
            built = [tag]
        else:
            built = []
            for arch in platforms:
                self.log(f"[image] buildah bud {tag} for linux/{arch} (vfs, chroot isolation)")
                one = f"{tag}-{arch}"
                argv = bud_argv(self.store, self.runroot, self.repo, one, args[arch], bundle, arch)
                self._run(argv, f"buildah bud (linux/{arch})")
                built.append(one)
            index = f"{tag}-index"
            subprocess.run([*buildah_base(self.store, self.runroot), "manifest", "rm", index],
                           capture_output=True, check=False)  # fmt: skip
            self._buildah("manifest", "create", index, what="buildah manifest create")
            for one in built:
                added = f"containers-storage:{one}"
                self._buildah("manifest", "add", index, added, what="buildah manifest add")
            self._buildah(
                "manifest", "push", "--all", "--format=oci", index, f"oci-archive:{partial}:{tag}",
                what="buildah manifest push",
            )  # fmt: skip
            self._buildah("manifest", "rm", index, what="buildah manifest rm")
        partial.replace(out)
        listing.write_text(
            "".join(f"{arch} {line}\n" for arch in platforms
                    for line in self.base_packages(arch).read_text().splitlines())
        )  # fmt: skip
        stamp.write_text(
            json.dumps({"digest": digest, "tag": tag, "bases": {a: b for a, (b, _) in bases.items()}}) + "\n"
        )
        # The archive is the product: the store keeps only the bases, so vfs copies do not pile up.
        for one in built:
            self._buildah("rmi", "--force", one, what="buildah rmi")
        subprocess.run([*buildah_base(self.store, self.runroot), "rmi", "--prune"], capture_output=True,
                       check=False)  # fmt: skip
        return Built(out, tag, digest, out.stat().st_size, base_seconds, time.monotonic() - start)
