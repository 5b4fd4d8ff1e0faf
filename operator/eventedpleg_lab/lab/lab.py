"""The lab: the local control plane (with NodeRestriction) plus real nodes, each a systemd-nspawn machine
with systemd as PID 1, its container runtime and a kubelet joined with its own system:node:<name> cert.

    lab = Lab(directory)
    lab.up(nodes.parse(nodes.DEFAULT_SPEC))   # builds/caches what is missing, boots, waits for Ready
    lab.status()
    lab.down()                                # returns what was left behind (empty when clean)

State lives in <directory>/lab.json (PIDs, the apiserver port, the kernel tunables found before the first
node booted), so `down` works from another process.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eventedpleg_lab.lab import assets, kubeadm, machine
from eventedpleg_lab.lab import nodefiles as nf
from eventedpleg_lab.lab.nodes import GATEWAY, REGISTRY, LabRuntime, NodeSpec, parse
from eventedpleg_lab.localcluster import build, pki
from eventedpleg_lab.localcluster import cluster as lc
from eventedpleg_lab.localcluster.build import Log
from eventedpleg_lab.realnode import rig

STATE_FILE = "lab.json"
CLUSTER_DIR = "cluster"
# The nodes reach the apiserver on the bridge; the serving cert already names `kubernetes`, which the
# kubelets' kubeconfig asks for (tls-server-name). NodeRestriction (kubelets may only touch their own Node)
# is on in every LocalCluster.
APISERVER_ARGS = (
    "--bind-address=0.0.0.0",
    "--kubelet-preferred-address-types=InternalIP",  # logs/exec: node names do not resolve here
)
# With kubeadm nodes: bootstrap tokens authenticate (kubeadm's own apiserver manifest sets this), and
# kube-controller-manager runs the two controllers kubeadm's manifest adds to the default set:
# bootstrapsigner (signs cluster-info) and tokencleaner (KK/cmd/kubeadm/app/phases/controlplane/manifests.go).
# csrapproving and csrsigning are on by default; the cluster's CA signs (--cluster-signing-*-file).
KUBEADM_APISERVER_ARGS = ("--enable-bootstrap-token-auth=true",)
KUBEADM_CONTROLLER_MANAGER_ARGS = ("--controllers=*,bootstrapsigner,tokencleaner",)
KUBEADM_DIR = "kubeadm"
JOIN_TIMEOUT = 360.0  # seconds; one demo run on a loaded machine (load 8 on 2 cores) hit an earlier 180 s


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def default_dir() -> Path:
    return build.cache_dir() / "lab" / "run"


class LabError(RuntimeError):
    pass


@dataclass
class LabState:
    nodes: str  # the spec text
    api_port: int
    sysctls: dict[str, str]
    pids: dict[str, int] = field(default_factory=dict)  # node -> nspawn PID
    # Whether nspawn's /run/systemd/nspawn existed before the lab (if not, `down` removes it).
    nspawn_run_existed: bool = True
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def specs(self) -> tuple[NodeSpec, ...]:
        return parse(self.nodes)


class Lab:
    def __init__(self, directory: Path | None = None, *, log: Log = _stderr) -> None:
        self.directory = Path(directory or default_dir()).resolve()
        self.log = log

    @property
    def cluster_dir(self) -> Path:
        return self.directory / CLUSTER_DIR

    @property
    def kubeconfig(self) -> Path:
        return self.cluster_dir / lc.ADMIN_KUBECONFIG

    def node_dir(self, name: str) -> Path:
        return self.directory / "nodes" / name

    def state(self) -> LabState | None:
        try:
            return LabState(**json.loads((self.directory / STATE_FILE).read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def _save(self, state: LabState) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / STATE_FILE).write_text(json.dumps(state.__dict__, indent=1))

    # --- assets -----------------------------------------------------------------------------------------

    def prepare(self, specs: tuple[NodeSpec, ...]) -> rig.RigBinaries:
        """Everything the nodes are made from, built or found in the cache."""
        assets.ensure_nspawn(self.log)
        assets.ensure_rootfs(self.log)
        assets.ensure_images(self.log)
        # The real-node rig's builds: only the ones this node set uses.
        bins = rig.RigBinaries()
        for key in sorted({s.kubelet for s in specs}):
            bins.kubelet[key] = build.ensure_component(rig.KUBELETS[key], log=self.log)["kubelet"]
        # crictl on every node, as on a kubeadm node (the CRI-O benchmark counts containers with it).
        bins.crictl = build.ensure_component(build.CRICTL, log=self.log)["crictl"]
        if any(s.runtime is LabRuntime.CONTAINERD_22 for s in specs):
            bins.containerd = build.ensure_component(build.CONTAINERD, log=self.log)
        if any(s.runtime is LabRuntime.CONTAINERD_17 for s in specs):
            build.ensure_component(build.CONTAINERD_17, log=self.log)
        if any(s.kubeadm for s in specs):
            build.ensure_component(build.KUBEADM_136, log=self.log)
        for runtime in sorted({s.runtime for s in specs if s.runtime.is_crio}):
            assets.ensure_crio(assets.CRIO_VERSIONS[runtime], self.log)
        build.ensure_component(build.CRANE, log=self.log)  # the lab registry, started with the control plane
        return bins

    # --- up ---------------------------------------------------------------------------------------------

    def up(self, specs: tuple[NodeSpec, ...], *, timeout: float = 300.0) -> LabState:
        if self.state() is not None:
            raise LabError(f"a lab is already up from {self.directory}; run `eventedpleg lab down` first")
        timings: dict[str, float] = {}
        t0 = time.monotonic()
        bins = self.prepare(specs)
        timings["assets"] = round(time.monotonic() - t0, 1)
        sysctls = machine.read_sysctls()
        state = LabState(
            nodes=",".join(s.to_text() for s in specs),
            api_port=0,
            sysctls=sysctls,
            nspawn_run_existed=machine.NSPAWN_RUN.exists(),
        )
        self.directory.mkdir(parents=True, exist_ok=True)
        self._save(state)  # from here on `down` restores the sysctls read above
        try:
            raised = machine.raise_inotify_instances(len(specs))
            if raised:
                self.log(f"[lab] {raised}")
            machine.bridge_up(specs)
            t1 = time.monotonic()
            joining = any(s.kubeadm for s in specs)
            cluster = lc.LocalCluster(
                self.cluster_dir,
                log=self.log,
                detach=True,
                apiserver_args=APISERVER_ARGS + (KUBEADM_APISERVER_ARGS if joining else ()),
                controller_manager_args=KUBEADM_CONTROLLER_MANAGER_ARGS if joining else (),
                apiserver_ips=(GATEWAY,),  # kubeadm's discovery dials it without a TLS server name
                registry_address=REGISTRY,
            )
            cluster.start()
            state.api_port = cluster.ports["apiserver"]
            timings["control-plane"] = round(time.monotonic() - t1, 1)
            self._save(state)
            boot = self._kubeadm_init(state.api_port) if joining else None
            if joining:
                timings["kubeadm-init"] = round(time.monotonic() - t1 - timings["control-plane"], 1)
            t2 = time.monotonic()
            with ThreadPoolExecutor(max_workers=3) as pool:
                list(pool.map(lambda s: self._write_node(s, specs, state.api_port, bins, boot), specs))
            timings["rootfs-unpack"] = round(time.monotonic() - t2, 1)
            t3 = time.monotonic()
            for spec in specs:
                node_dir = self.node_dir(spec.name)
                state.pids[spec.name] = machine.boot(
                    spec, node_dir / "rootfs", node_dir / "boot.log"
                ).nspawn_pid
                self._save(state)
            if joining:
                with ThreadPoolExecutor(max_workers=3) as pool:
                    list(pool.map(lambda s: self._join(s, timings, t3), [s for s in specs if s.kubeadm]))
            self.wait_ready(specs, timeout=timeout, timings=timings, since=t3)
            timings["up"] = round(time.monotonic() - t0, 1)
            state.timings = timings
            self._save(state)
        except BaseException:
            self.log(f"[lab] up failed; logs in {self.directory}; taking down what started")
            self.down()
            raise
        return state

    # --- kubeadm --------------------------------------------------------------------------------------------

    def _kubeadm_init(self, api_port: int) -> kubeadm.Bootstrap:
        """What `kubeadm init` leaves for joining nodes, made by the real kubeadm's init phases."""
        cluster_pki = pki.Pki(self.cluster_dir / "pki")

        def signed(token_id: str) -> bool:
            done = self.kubectl("get", "configmap", "cluster-info", "-n", "kube-public", "-o", "json")
            return done.returncode == 0 and f"jws-kubeconfig-{token_id}" in json.loads(done.stdout).get(
                "data", {}
            )

        return kubeadm.prepare_control_plane(
            build.component_dir(build.KUBEADM_136) / "kubeadm",
            self.directory / KUBEADM_DIR,
            api_port=api_port,
            ca_crt=cluster_pki.ca_crt,
            admin_crt=cluster_pki.admin_crt,
            admin_key=cluster_pki.admin_key,
            log=self.log,
            signed=signed,
        )

    def _join(
        self, spec: NodeSpec, timings: dict[str, float], since: float, *, timeout: float = 180.0
    ) -> None:
        """`kubeadm join` inside the node once its containerd runs (the kubelet crash-loops until then, as
        a freshly installed package's does). Its output goes to nodes/<name>/kubeadm-join.log."""
        deadline = time.monotonic() + timeout
        init = None
        while time.monotonic() < deadline:
            init = self.init_pid(spec.name)
            if (
                init is not None
                and machine.nsenter(init, ["systemctl", "is-active", "containerd"], timeout=20).stdout.strip()
                == "active"
            ):
                break
            time.sleep(1)
        else:
            raise LabError(f"{spec.name}: containerd not active after {timeout:.0f}s; cannot kubeadm join")
        assert init is not None
        argv = kubeadm.join_argv()
        log_file = self.node_dir(spec.name) / "kubeadm-join.log"
        try:
            # kubeadm's own waits are longer (kubelet health 4 min, TLS bootstrap 5 min): give it those.
            done = machine.nsenter(init, argv, timeout=JOIN_TIMEOUT)
        except subprocess.TimeoutExpired as exc:
            output = "".join(_text(part) for part in (exc.stdout, exc.stderr))
            journal = machine.nsenter(
                init, ["journalctl", "-u", "kubelet", "-n", "30", "--no-pager", "-o", "cat"]
            )
            log_file.write_text(f"$ {' '.join(argv)}\n{output}\n--- kubelet journal\n{journal.stdout}")
            raise LabError(
                f"{spec.name}: kubeadm join still running after {JOIN_TIMEOUT:.0f}s:\n{output[-1200:]}\n"
                f"kubelet journal:\n{journal.stdout[-1500:]}"
            ) from None
        log_file.write_text(f"$ {' '.join(argv)}\n{done.stdout}{done.stderr}")
        if done.returncode != 0:
            raise LabError(
                f"{spec.name}: kubeadm join failed (exit {done.returncode}):\n"
                f"{(done.stdout + done.stderr)[-1500:]}"
            )
        timings[f"joined:{spec.name}"] = round(time.monotonic() - since, 1)
        self.log(f"[lab] {spec.name}: kubeadm join done after {timings[f'joined:{spec.name}']}s")

    def _write_node(
        self,
        spec: NodeSpec,
        specs: tuple[NodeSpec, ...],
        api_port: int,
        bins: rig.RigBinaries,
        boot: kubeadm.Bootstrap | None = None,
    ) -> None:
        node_dir = self.node_dir(spec.name)
        shutil.rmtree(node_dir, ignore_errors=True)
        root = node_dir / "rootfs"
        root.mkdir(parents=True)
        # GNU tar: faster than tarfile on ~1 GB and keeps owners, modes, device nodes and xattrs as made.
        subprocess.run(["tar", "-C", str(root), "-xf", str(assets.rootfs_tar())], check=True)
        join = kubeadm.join_config(spec, boot) if spec.kubeadm and boot is not None else None
        files = nf.node_files(spec, specs, api_port=api_port, machine_id=uuid.uuid4().hex, join_config=join)
        for node_path, item in files.items():
            target = root / node_path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(item.text)
            target.chmod(item.mode)
        for node_path, dest in nf.node_links(spec).items():
            link = root / node_path.lstrip("/")
            link.parent.mkdir(parents=True, exist_ok=True)
            link.unlink(missing_ok=True)
            link.symlink_to(dest)
        binaries: dict[str, Path] = {} if spec.kubeadm else {"kubelet": bins.kubelet[spec.kubelet]}
        if bins.crictl is not None:
            binaries["crictl"] = bins.crictl
        if spec.runtime is LabRuntime.CONTAINERD_22:
            binaries.update(bins.containerd)
        if spec.runtime is LabRuntime.CONTAINERD_17:
            binaries.update(
                {b: build.component_dir(build.CONTAINERD_17) / b for b in build.CONTAINERD_17.binaries}
            )
        if spec.runtime.is_crio:
            crio = assets.crio_dir(assets.CRIO_VERSIONS[spec.runtime])
            binaries.update({b: crio / b for b in ("crio", "pinns")})
        for name, source in binaries.items():
            shutil.copy2(source, root / "usr/local/bin" / name)
        if spec.kubeadm:  # where the kubelet and kubeadm Debian packages install them
            shutil.copy2(bins.kubelet[spec.kubelet], root / nf.KUBEADM_KUBELET.lstrip("/"))
            shutil.copy2(
                build.component_dir(build.KUBEADM_136) / "kubeadm", root / nf.KUBEADM_BIN.lstrip("/")
            )
        (root / nf.IMAGE_DIR.lstrip("/")).mkdir(parents=True, exist_ok=True)
        for name, archive in assets.ensure_images().items():
            shutil.copy2(archive, root / nf.IMAGE_DIR.lstrip("/") / f"{name}.tar")
        if spec.kubeadm:  # kubeadm join writes ca.crt, bootstrap-kubelet.conf; the kubelet its own cert
            return
        pki_dir = root / nf.PKI_DIR.lstrip("/")
        pki_dir.mkdir(parents=True, exist_ok=True)
        cluster_pki = pki.Pki(self.cluster_dir / "pki")
        shutil.copy2(cluster_pki.ca_crt, pki_dir / "ca.crt")
        pki.sign_client(
            cluster_pki,
            f"system:node:{spec.name}",
            "system:nodes",
            pki_dir / "kubelet.crt",
            pki_dir / "kubelet.key",
        )
        (root / "etc/kubernetes/kubelet.conf.d").mkdir(parents=True, exist_ok=True)

    def kubectl(
        self, *args: str, stdin: str | None = None, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [lc.kubectl_path(), f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin, capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip

    def nodes(self) -> dict[str, dict[str, Any]]:
        done = self.kubectl("get", "nodes", "-o", "json")
        if done.returncode != 0:
            return {}
        return {item["metadata"]["name"]: item for item in json.loads(done.stdout)["items"]}

    def wait_ready(
        self, specs: tuple[NodeSpec, ...], *, timeout: float, timings: dict[str, float], since: float
    ) -> None:
        pending = {s.name for s in specs}
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for name, node in self.nodes().items():
                if name in pending and node_ready(node):
                    pending.discard(name)
                    timings[f"ready:{name}"] = round(time.monotonic() - since, 1)
                    self.log(f"[lab] {name} Ready after {timings[f'ready:{name}']}s")
            time.sleep(1)
        if pending:
            for name in sorted(pending):  # the node is taken down next: show why now
                init = self.init_pid(name)
                if init is not None:
                    journal = machine.nsenter(
                        init, ["journalctl", "-u", "kubelet", "-u", "crio", "-u", "containerd", "-n", "25",
                               "--no-pager", "-o", "cat"], timeout=30,
                    )  # fmt: skip
                    self.log(f"[lab] {name}, last journal lines:\n{journal.stdout}")
            raise LabError(f"not Ready after {timeout:.0f}s: {', '.join(sorted(pending))}")

    # --- images -----------------------------------------------------------------------------------------

    def load_image(self, archive: Path, ref: str) -> dict[str, str]:
        """Import an OCI archive into every node's runtime under `ref` (no registry: pods use
        imagePullPolicy Never/IfNotPresent). Returns node -> what the runtime now lists for `ref`."""
        state = self.state()
        if state is None:
            raise LabError("no lab is up")
        repo = ref.rsplit(":", 1)[0]
        found: dict[str, str] = {}
        for spec in state.specs:
            init = self.init_pid(spec.name)
            if init is None:
                raise LabError(f"{spec.name} is not running")
            node_path = f"{nf.IMAGE_DIR}/load/{archive.name}"
            target = self.node_dir(spec.name) / "rootfs" / node_path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(archive, target)
            if spec.runtime.is_crio:
                argv = ["skopeo", "copy", "-q", f"oci-archive:{node_path}", f"containers-storage:{ref}"]
                check = ["skopeo", "inspect", "--format", "{{.Digest}}", f"containers-storage:{ref}"]
            else:
                # The archive's ref.name is the whole reference; ctr keeps only its tag part and prefixes
                # --base-name (containerd archive importer), which gives back `ref`.
                argv = ["ctr", "-n", "k8s.io", "images", "import", f"--base-name={repo}", node_path]
                check = ["ctr", "-n", "k8s.io", "images", "ls", "-q", f"name=={ref}"]
            done = machine.nsenter(init, argv, timeout=300)
            target.unlink(missing_ok=True)
            if done.returncode != 0:
                raise LabError(f"{spec.name}: {' '.join(argv)}: {done.stderr.strip()[-400:]}")
            listed = machine.nsenter(init, check, timeout=60).stdout.strip()
            if not listed:
                raise LabError(f"{spec.name}: {ref} not listed after the import")
            found[spec.name] = listed
            self.log(f"[lab] {spec.name}: {ref} imported ({listed})")
        return found

    # --- status -----------------------------------------------------------------------------------------

    def init_pid(self, name: str) -> int | None:
        state = self.state()
        if state is None or name not in state.pids:
            return None
        return machine.node_init_pid(state.pids[name])

    def status(self) -> dict[str, Any]:
        state = self.state()
        if state is None:
            return {"up": False, "directory": str(self.directory)}
        api = self.nodes()
        out: dict[str, Any] = {
            "up": True,
            "directory": str(self.directory),
            "kubeconfig": str(self.kubeconfig),
        }
        out["controlPlane"] = lc.running_pids(self.cluster_dir)
        rows = []
        for spec in state.specs:
            pid = state.pids.get(spec.name)
            node = api.get(spec.name, {})
            info = node.get("status", {}).get("nodeInfo", {})
            init = machine.node_init_pid(pid) if pid else None
            rows.append(
                {
                    "name": spec.name,
                    "spec": spec.to_text(),
                    "ip": spec.ip,
                    "podSubnet": spec.pod_subnet,
                    "nspawnPid": pid,
                    "systemd": _system_state(init),
                    "ready": node_ready(node) if node else False,
                    "kubeletVersion": info.get("kubeletVersion"),
                    "containerRuntimeVersion": info.get("containerRuntimeVersion"),
                }
            )
        out["nodes"] = rows
        out["timings"] = state.timings
        return out

    # --- down -------------------------------------------------------------------------------------------

    def down(self) -> list[str]:
        """Stop every node (by PID) and the control plane, remove cgroups, the bridge and the node roots,
        restore the kernel tunables; returns what is still left (empty when clean)."""
        state = self.state()
        saved = state.sysctls if state else {}
        t0 = time.monotonic()
        if state is not None:
            with ThreadPoolExecutor(max_workers=max(1, len(state.pids))) as pool:
                list(pool.map(machine.stop, state.pids.values()))
            # The kernel finishes tearing down a PID namespace after its init is gone: give it a moment.
            deadline = time.monotonic() + 15
            while machine.processes_in_lab_cgroups() and time.monotonic() < deadline:
                time.sleep(0.2)
            for spec in state.specs:
                for cgroup in machine.node_cgroups(spec):
                    machine.remove_cgroup_tree(cgroup)
                machine.remove_nspawn_runtime(spec.name, created_run_dir=not state.nspawn_run_existed)
        self.log(f"[lab] nodes stopped in {time.monotonic() - t0:.0f}s")
        lc.stop(self.cluster_dir)
        machine.bridge_down()
        restored = machine.restore_sysctls(saved)
        if restored:
            self.log(f"[lab] restored {' '.join(restored)}")
        names = tuple(s.name for s in state.specs) if state else ()
        left = machine.leftovers(self.directory, saved, names)
        if not left:
            t0 = time.monotonic()
            nodes_dir = self.directory / "nodes"
            roots = list(nodes_dir.iterdir()) if nodes_dir.is_dir() else []
            with ThreadPoolExecutor(max_workers=max(1, len(roots))) as pool:  # ~1 GB of small files each
                list(pool.map(lambda p: shutil.rmtree(p, ignore_errors=True), roots))
            shutil.rmtree(nodes_dir, ignore_errors=True)
            self.log(f"[lab] node roots removed in {time.monotonic() - t0:.0f}s")
            lc.remove_state(self.cluster_dir)
            with contextlib.suppress(FileNotFoundError):
                (self.directory / STATE_FILE).unlink()
        return left


def _text(data: str | bytes | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def node_ready(node: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in node.get("status", {}).get("conditions", [])
    )


def _system_state(init_pid: int | None) -> str | None:
    if init_pid is None:
        return None
    done = machine.nsenter(init_pid, ["systemctl", "is-system-running"], timeout=20)
    return done.stdout.strip() or None
