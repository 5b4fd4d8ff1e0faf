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
# under and passed as that build argument, so buildah finds it without asking a registry.
BASE_IMAGE = "docker.io/library/debian:bookworm-slim"
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
DEBIAN_TOOLS = {"buildah": "buildah", "fuse-overlayfs": "fuse-overlayfs", "mmdebstrap": "mmdebstrap"}


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


def mmdebstrap_argv(out: Path) -> list[str]:
    return [
        "mmdebstrap",
        "--variant=minbase",
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
    store: Path, run: Path, repo: Path, tag: str, build_args: dict[str, str], ca_bundle: Path | None
) -> list[str]:
    argv = [*buildah_base(store, run), "bud", "--isolation=chroot", "--pull-never", f"--tag={tag}"]
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

    def base_id(self) -> str | None:
        done = subprocess.run(
            [*buildah_base(self.store, self.runroot), "images", "--noheading", "--no-trunc", "--quiet",
             BASE_IMAGE],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        return done.stdout.split()[0] if done.returncode == 0 and done.stdout.strip() else None

    def ensure_base(self) -> tuple[str, float | None]:
        """The base image's id, making it first (mmdebstrap, then a commit into the store) when missing."""
        found = self.base_id()
        if found:
            return found, None
        start = time.monotonic()
        self.log(f"[image] making {BASE_IMAGE} with mmdebstrap from the Debian archive")
        with tempfile.TemporaryDirectory(dir=self.dir) as tmp:
            tar = Path(tmp) / "rootfs.tar"
            self._run(mmdebstrap_argv(tar), "mmdebstrap")
            container = self._buildah("from", "scratch", what="buildah from scratch")
            try:
                self._buildah("add", container, str(tar), "/", what="buildah add")
                self._buildah("config", *BASE_CONFIG, container, what="buildah config")
                self._buildah("commit", "--rm", container, BASE_IMAGE, what="buildah commit")
            except ImageError:
                subprocess.run([*buildah_base(self.store, self.runroot), "rm", container], check=False)
                raise
        found = self.base_id()
        if not found:
            raise ImageError(f"{BASE_IMAGE} is not in {self.store} after the commit")
        return found, time.monotonic() - start

    def build(
        self,
        out: Path,
        tag: str = TAG,
        ca_bundle: Path | None = HOST_CA,
        force: bool = False,
        labels: dict[str, str] | None = None,
    ) -> Built:
        """`labels`: more build arguments (hack/release.sh passes REVISION and CREATED); they are inputs
        too, so the lab's builds, which pass none, are not redone for every commit."""
        if os.geteuid() != 0:
            raise ImageError("building the image with buildah --isolation chroot needs root")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ensure_tools()
        base, base_seconds = self.ensure_base()
        build_args = {"VERSION": __version__, "BASE_IMAGE": BASE_IMAGE, **(labels or {})}
        digest = inputs_digest(self.repo, context_files(self.repo), base, {**build_args, "tag": tag})
        stamp = out.with_name(out.name + ".inputs.json")
        if (
            not force
            and out.is_file()
            and stamp.is_file()
            and json.loads(stamp.read_text()).get("digest") == digest
        ):
            self.log(f"[image] {out} is up to date")
            return Built(out, tag, digest, out.stat().st_size, base_seconds, None)
        start = time.monotonic()
        bundle = ca_bundle if ca_bundle is not None and ca_bundle.is_file() else None
        self.log(f"[image] buildah bud {tag} (vfs, chroot isolation)")
        self._run(bud_argv(self.store, self.runroot, self.repo, tag, build_args, bundle), "buildah bud")
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_name(out.name + ".partial")
        partial.unlink(missing_ok=True)
        self._buildah("push", tag, f"oci-archive:{partial}:{tag}", what="buildah push")
        partial.replace(out)
        stamp.write_text(json.dumps({"digest": digest, "tag": tag, "base": base}) + "\n")
        # The archive is the product: the store keeps only the base, so vfs copies do not pile up.
        self._buildah("rmi", "--force", tag, what="buildah rmi")
        subprocess.run([*buildah_base(self.store, self.runroot), "rmi", "--prune"], capture_output=True,
                       check=False)  # fmt: skip
        return Built(out, tag, digest, out.stat().st_size, base_seconds, time.monotonic() - start)
