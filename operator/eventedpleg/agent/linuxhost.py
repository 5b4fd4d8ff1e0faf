"""The real host, as seen from the agent's privileged DaemonSet pod (hostPID, host `/` mounted).

Commands run in the host's namespaces through `nsenter -t 1` (systemctl, journalctl, crio, the kubelet
binary), files are read and written under the mounted root, the kubelet process is found in /proc, and the
kubelet's endpoints are reached on the host's loopback (the pod uses hostNetwork):
- healthz: http://127.0.0.1:10248/healthz (healthzBindAddress/healthzPort defaults);
- metrics: https://127.0.0.1:10250/metrics with the pod's ServiceAccount token (RBAC: nodes/metrics get).
  TLS is verified against the kubelet's serving CA when the node has it (kubelet_serving_ca below); its
  certificate names the node, not 127.0.0.1, so the chain is checked and the host name is not. Where the
  kubelet serves a certificate from elsewhere (tlsCertFile), the call is not verified (README).
"""

from __future__ import annotations

import contextlib
import os
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from eventedpleg.core.node.facts.kubeletflags import parse_cmdline, parse_environ
from eventedpleg.core.node.phases.host import (
    CommandResult,
    HostClock,
    HttpResult,
    KubeletEndpoint,
    KubeletProcess,
)

TOKEN_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
CLUSTER_CA_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt")
KUBELET_PKI = "var/lib/kubelet/pki"  # the kubelet's default certDirectory


def kubelet_serving_ca(root: Path, cluster_ca: Path = CLUSTER_CA_FILE) -> Path | None:
    """What signs the kubelet's serving certificate on this node, if we can tell: with serverTLSBootstrap
    the cluster's signer (kubelet-server-current.pem), else the kubelet's own self-signed kubelet.crt."""
    pki = root / KUBELET_PKI
    if (pki / "kubelet-server-current.pem").exists():
        return cluster_ca if cluster_ca.exists() else None
    self_signed = pki / "kubelet.crt"
    return self_signed if self_signed.is_file() else None


MAX_JOURNAL_LINES = 5000
MAX_BODY = 8 << 20


class RealClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


class LinuxHost:
    def __init__(
        self,
        root: Path = Path("/"),
        *,
        nsenter: bool = True,
        proc: Path = Path("/proc"),
        healthz_url: str = "http://127.0.0.1:10248/healthz",
        metrics_url: str = "https://127.0.0.1:10250/metrics",
        token_file: Path = TOKEN_FILE,
        cluster_ca: Path = CLUSTER_CA_FILE,
        clock: HostClock | None = None,
    ) -> None:
        self._root = root
        self._nsenter = nsenter
        self._proc = proc
        self._urls = {KubeletEndpoint.HEALTHZ: healthz_url, KubeletEndpoint.METRICS: metrics_url}
        self._token_file = token_file
        self._cluster_ca = cluster_ca
        self._clock: HostClock = clock or RealClock()

    @property
    def root(self) -> Path:
        return self._root

    @property
    def clock(self) -> HostClock:
        return self._clock

    def command(self, argv: Sequence[str]) -> list[str]:
        """The argv actually executed: inside PID 1's mount/uts/ipc/net/pid namespaces when in a pod."""
        if not self._nsenter:
            return list(argv)
        return ["nsenter", "-t", "1", "-m", "-u", "-i", "-n", "-p", "--", *argv]

    def run(self, argv: Sequence[str], *, timeout: float = 120.0) -> CommandResult:
        args = tuple(argv)
        try:
            done = subprocess.run(
                self.command(argv), capture_output=True, text=True, timeout=timeout, check=False
            )
        except FileNotFoundError as exc:
            return CommandResult(args, 127, stderr=str(exc))
        except subprocess.TimeoutExpired:
            return CommandResult(args, 124, stderr=f"timed out after {timeout:.0f}s")
        return CommandResult(args, done.returncode, done.stdout, done.stderr)

    def kubelet_process(self) -> KubeletProcess | None:
        """The kubelet of this host: a process named kubelet in host PID 1's PID namespace. A kubelet in a
        nested one (a kind node, a systemd-nspawn machine) is also listed in /proc, but it is not ours."""
        # PID 1's, or where that link cannot be read, the agent's own (it runs in the host's: hostPID).
        host_ns = _pid_namespace(self._proc / "1") or _pid_namespace(self._proc / "self")
        for entry in self._proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = parse_cmdline((entry / "cmdline").read_bytes())
                if not argv or Path(argv[0]).name != "kubelet":
                    continue
                if host_ns is not None and _pid_namespace(entry) not in (None, host_ns):
                    continue
                environ = parse_environ((entry / "environ").read_bytes())
            except OSError:
                continue
            return KubeletProcess(int(entry.name), argv, environ, self._started_at(entry))
        return None

    def _started_at(self, entry: Path) -> datetime | None:
        """/proc/<pid>/stat field 22 (start time in clock ticks after boot) + btime from /proc/stat."""
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            ticks = int(fields[19])
            btime = next(
                int(line.split()[1])
                for line in (self._proc / "stat").read_text().splitlines()
                if line.startswith("btime")
            )
        except (OSError, IndexError, ValueError, StopIteration):
            return None
        boot = datetime.fromtimestamp(btime, UTC)
        return boot + timedelta(seconds=ticks / os.sysconf("SC_CLK_TCK"))

    def journal(self, unit: str, since: datetime) -> list[str]:
        stamp = f"@{int(since.timestamp())}"
        result = self.run(["journalctl", "-u", unit, "--since", stamp, "-o", "cat", "--no-pager"], timeout=60)
        if not result.ok:
            return []
        return result.stdout.splitlines()[-MAX_JOURNAL_LINES:]

    def kubelet_get(self, endpoint: KubeletEndpoint) -> HttpResult:
        url = self._urls[endpoint]
        request = urllib.request.Request(url)  # noqa: S310 - fixed loopback http(s) URLs
        context = None
        if url.startswith("https://"):
            ca = kubelet_serving_ca(self._root, self._cluster_ca)
            context = ssl.create_default_context(cafile=str(ca) if ca else None)
            context.check_hostname = False  # the certificate names the node, we call 127.0.0.1
            if ca is None:
                context.verify_mode = ssl.CERT_NONE  # no CA we can find for it (README: kubelet TLS)
            with contextlib.suppress(OSError):  # out of a pod: no token, the kubelet answers 401
                request.add_header("Authorization", f"Bearer {self._token_file.read_text().strip()}")
        try:
            with urllib.request.urlopen(request, timeout=10, context=context) as response:  # noqa: S310
                return HttpResult(response.status, response.read(MAX_BODY).decode(errors="replace"))
        except urllib.error.HTTPError as exc:
            return HttpResult(exc.code, error=str(exc))
        except (urllib.error.URLError, OSError) as exc:
            return HttpResult(0, error=str(exc))


def _pid_namespace(entry: Path) -> str | None:
    """/proc/<pid>/ns/pid's link text (e.g. pid:[4026531836]); None where it cannot be read."""
    try:
        return str((entry / "ns" / "pid").readlink())
    except OSError:
        return None
