"""The host side of the lab's nodes: the bridge, each node's cgroups, booting and stopping a node, and the
check that nothing is left behind.

A node is `systemd-nspawn` booting a Debian root with systemd as PID 1 (docs/lab.md). Before nspawn
starts, its process moves into a cgroup of its own (`eplab-<node>`) in every v1 hierarchy, so that each node
gets its own cgroup-namespace root; its entrypoint remounts the controllers writable before systemd starts.
Everything a node starts lives in its PID namespace and its network namespace: when its systemd exits, the
kernel ends every process of the node and the veth, routes and nft rules of the node go with it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from eventedpleg_lab.lab import assets
from eventedpleg_lab.lab.nodes import BRIDGE, CGROUP_PREFIX, GATEWAY, NodeSpec

CGROUP_ROOT = Path("/sys/fs/cgroup")
# Kernel tunables are not namespaced: every kubelet sets these for the whole machine
# (container_manager_linux.go setupKernelTunables, kubelet.go), so the lab records and restores them.
KUBELET_SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
# Not namespaced either, and per user: every node's systemd, logind, dbus, runtime and kubelet take inotify
# instances as root on the host. Measured with the 7-node default lab: 127 in use, against the kernel's
# default limit of 128; one more kubelet (the real-node rig's, or a host's own services) and a kubelet
# fails to start ("Failed to start cAdvisor" err="inotify_init: too many open files"). So the lab raises
# the limit while it is up (as kind's known issues advise for multi-node clusters) and restores it.
INOTIFY_INSTANCES = "fs/inotify/max_user_instances"
INOTIFY_PER_NODE = 32  # ~18 measured, with room
RESTORED_SYSCTLS = (*KUBELET_SYSCTLS, INOTIFY_INSTANCES)


class MachineError(RuntimeError):
    pass


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise MachineError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


def bridge_exists() -> bool:
    return Path("/sys/class/net", BRIDGE).exists()


def bridge_up(nodes: tuple[NodeSpec, ...]) -> None:
    """The bridge, the host's address on it, and routes from the host to each node's pods."""
    if not bridge_exists():
        _ip("link", "add", BRIDGE, "type", "bridge")
    _ip("addr", "replace", f"{GATEWAY}/24", "dev", BRIDGE)
    _ip("link", "set", BRIDGE, "up")
    for node in nodes:
        _ip("route", "replace", node.pod_subnet, "via", node.ip, "dev", BRIDGE, "onlink")


def bridge_down() -> None:
    """Deleting the bridge also removes its address and the routes through it."""
    if bridge_exists():
        _ip("link", "del", BRIDGE)


def read_sysctls() -> dict[str, str]:
    values: dict[str, str] = {}
    for key in RESTORED_SYSCTLS:
        with contextlib.suppress(OSError):
            values[key] = (Path("/proc/sys") / key).read_text().strip()
    return values


def raise_inotify_instances(nodes: int) -> str | None:
    """Make room for `nodes` nodes' inotify instances beside the host's own; what changed, or None."""
    path = Path("/proc/sys") / INOTIFY_INSTANCES
    current = int(path.read_text().strip())
    wanted = 256 + INOTIFY_PER_NODE * nodes
    if current >= wanted:
        return None
    path.write_text(str(wanted))
    return f"sysctl {INOTIFY_INSTANCES.replace('/', '.')}={wanted} (was {current}) while the lab is up"


def restore_sysctls(saved: dict[str, str]) -> list[str]:
    changed = []
    for key, value in saved.items():
        path = Path("/proc/sys") / key
        with contextlib.suppress(OSError):
            if path.read_text().strip() != value:
                path.write_text(value)
                changed.append(f"{key.replace('/', '.')}={value}")
    return changed


# --- cgroups ---------------------------------------------------------------------------------------------


def _own_cgroups() -> dict[str, str]:
    """hierarchy directory name under /sys/fs/cgroup -> this process's path in it."""
    paths: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            paths["unified"] = path
        elif controllers.startswith("name="):
            paths[controllers[len("name=") :]] = path
        else:
            for ctrl in controllers.split(","):
                paths[ctrl] = path
    return paths


def node_cgroups(spec: NodeSpec) -> list[Path]:
    """The node's cgroup directory in each hierarchy (a child of where this process is)."""
    own = _own_cgroups()
    out = []
    for hierarchy in sorted(CGROUP_ROOT.iterdir()):
        rel = own.get(hierarchy.name)
        if rel is None or not hierarchy.is_dir():
            continue
        out.append(hierarchy / rel.strip("/") / spec.cgroup)
    return out


def create_cgroups(spec: NodeSpec) -> list[Path]:
    dirs = node_cgroups(spec)
    for directory in dirs:
        directory.mkdir(exist_ok=True)
        if (directory.parent / "cpuset.cpus").exists():
            for name in ("cpuset.cpus", "cpuset.mems"):  # a new cpuset is empty until given CPUs and nodes
                (directory / name).write_text((directory.parent / name).read_text())
    return dirs


def remove_cgroup_tree(top: Path) -> list[Path]:
    """rmdir the tree bottom-up; returns what could not be removed (still holding processes)."""
    if not top.is_dir():
        return []
    left = []
    for dirpath in sorted((Path(d) for d, _, _ in os.walk(top)), key=lambda p: -len(p.parts)):
        try:
            dirpath.rmdir()
        except OSError:
            left.append(dirpath)
    return left


