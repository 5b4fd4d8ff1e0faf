"""OCI image archives written by our own code: one busybox-static layer, no registry (docs/realnode.md).

`busybox sleep inf` serves as the pause process (containerd stops a sandbox with SIGKILL, so it needs no
signal handling) and as the idle workload. `ctr images import` keeps the name given in the index annotation
`io.containerd.image.name`.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path

PAUSE_IMAGE = "registry.k8s.io/pause:3.10.1"
IDLE_IMAGE = "example.local/idle:1"
APPLETS = ("sh", "sleep", "kill", "true", "false", "cat", "ls")
EMPTY_DIRS = ("dev", "proc", "sys", "etc", "tmp", "var", "run")


@dataclass(frozen=True)
class Blob:
    media_type: str
    data: bytes

    @property
    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.data).hexdigest()

    def descriptor(self, **extra: object) -> dict[str, object]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": len(self.data), **extra}


def _tar_member(tar: tarfile.TarFile, name: str, *, data: bytes | None = None, link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.mtime = 0
    info.uid = info.gid = 0
    if link:
        info.type, info.linkname, info.mode = tarfile.SYMTYPE, link, 0o777
        tar.addfile(info)
    elif data is None:
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
    else:
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))


def layer(busybox: bytes) -> tuple[bytes, bytes]:
    """(uncompressed tar, gzip) of /bin/busybox plus applet symlinks and empty mount points."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory in ("bin", *EMPTY_DIRS):
            _tar_member(tar, directory)
        _tar_member(tar, "bin/busybox", data=busybox)
        for applet in APPLETS:
            _tar_member(tar, f"bin/{applet}", link="busybox")
    plain = raw.getvalue()
    return plain, gzip.compress(plain, mtime=0)


def image_archive(name: str, busybox: bytes, *, entrypoint: tuple[str, ...] = ("/bin/sleep", "inf")) -> bytes:
    """An OCI image layout as a tar, naming the image `name`."""
    plain, gz = layer(busybox)
    layer_blob = Blob("application/vnd.oci.image.layer.v1.tar+gzip", gz)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": list(entrypoint[:1]), "Cmd": list(entrypoint[1:]), "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(plain).hexdigest()]},
    }
    config_blob = Blob(
        "application/vnd.oci.image.config.v1+json", json.dumps(config, sort_keys=True).encode()
    )
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config_blob.descriptor(),
        "layers": [layer_blob.descriptor()],
    }
    manifest_blob = Blob("application/vnd.oci.image.manifest.v1+json", json.dumps(manifest).encode())
    ref = name.rsplit(":", 1)[-1]
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            manifest_blob.descriptor(
                annotations={"io.containerd.image.name": name, "org.opencontainers.image.ref.name": ref},
                platform={"architecture": "amd64", "os": "linux"},
            )
        ],
    }
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _tar_member(tar, "oci-layout", data=json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        _tar_member(tar, "index.json", data=json.dumps(index).encode())
        _tar_member(tar, "blobs")
        _tar_member(tar, "blobs/sha256")
        for blob in (layer_blob, config_blob, manifest_blob):
            _tar_member(tar, f"blobs/sha256/{blob.digest.split(':', 1)[1]}", data=blob.data)
    return out.getvalue()


def write_images(directory: Path, busybox: Path) -> dict[str, Path]:
    """pause.tar and idle.tar in `directory` (rewritten only when the content changes)."""
    data = busybox.read_bytes()
    out: dict[str, Path] = {}
    for name, file in ((PAUSE_IMAGE, "pause.tar"), (IDLE_IMAGE, "idle.tar")):
        archive = image_archive(name, data)
        path = directory / file
        if not path.exists() or path.read_bytes() != archive:
            path.write_bytes(archive)
        out[name] = path
    return out
