"""The real node: set up (Debian packages, builds, images), bring up, take down.

    rig = RealNode()
    rig.setup()                                     # apt-get, builds (cached), image archives
    rig.up(RigSpec(kubelet="1.36", runtime=RigRuntime.CONTAINERD_22, pods=3))
    ...
    rig.down()

Order matters (docs/realnode.md, k8s#129827): containerd starts before the kubelet and is never restarted
under a v1.36 kubelet unless that is the point of the test. `down` stops the kubelet first (else it
recreates the static pods), removes every pod sandbox through CRI, stops containerd, stops any shim left
behind (by PID, only shims serving our socket), unmounts what the kubelet and containerd mounted under the
rig directory and removes the empty cgroups they created.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from eventedpleg import constants as c
from eventedpleg_lab.localcluster import build
from eventedpleg_lab.localcluster.build import Log
from eventedpleg_lab.realnode import config as cfg
from eventedpleg_lab.realnode import layout as lay
from eventedpleg_lab.realnode.images import IDLE_IMAGE, PAUSE_IMAGE, write_images
from eventedpleg_lab.realnode.supervisor import Supervisor, UnitState, alive, exit_of, proc_argv, terminate

KUBELET = "kubelet"
CONTAINERD = "containerd"
KUBELETS = {"1.36": build.KUBELET_136, "1.37": build.KUBELET_137}
BUSYBOX = Path("/bin/busybox")
RUNC = Path("/usr/sbin/runc")
DEBIAN_CONTAINERD = Path("/usr/bin")  # containerd, containerd-shim-runc-v2, ctr of the Debian package
CGROUP_ROOT = Path("/sys/fs/cgroup")


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class RigError(RuntimeError):
    pass


LOG_KEEP_BYTES = 512 * 1024 * 1024  # a unit log over this is rotated at setup (RealNode._rotate_logs)


@dataclass(frozen=True)
class RigSpec:
    kubelet: str = "1.36"  # key of KUBELETS
    runtime: cfg.RigRuntime = cfg.RigRuntime.CONTAINERD_22
    pods: int = 0
    # The benchmark's gate, as a rig-owned drop-in (None: no gate anywhere; the agent decides).
    gate: bool | None = None
    # With the gate on and pods: start them with the gate off, then restart with it on, so the
    # static pods' containers are adopted rather than created under Evented PLEG (docs/realnode.md).
    settle_gate_off: bool = True
    verbosity: int = 4  # V(4) carries the Evented PLEG lines (docs/compatibility.md §4)


@dataclass
class RigBinaries:
    kubelet: dict[str, Path] = field(default_factory=dict)  # by KUBELETS key
    containerd: dict[str, Path] = field(default_factory=dict)  # containerd, containerd-shim-runc-v2, ctr
    crictl: Path | None = None


def runtime_binaries(runtime: cfg.RigRuntime, bins: RigBinaries) -> dict[str, Path]:
    if runtime is cfg.RigRuntime.CONTAINERD_22:
        return bins.containerd
    return {n: DEBIAN_CONTAINERD / n for n in ("containerd", "containerd-shim-runc-v2", "ctr")}


def built(kubelets: Sequence[str] = tuple(KUBELETS)) -> RigBinaries | None:
    """The cached binaries without building anything, None if any is missing."""
    bins = RigBinaries()
    comps = [*(KUBELETS[k] for k in kubelets), build.CONTAINERD, build.CRICTL]
    for comp in comps:
        paths = {b: build.component_dir(comp) / b for b in comp.binaries}
        if not all(p.is_file() and os.access(p, os.X_OK) for p in paths.values()):
            return None
    for key in kubelets:
        bins.kubelet[key] = build.component_dir(KUBELETS[key]) / "kubelet"
    bins.containerd = {b: build.component_dir(build.CONTAINERD) / b for b in build.CONTAINERD.binaries}
    bins.crictl = build.component_dir(build.CRICTL) / "crictl"
    return bins


def missing_packages() -> list[str]:
    wanted = {"runc": RUNC, "busybox-static": BUSYBOX, "containerd": DEBIAN_CONTAINERD / "containerd"}
    return [pkg for pkg, path in wanted.items() if not path.exists()]


def install_packages(log: Log = _stderr) -> None:
    """apt-get install what the rig needs from Debian (runc, busybox-static, containerd 1.6)."""
    missing = missing_packages()
    if not missing:
        return
    if shutil.which("apt-get") is None:
        raise RigError(f"missing {', '.join(missing)} and there is no apt-get to install them")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    argv = ["apt-get", "install", "-y", "--no-install-recommends", *missing]
    log(f"[realnode] apt-get install {' '.join(missing)}")
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:  # stale package lists: update once and retry
        log("[realnode] apt-get update")
        subprocess.run(["apt-get", "update"], env=env, capture_output=True, check=False)
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RigError(f"apt-get install failed: {done.stderr.strip()[-800:]}")
    # The package may have left a daemon behind on an init system that starts services; we never use it.
    still = missing_packages()
    if still:
        raise RigError(f"still missing after apt-get: {', '.join(still)}")


def ensure_binaries(kubelets: Sequence[str] = tuple(KUBELETS), log: Log = _stderr) -> RigBinaries:
    """Build (or find in the cache) the kubelets, containerd 2.2 and crictl."""
    bins = RigBinaries()
    for key in kubelets:
        bins.kubelet[key] = build.ensure_component(KUBELETS[key], log=log)["kubelet"]
    bins.containerd = build.ensure_component(build.CONTAINERD, log=log)
    bins.crictl = build.ensure_component(build.CRICTL, log=log)["crictl"]
    return bins


class RealNode:
    def __init__(self, layout: lay.Layout | None = None, *, log: Log = _stderr) -> None:
        self.layout = layout or lay.Layout.default()
        self.log = log
        self.sup = Supervisor(self.layout.run_dir)
        self._bins: RigBinaries | None = None

    # --- setup ------------------------------------------------------------------------------------------

    def setup(self, kubelets: Sequence[str] = tuple(KUBELETS), *, build_missing: bool = True) -> RigBinaries:
        install_packages(self.log)
        if build_missing:
            bins = ensure_binaries(kubelets, self.log)
        else:
            found = built(kubelets)
            if found is None:
                raise RigError("the rig's binaries are not built: run `eventedpleg realnode build`")
            bins = found
        self.layout.prepare()
        self._rotate_logs()
        write_images(self.layout.images, BUSYBOX)
        self._bins = bins
        return bins

    def _rotate_logs(self) -> None:
        """The unit logs only grow (a kubelet at --v=4 writes ~1 GB an hour under churn; 8 GB were found):
        one over LOG_KEEP_BYTES becomes `<name>.old` at the next setup, so at most two of each are kept.
        Readers take offsets after setup, so nothing they read moves."""
        for node_path in (lay.KUBELET_LOG, lay.CONTAINERD_LOG):
            log = self.layout.at(node_path)
            if log.is_file() and log.stat().st_size > LOG_KEEP_BYTES:
                log.replace(log.with_name(log.name + ".old"))

    @property
    def bins(self) -> RigBinaries:
        if self._bins is None:
            found = built()
            if found is None:
                raise RigError("the rig's binaries are not built: run `eventedpleg realnode build`")
            self._bins = found
        return self._bins

    # --- state ------------------------------------------------------------------------------------------

    def spec(self) -> RigSpec | None:
        try:
            doc = json.loads(self.layout.state_file.read_text())
        except (OSError, ValueError):
            return None
        doc["runtime"] = cfg.RigRuntime(doc["runtime"])
        return RigSpec(**doc)

    def _save_spec(self, spec: RigSpec) -> None:
        self.layout.run_dir.mkdir(parents=True, exist_ok=True)
        self.layout.state_file.write_text(json.dumps(asdict(spec)))

    # --- up ---------------------------------------------------------------------------------------------

    def up(self, spec: RigSpec, *, wait_pods: float = 300.0) -> None:
        """A fresh node: whatever ran before is taken down, the agent's records and drop-ins are removed."""
        if self.sup.pid(KUBELET) or self.sup.pid(CONTAINERD):
            self.down()
        self.layout.prepare()
        self._reset_node_files(spec)
        self._save_spec(spec)
        self.start_containerd(spec.runtime)
        self.import_images(spec.runtime)
        settle = spec.gate is True and spec.pods > 0 and spec.settle_gate_off
        self.write_gate(False if settle else spec.gate)
        self.start_kubelet(spec)
        if spec.pods:
            self.wait_pods(spec.pods, timeout=wait_pods)
        if settle:
            self.write_gate(True)
            self.restart_kubelet()

    def _reset_node_files(self, spec: RigSpec) -> None:
        shutil.rmtree(self.layout.at(lay.KUBELET_CONFIG_DIR), ignore_errors=True)
        self.layout.at(lay.KUBELET_CONFIG_DIR).mkdir(parents=True)
        shutil.rmtree(self.layout.at("/" + c.AGENT_STATE_DIR), ignore_errors=True)
        self.layout.at(lay.KUBELET_CONFIG).write_text(cfg.kubelet_config(self.layout))
        self.set_pods(spec.pods)

    def set_pods(self, count: int, *, extra: dict[str, str] | None = None) -> None:
        """Exactly `count` idle static pods (plus `extra`: file name -> manifest)."""
        manifests = self.layout.at(lay.STATIC_POD_DIR)
        manifests.mkdir(parents=True, exist_ok=True)
        wanted = {f"{cfg.idle_pod_name(i)}.yaml": cfg.static_pod(cfg.idle_pod_name(i)) for i in range(count)}
        wanted.update(extra or {})
        for path in manifests.iterdir():
            if path.name not in wanted:
                path.unlink()
        for name, text in wanted.items():
            path = manifests / name
            if not path.exists() or path.read_text() != text:
                path.write_text(text)

    def write_gate(self, gate: bool | None) -> None:
        path = self.layout.at(lay.KUBELET_CONFIG_DIR) / lay.BENCH_DROPIN
        if gate is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(cfg.gate_dropin(gate))

    # --- containerd -------------------------------------------------------------------------------------

    def containerd_argv(self, runtime: cfg.RigRuntime) -> list[str]:
        exe = runtime_binaries(runtime, self.bins)["containerd"]
        return [str(exe), "--config", str(self.layout.at(lay.CONTAINERD_CONFIG))]

    def start_containerd(self, runtime: cfg.RigRuntime) -> None:
        if self.sup.pid(CONTAINERD) is not None:
            raise RigError("containerd is already running")
        self.layout.at(lay.CONTAINERD_CONFIG).write_text(cfg.containerd_config(runtime, self.layout))
        sock = self.layout.at(lay.CONTAINERD_SOCK)
        sock.unlink(missing_ok=True)
        shim_dir = runtime_binaries(runtime, self.bins)["containerd-shim-runc-v2"].parent
        # Its own shim first on PATH (docs/realnode.md): containerd finds containerd-shim-runc-v2 there.
        env = {
            "PATH": f"{shim_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": "/root",
        }
        self.sup.start(
            CONTAINERD, self.containerd_argv(runtime), log=self.layout.at(lay.CONTAINERD_LOG), env=env
        )
        self.wait(lambda: self.ctr(runtime, "version").returncode == 0, 60, "containerd to answer")

    def restart_containerd(self) -> None:
        """Restart containerd under a running kubelet (k8s#129827: a v1.36 kubelet falls back for good)."""
        self.sup.restart(CONTAINERD)
        spec = self.spec()
        runtime = spec.runtime if spec else cfg.RigRuntime.CONTAINERD_22
        self.wait(lambda: self.ctr(runtime, "version").returncode == 0, 60, "containerd to answer")

    def ctr(self, runtime: cfg.RigRuntime, *args: str) -> subprocess.CompletedProcess[str]:
        exe = runtime_binaries(runtime, self.bins)["ctr"]
        argv = [str(exe), "-a", str(self.layout.at(lay.CONTAINERD_SOCK)), "-n", "k8s.io", *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)

    def import_images(self, runtime: cfg.RigRuntime) -> None:
        listed = self.ctr(runtime, "images", "ls", "-q").stdout.split()
        archives = write_images(self.layout.images, BUSYBOX)
        for name in (PAUSE_IMAGE, IDLE_IMAGE):
            if name in listed:
                continue
            done = self.ctr(runtime, "images", "import", str(archives[name]))
            if done.returncode != 0:
                raise RigError(f"ctr images import {archives[name]} failed: {done.stderr.strip()}")

    # --- kubelet ----------------------------------------------------------------------------------------

    def kubelet_argv(self, spec: RigSpec) -> list[str]:
        return [
            str(self.bins.kubelet[spec.kubelet]),
            f"--config={self.layout.at(lay.KUBELET_CONFIG)}",
            # A real --config-dir: the agent's DropInOnly path writes 99-eventedpleg.conf here.
            f"--config-dir={self.layout.at(lay.KUBELET_CONFIG_DIR)}",
            f"--root-dir={self.layout.at(lay.KUBELET_ROOT)}",
            f"--hostname-override={cfg.NODE_NAME}",
            f"--v={spec.verbosity}",
        ]

    def start_kubelet(self, spec: RigSpec, *, wait: bool = True) -> None:
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root"}
        self.sup.start(KUBELET, self.kubelet_argv(spec), log=self.layout.at(lay.KUBELET_LOG), env=env)
        if wait:
            self.wait_healthy()

    def restart_kubelet(self, *, wait: bool = True) -> None:
        self.sup.restart(KUBELET)
        if wait:
            self.wait_healthy()

    def healthz(self) -> bool:
        url = f"http://127.0.0.1:{cfg.HEALTHZ_PORT}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def metrics(self, url: str = f"http://127.0.0.1:{cfg.READ_ONLY_PORT}/metrics") -> str:
        with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - fixed loopback URL
            return str(resp.read().decode())

    def wait_healthy(self, timeout: float = 120.0) -> None:
        def ready() -> bool:
            if self.sup.state(KUBELET) is UnitState.FAILED:
                rec = self.sup.record(KUBELET)
                how = exit_of(rec.pid) if rec else "?"
                raise RigError(
                    f"the kubelet (pid {rec.pid if rec else '?'}) {how}; see "
                    f"{self.layout.at(lay.KUBELET_LOG)}:\n{self.tail()}"
                )
            return self.healthz()

        self.wait(ready, timeout, "the kubelet's /healthz")

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(
                self.layout.at(lay.KUBELET_LOG).read_text(errors="replace").splitlines()[-lines:]
            )
        except OSError:
            return ""

    # --- pods through CRI -------------------------------------------------------------------------------

    def crictl(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        assert self.bins.crictl is not None
        endpoint = f"unix://{self.layout.at(lay.CONTAINERD_SOCK)}"
        argv = [str(self.bins.crictl), "--runtime-endpoint", endpoint, "--image-endpoint", endpoint]
        argv += ["--timeout", "30s", *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)

    def containers(self, *, all_states: bool = False) -> list[dict[str, Any]]:
        args = ["ps", "-o", "json"] + (["-a"] if all_states else [])
        done = self.crictl(*args)
        if done.returncode != 0:
            return []
        doc = json.loads(done.stdout or "{}")
        return list(doc.get("containers") or [])

    def container_pid(self, container_id: str) -> int | None:
        """The host PID of a container's process (`crictl inspect`), None when it is not running."""
        done = self.crictl("inspect", "-o", "json", container_id)
        if done.returncode != 0:
            return None
        pid = json.loads(done.stdout).get("info", {}).get("pid")
        return int(pid) if pid else None

    def sandboxes(self) -> list[dict[str, Any]]:
        done = self.crictl("pods", "-o", "json")
        if done.returncode != 0:
            return []
        return list(json.loads(done.stdout or "{}").get("items") or [])

    def running_idle(self) -> int:
        return sum(
            1
            for ctr in self.containers()
            if ctr.get("labels", {}).get("io.kubernetes.pod.name", "").startswith(cfg.IDLE_PREFIX)
        )

    def wait_pods(self, count: int, *, timeout: float = 300.0) -> None:
        self.wait(lambda: self.running_idle() >= count, timeout, f"{count} idle containers running")

    # --- down -------------------------------------------------------------------------------------------

    def down(self) -> list[str]:
        """Stop everything the rig started and clean up after it; returns what was done."""
        done: list[str] = []
        if self.sup.stop(KUBELET):
            done.append("stopped the kubelet")
        spec = self.spec()
        if self.sup.pid(CONTAINERD) is not None and self.bins.crictl is not None:
            removed = self.crictl("rmp", "-fa", timeout=180)
            if removed.returncode == 0 and removed.stdout.strip():
                done.append(f"removed {len(removed.stdout.split())} pod sandboxes")
        if self.sup.stop(CONTAINERD):
            done.append("stopped containerd")
        shims = self.stop_orphan_shims()
        if shims:
            done.append(f"stopped {shims} leftover shims")
        unmounted = self.unmount_all()
        if unmounted:
            done.append(f"unmounted {unmounted} mounts under {self.layout.base}")
        self.remove_cgroups()
        if spec is not None:
            self.layout.state_file.unlink(missing_ok=True)
        return done

    def our_shims(self) -> list[int]:
        """containerd-shim-runc-v2 processes serving our socket (they outlive containerd by design)."""
        sock = str(self.layout.at(lay.CONTAINERD_SOCK))
        pids: list[int] = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            argv = proc_argv(int(entry.name))
            if argv and Path(argv[0]).name.startswith("containerd-shim") and sock in argv:
                pids.append(int(entry.name))
        return pids

    def stop_orphan_shims(self) -> int:
        pids = [p for p in self.our_shims() if alive(p)]
        for pid in pids:
            terminate(pid, grace=5)
        return len(pids)

    def mounts(self) -> list[str]:
        base = str(self.layout.base.resolve())
        points: list[str] = []
        with contextlib.suppress(OSError):
            for line in Path("/proc/self/mountinfo").read_text().splitlines():
                point = line.split()[4].replace("\\040", " ")
                if point == base or point.startswith(base + "/"):
                    points.append(point)
        return points

    def unmount_all(self) -> int:
        count = 0
        for _ in range(5):  # stacked mounts (the kubelet's rshared bind of its root dir) need passes
            points = sorted(set(self.mounts()), key=len, reverse=True)
            if not points:
                break
            for point in points:
                if subprocess.run(["umount", point], capture_output=True, check=False).returncode != 0:
                    subprocess.run(["umount", "-l", point], capture_output=True, check=False)
                count += 1
        return count

    def remove_cgroups(self) -> None:
        """The kubelet's kubepods hierarchy, once empty (rmdir only ever removes empty cgroups)."""
        for controller in CGROUP_ROOT.iterdir():
            top = controller / "kubepods"
            if not top.is_dir():
                continue
            for directory in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                with contextlib.suppress(OSError):
                    directory.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()

    # --- status -----------------------------------------------------------------------------------------

    def status(self) -> dict[str, object]:
        spec = self.spec()
        doc: dict[str, object] = {
            "dir": str(self.layout.base),
            "spec": None if spec is None else {**asdict(spec), "runtime": spec.runtime.value},
            "kubelet": {"state": self.sup.state(KUBELET).value, "pid": self.sup.pid(KUBELET)},
            "containerd": {"state": self.sup.state(CONTAINERD).value, "pid": self.sup.pid(CONTAINERD)},
            "healthz": self.healthz(),
            "binaries": "built" if built() is not None else "not built",
            "mounts": len(self.mounts()),
        }
        if self.sup.pid(CONTAINERD) is not None and built() is not None:
            doc["containers"] = len(self.containers())
            doc["sandboxes"] = len(self.sandboxes())
        return doc

    # --- helpers ----------------------------------------------------------------------------------------

    @staticmethod
    def wait(check: Callable[[], bool], timeout: float, what: str, every: float = 0.5) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if check():
                return
            if time.monotonic() > deadline:
                raise RigError(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(every)