def lab_cgroups() -> list[Path]:
    """Every eplab-* cgroup under this process's cgroups."""
    own = _own_cgroups()
    found = []
    for hierarchy in sorted(CGROUP_ROOT.iterdir()):
        rel = own.get(hierarchy.name)
        if rel is None:
            continue
        base = hierarchy / rel.strip("/")
        with contextlib.suppress(OSError):
            found.extend(sorted(p for p in base.iterdir() if p.is_dir() and p.name.startswith(CGROUP_PREFIX)))
    return found


# --- a node ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Booted:
    nspawn_pid: int
    boot_log: Path


def boot(spec: NodeSpec, rootfs: Path, boot_log: Path) -> Booted:
    """Start nspawn in the node's cgroups, in a session of its own (it outlives `lab up`)."""
    cgroup_procs = [d / "cgroup.procs" for d in create_cgroups(spec)]

    def enter_cgroups() -> None:  # runs in the child between fork and exec
        for procs in cgroup_procs:
            procs.write_text(str(os.getpid()))

    env = {
        **os.environ,
        **assets.nspawn_env(),
        "SYSTEMD_SECCOMP": "0",
        "SYSTEMD_NSPAWN_API_VFS_WRITABLE": "1",
    }
    argv = [
        str(assets.nspawn_binary()),
        f"--directory={rootfs}",
        f"--machine={spec.name}",
        "--register=no",  # no machined on this host
        "--keep-unit",  # ... and no host systemd to ask for a scope
        "--console=pipe",
        "--kill-signal=SIGRTMIN+3",  # SIGTERM to nspawn = an orderly poweroff of the node's systemd
        f"--network-bridge={BRIDGE}",
        "--capability=all",
        "--bind=/dev/kmsg",
        "/usr/local/bin/lab-entrypoint",
    ]
    with boot_log.open("ab") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=enter_cgroups,  # noqa: PLW1509 - only file writes, before exec
        )
    return Booted(proc.pid, boot_log)


def node_init_pid(nspawn_pid: int) -> int | None:
    """The node's PID 1 (its systemd) as the host sees it: nspawn's child."""
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{nspawn_pid}/task").iterdir():
            children = (task / "children").read_text().split()
            if children:
                return int(children[0])
    return None


def nsenter(init_pid: int, argv: list[str], *, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run a command inside the node (all its namespaces), as the agent does from a hostPID pod."""
    return subprocess.run(
        ["nsenter", "-t", str(init_pid), "-a", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def alive(pid: int, argv0: str) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z" and Path(cmdline).name == Path(argv0).name


def stop(nspawn_pid: int, *, grace: float = 5.0) -> None:
    """The first SIGTERM makes nspawn power the node off; systemd stops the units but then waits up to 90 s
    for the pods' init processes, which ignore SIGTERM from an ancestor PID namespace. A second SIGTERM
    after `grace` makes nspawn kill the node's PID 1, and the kernel ends the rest of its PID namespace
    (the pods included); SIGKILL if even that does not end it."""
    binary = str(assets.nspawn_binary())
    for sig in (signal.SIGTERM, signal.SIGTERM, signal.SIGKILL):
        if not alive(nspawn_pid, binary):
            break
        with contextlib.suppress(ProcessLookupError):
            os.kill(nspawn_pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and alive(nspawn_pid, binary):
            time.sleep(0.2)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(nspawn_pid, os.WNOHANG)  # reaps only when this process started it


NSPAWN_RUN = Path("/run/systemd/nspawn")


def nspawn_runtime_files(name: str) -> list[Path]:
    """What nspawn leaves on the host for a machine: its mount-propagation directory and lock."""
    return [
        p for p in (NSPAWN_RUN / "propagate" / name, NSPAWN_RUN / "locks" / f"machine-{name}") if p.exists()
    ]


def remove_nspawn_runtime(name: str, *, created_run_dir: bool) -> None:
    for path in nspawn_runtime_files(name):
        if path.is_dir():
            with contextlib.suppress(OSError):
                path.rmdir()
        else:
            path.unlink(missing_ok=True)
    if created_run_dir:  # nspawn made /run/systemd/nspawn for the lab: remove it once empty
        for directory in (NSPAWN_RUN / "propagate", NSPAWN_RUN / "locks", NSPAWN_RUN):
            with contextlib.suppress(OSError):
                directory.rmdir()


# --- leftovers -------------------------------------------------------------------------------------------


def processes_in_lab_cgroups() -> list[str]:
    """Processes whose cgroup path names an eplab-* cgroup, anywhere on the machine."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cgroups = (entry / "cgroup").read_text()
            if f"/{CGROUP_PREFIX}" not in cgroups:
                continue
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        found.append(f"pid {entry.name}: {argv[:120]}")
    return found


def mounts_under(directory: Path) -> list[str]:
    prefix = str(directory.resolve())
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mount_point = line.split()[4]
        if mount_point == prefix or mount_point.startswith(prefix + "/"):
            found.append(mount_point)
    return found


def leftovers(directory: Path, saved_sysctls: dict[str, str], names: tuple[str, ...] = ()) -> list[str]:
    """What the lab could leave behind; empty after a clean `lab down`."""
    out = [f"process {p}" for p in processes_in_lab_cgroups()]
    out += [f"nspawn runtime file {p}" for name in names for p in nspawn_runtime_files(name)]
    out += [f"mount {m}" for m in mounts_under(directory)]
    out += [f"cgroup {c}" for c in lab_cgroups()]
    if bridge_exists():
        out.append(f"bridge {BRIDGE}")
    out += [
        f"sysctl {k.replace('/', '.')}={v} (was {saved_sysctls[k]})"
        for k, v in read_sysctls().items()
        if k in saved_sysctls and saved_sysctls[k] != v
    ]
    return out
