#!/usr/bin/env bash
# Makes this Linux host run ARCH's binaries (default arm64) under qemu-user-static through binfmt_misc,
# idempotently: mounts binfmt_misc, installs Debian's qemu-user-static and binfmt-support when missing, and
# enables the interpreter (registered with the F flag, so it runs inside a chroot too). Prints nothing and
# exits 0 when the host already can; exits 3 with one line saying why when it cannot (not root, no apt-get,
# binfmt_misc cannot be mounted, e.g. an unprivileged container).
#   bash hack/emulation.sh [ARCH]
set -euo pipefail
arch=${1:-arm64}
case "$arch" in
  arm64) qemu=qemu-aarch64 ;;
  amd64) qemu=qemu-x86_64 ;;
  *) echo "emulation: no qemu mapping for $arch" >&2; exit 2 ;;
esac
host=$(dpkg --print-architecture 2>/dev/null || uname -m)
[ "$host" = "$arch" ] && exit 0
entry=/proc/sys/fs/binfmt_misc/$qemu
ready() { [ -f "$entry" ] && head -1 "$entry" | grep -qx enabled && grep -q '^flags:.*F' "$entry"; }
ready && exit 0
cannot() { echo "emulation: linux/$arch cannot run here: $*" >&2; exit 3; }
[ "$(id -u)" = 0 ] || cannot "needs root (mount binfmt_misc, apt-get install qemu-user-static)"
if [ ! -f /proc/sys/fs/binfmt_misc/status ]; then
  mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null \
    || cannot "binfmt_misc cannot be mounted (an unprivileged container?)"
fi
if ! command -v update-binfmts >/dev/null || [ ! -e "/usr/share/binfmts/$qemu" ]; then
  command -v apt-get >/dev/null || cannot "no apt-get to install qemu-user-static and binfmt-support"
  echo "emulation: apt-get install qemu-user-static binfmt-support" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends qemu-user-static binfmt-support >/dev/null 2>&1 \
    || { apt-get update >/dev/null && apt-get install -y --no-install-recommends qemu-user-static binfmt-support >/dev/null; } \
    || cannot "apt-get install qemu-user-static binfmt-support failed"
fi
ready || update-binfmts --enable "$qemu" >/dev/null 2>&1 || true
ready || cannot "$entry is not registered with the F flag after update-binfmts --enable $qemu"
