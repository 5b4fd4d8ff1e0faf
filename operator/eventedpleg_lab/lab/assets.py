"""What the lab's nodes are made from, cached in <cache>/lab (outside the repository):

- rootfs-bookworm.tar: a Debian bookworm root filesystem made by mmdebstrap (systemd, runc, conmon, CNI
  plugins, Debian's containerd 1.6, skopeo, nftables, ...), unpacked afresh for every node at `lab up`;
- nspawn/: systemd-nspawn and its library, unpacked from Debian's .debs (installing systemd-container on a
  host whose PID 1 is not systemd would be pointless, and nspawn needs no running systemd with --keep-unit);
- crio-v1.34.0/, crio-v1.36.3/: crio and pinns built from Go modules (docs/lab.md);
- images/: OCI archives (pause, idle, a busybox with every applet) written by our own code.

kubelets, containerd 2.2 and crictl are the real-node rig's builds (localcluster/build.py), not rebuilt here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from eventedpleg_lab.lab.nodefiles import BUSYBOX_IMAGE
from eventedpleg_lab.lab.nodes import LabRuntime
from eventedpleg_lab.localcluster import build
from eventedpleg_lab.localcluster.build import Log
from eventedpleg_lab.realnode import images as rn_images

ROOTFS_PACKAGES = (
    "systemd", "systemd-sysv", "dbus", "iproute2", "iptables", "nftables", "conntrack", "util-linux",
    "mount", "procps", "kmod", "ca-certificates", "less", "busybox",
    "containernetworking-plugins", "runc", "containerd", "conmon", "skopeo",
)  # fmt: skip
NSPAWN_DEBS = ("systemd-container", "libsystemd-shared")
# The lab's CRI-O runtimes and the module version each is built from. v1.36.3 has cri-o#9014 and #9663;
# v1.34.0 has #9014 only (docs/compatibility.md). Both go.mod files name a Go the toolchain here satisfies
# (1.24.6, 1.26.3) and carry no replace directive; the build is the same for both.
CRIO_VERSIONS = {LabRuntime.CRIO_134: "v1.34.0", LabRuntime.CRIO_136: "v1.36.3"}
CRIO_MODULE = "github.com/cri-o/cri-o"
# A static, cgo-free build (no seccomp support in it).
CRIO_TAGS = "containers_image_openpgp exclude_graphdriver_btrfs btrfs_noversion containers_image_ostree_stub"
BUSYBOX = Path("/bin/busybox")


class AssetError(RuntimeError):
    pass


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def lab_cache() -> Path:
    return build.cache_dir() / "lab"


def rootfs_tar() -> Path:
    return lab_cache() / "rootfs-bookworm.tar"


def nspawn_dir() -> Path:
    return lab_cache() / "nspawn"


def nspawn_binary() -> Path:
    return nspawn_dir() / "usr/bin/systemd-nspawn"


def nspawn_env() -> dict[str, str]:
    return {"LD_LIBRARY_PATH": str(nspawn_dir() / "usr/lib/x86_64-linux-gnu/systemd")}


def crio_dir(version: str) -> Path:
    return build.cache_dir() / "bin" / f"crio-{version}"


def images_dir() -> Path:
    return lab_cache() / "images"


def _run(
    argv: list[str], *, log_file: Path, cwd: Path | None = None, env: dict[str, str] | None = None
) -> None:
    with log_file.open("a") as out:
        out.write(f"\n$ {' '.join(argv)}\n")
        out.flush()
        done = subprocess.run(argv, stdout=out, stderr=out, cwd=cwd, env=env, check=False)
    if done.returncode != 0:
        tail = "\n".join(log_file.read_text().splitlines()[-20:])
        raise AssetError(f"{argv[0]} failed (exit {done.returncode}); see {log_file}:\n{tail}")


def _apt_install(packages: list[str], log: Log) -> None:
    if shutil.which("apt-get") is None:
        raise AssetError(f"{', '.join(packages)} needed and there is no apt-get to install it (Debian only)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    argv = ["apt-get", "install", "-y", "--no-install-recommends", *packages]
    log(f"[lab] apt-get install {' '.join(packages)}")
    if subprocess.run(argv, env=env, capture_output=True, check=False).returncode != 0:
        subprocess.run(["apt-get", "update"], env=env, capture_output=True, check=False)
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise AssetError(f"apt-get install {' '.join(packages)} failed: {done.stderr[-600:]}")


def ensure_rootfs(log: Log = _stderr) -> Path:
    target = rootfs_tar()
    if target.is_file():
        return target
    if shutil.which("mmdebstrap") is None:
        _apt_install(["mmdebstrap"], log)
    target.parent.mkdir(parents=True, exist_ok=True)
    log_file = build.cache_dir() / "logs" / "lab-rootfs.log"
    log_file.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial.tar")  # the extension tells mmdebstrap the format
    log(f"[lab] rootfs: mmdebstrap bookworm (~4 min cold); log: {log_file}")
    start = time.monotonic()
    _run(
        [
            "mmdebstrap",
            "--variant=minbase",
            f"--include={','.join(ROOTFS_PACKAGES)}",
            "bookworm",
            str(partial),
        ],
        log_file=log_file,
    )
    partial.rename(target)
    log(f"[lab] rootfs: done in {time.monotonic() - start:.0f}s")
    return target


def ensure_nspawn(log: Log = _stderr) -> Path:
    binary = nspawn_binary()
    if binary.is_file():
        return binary
    log("[lab] systemd-nspawn: apt-get download " + " ".join(NSPAWN_DEBS))
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["apt-get", "download", *NSPAWN_DEBS]
        done = subprocess.run(argv, cwd=tmp, capture_output=True, text=True, check=False)
        if done.returncode != 0:  # a fresh machine may have no package lists yet
            subprocess.run(["apt-get", "update"], capture_output=True, check=False)
            done = subprocess.run(argv, cwd=tmp, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise AssetError(f"apt-get download {' '.join(NSPAWN_DEBS)}: {done.stderr[-400:]}")
        staging = nspawn_dir().with_name("nspawn.partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.parent.mkdir(parents=True, exist_ok=True)  # dpkg-deb -x makes the folder, not its parents
        for deb in sorted(Path(tmp).glob("*.deb")):
            subprocess.run(["dpkg-deb", "-x", str(deb), str(staging)], check=True)
        shutil.rmtree(nspawn_dir(), ignore_errors=True)
        staging.rename(nspawn_dir())
    return binary


def crio_built(version: str) -> bool:
    return all((crio_dir(version) / b).is_file() for b in ("crio", "pinns"))


def ensure_crio(version: str, log: Log = _stderr) -> Path:
    """crio and pinns of `version` (~3 min on 2 cores plus a ~1.4 GB module download, cached afterwards)."""
    if crio_built(version):
        return crio_dir(version)
    root = build.cache_dir()
    log_file = root / "logs" / f"build-crio-{version}.log"
    log_file.parent.mkdir(parents=True, exist_ok=True)
    src = root / "src" / f"crio-{version}"
    src.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod -buildvcs=false"}
    log(f"[lab] CRI-O {version}: building from Go modules (~3 min + module download); log: {log_file}")
    start = time.monotonic()
    go = shutil.which("go")
    if go is None:
        raise AssetError("the Go toolchain is needed to build CRI-O")
    # go.mod of cri-o carries replace directives, so it is built as the main module from a writable copy.
    done = subprocess.run(
        [go, "mod", "download", "-json", f"{CRIO_MODULE}@{version}"],
        cwd=src, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise AssetError(f"go mod download {CRIO_MODULE}@{version}: {done.stdout[-400:]}{done.stderr[-400:]}")
    tree = src / "tree"
    shutil.rmtree(tree, ignore_errors=True)
    shutil.copytree(json.loads(done.stdout)["Dir"], tree)
    subprocess.run(["chmod", "-R", "u+w", str(tree)], check=True)
    staging = crio_dir(version).with_name(f".crio-{version}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    ld = f"-s -w -X github.com/cri-o/cri-o/internal/version.Version={version.lstrip('v')}"
    argv = [go, "build", "-trimpath", f"-ldflags={ld}", "-tags", CRIO_TAGS, "-o", str(staging / "crio")]
    _run([*argv, "./cmd/crio"], cwd=tree, env=env, log_file=log_file)
    if shutil.which("gcc") is None or not Path("/usr/lib/x86_64-linux-gnu/libc.a").exists():
        _apt_install(["gcc", "libc6-dev"], log)  # pinns is C, linked statically against glibc's libc.a
    pinns_src = sorted(str(p) for p in (tree / "pinns" / "src").glob("*.c"))
    _run(
        ["gcc", "-std=c99", "-Os", "-static", "-o", str(staging / "pinns"), *pinns_src],
        cwd=tree,
        log_file=log_file,
    )
    shutil.rmtree(crio_dir(version), ignore_errors=True)
    staging.rename(crio_dir(version))
    log(f"[lab] CRI-O {version}: done in {time.monotonic() - start:.0f}s")
    return crio_dir(version)


def busybox_archive(busybox: bytes, applets: tuple[str, ...]) -> bytes:
    """example.local/busybox:1: every applet (httpd, nc, ping ...) for pods that talk to each other."""
    return rn_images.image_archive(BUSYBOX_IMAGE, busybox, entrypoint=("/bin/sh",), applets=applets)


def ensure_busybox(log: Log = _stderr) -> Path:
    """Debian's busybox-static on the host: the images below are made from its one static binary."""
    if not BUSYBOX.is_file():
        _apt_install(["busybox-static"], log)
    if not BUSYBOX.is_file():
        raise AssetError(f"{BUSYBOX} is still missing after apt-get install busybox-static")
    return BUSYBOX


def ensure_images(log: Log = _stderr) -> dict[str, Path]:
    """pause.tar, idle.tar (the rig's) and busybox.tar in images_dir()."""
    ensure_busybox(log)
    directory = images_dir()
    directory.mkdir(parents=True, exist_ok=True)
    by_ref = rn_images.write_images(directory, BUSYBOX)
    listed = subprocess.run([str(BUSYBOX), "--list"], capture_output=True, text=True, check=True).stdout
    applets = tuple(a for a in listed.split() if a != "busybox")
    archive = busybox_archive(BUSYBOX.read_bytes(), applets)
    target = directory / "busybox.tar"
    if not target.exists() or target.read_bytes() != archive:
        target.write_bytes(archive)
    return {"pause": by_ref[rn_images.PAUSE_IMAGE], "idle": by_ref[rn_images.IDLE_IMAGE], "busybox": target}
