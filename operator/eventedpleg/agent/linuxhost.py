"""The real host, as seen from the agent's privileged DaemonSet pod (hostPID, host `/` mounted).

Commands run in the host's namespaces through `nsenter -t 1` (systemctl, journalctl, crio, the kubelet
binary), files are read and written under the mounted root (agent.hostfiles, never leaving it), and the
kubelet's endpoints are reached on the host's loopback (the pod uses hostNetwork):
- the kubelet is the main process of systemd's kubelet.service (`systemctl show -p MainPID`), read from
  /proc/<pid> (cmdline, environ, exe): never a process found by its name, which any user can choose;
- healthz: http://127.0.0.1:10248/healthz (healthzBindAddress/healthzPort defaults);
- metrics: https://127.0.0.1:10250/metrics with the pod's ServiceAccount token (RBAC: nodes/metrics get),
  sent only over a verified connection: the serving certificate is checked against the cluster CA when the
  kubelet's certificate was bootstrapped (serverTLSBootstrap: pki/kubelet-server-current.pem exists), else
  against the kubelet's self-signed pki/kubelet.crt, both read inside the host root. It names the node, not
  127.0.0.1: a self-signed one is its own trust anchor, so its chain is the check; a CA-signed one must
  also name this node (its Node's name or one of its status.addresses, core.node.facts.servingcert),
  checked after the handshake and before a byte of the request, token included, is sent: the cluster CA
  signs every node's certificate, so the chain alone would let another node's pass. With nothing to
  verify against, the call is not made (README, "Install and watch").
"""

from __future__ import annotations

import http.client
import os
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from eventedpleg.agent.hostfiles import HostFiles
from eventedpleg.core.node.blocks.host import (
    CommandResult,
    HostClock,
    HttpResult,
    JournalChunk,
    KubeletEndpoint,
    KubeletProcess,
)
from eventedpleg.core.node.blocks.nodeapi import AgentNode
from eventedpleg.core.node.facts import servingcert
from eventedpleg.core.node.facts.kubeletflags import parse_cmdline, parse_environ

NodeLookup = Callable[[], AgentNode | None]  # this node's Node, read fresh

TOKEN_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
CLUSTER_CA_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt")
KUBELET_UNIT = "kubelet.service"
KUBELET_PKI = "/var/lib/kubelet/pki"  # the kubelet's default certDirectory
BOOTSTRAPPED_CERT = f"{KUBELET_PKI}/kubelet-server-current.pem"  # serverTLSBootstrap's rotating link
SELF_SIGNED_CERT = f"{KUBELET_PKI}/kubelet.crt"  # the kubelet's own, made at its first start
# kubeadm's cluster CA on every node; kube-controller-manager signs kubelet-serving CSRs with it by default.
HOST_CLUSTER_CA = "/etc/kubernetes/pki/ca.crt"


@dataclass(frozen=True)
class ServingTrust:
    """What the kubelet's serving certificate is verified against: PEM text ("" when none was found), and
    the files that were used or, when none was, looked for."""

    cadata: str
    files: tuple[str, ...]
    signed: bool = False  # by the cluster's CA (serverTLSBootstrap): it must name this node as well


def kubelet_serving_trust(files: HostFiles, cluster_ca: Path = CLUSTER_CA_FILE) -> ServingTrust:
    """With serverTLSBootstrap the cluster's signer (the pod's ServiceAccount ca.crt, and the node's
    /etc/kubernetes/pki/ca.crt), else the kubelet's own self-signed kubelet.crt. Host files are read inside
    the host root (an absolute link such as kubelet-server-current.pem resolves there); one that cannot be
    read there is not used."""
    try:
        bootstrapped = files.kind(BOOTSTRAPPED_CERT) is not None
    except OSError:
        bootstrapped = False
    if not bootstrapped:
        return ServingTrust(_host_pem(files, SELF_SIGNED_CERT), (SELF_SIGNED_CERT,))
    try:
        pod_ca = cluster_ca.read_text() if cluster_ca.is_file() else ""
    except OSError:
        pod_ca = ""
    used = ((str(cluster_ca), pod_ca), (HOST_CLUSTER_CA, _host_pem(files, HOST_CLUSTER_CA)))
    found = tuple((name, pem) for name, pem in used if pem)
    if not found:
        return ServingTrust("", tuple(name for name, _ in used))
    return ServingTrust("\n".join(pem for _, pem in found), tuple(name for name, _ in found), signed=True)


def _host_pem(files: HostFiles, host_path: str) -> str:
    try:
        text = files.read_text(host_path) or ""
    except OSError:
        return ""
    return text if "-----BEGIN CERTIFICATE-----" in text else ""


MAX_JOURNAL_LINES = 5000
CURSOR_PREFIX = "-- cursor: "
NO_ENTRIES = "-- No entries --"


def parse_followed(stdout: str, cursor: str) -> JournalChunk:
    """journalctl --show-cursor's output: the messages, then `-- cursor: ...` (absent when nothing was read,
    then the old cursor stays)."""
    lines = [ln for ln in stdout.splitlines() if ln and ln != NO_ENTRIES]
    if lines and lines[-1].startswith(CURSOR_PREFIX):
        cursor = lines.pop().removeprefix(CURSOR_PREFIX).strip()
    return JournalChunk(tuple(lines[-MAX_JOURNAL_LINES:]), cursor)


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
        node: NodeLookup | None = None,
    ) -> None:
        self._root = root
        self._files = HostFiles(root)
        self._nsenter = nsenter
        self._proc = proc
        self._urls = {KubeletEndpoint.HEALTHZ: healthz_url, KubeletEndpoint.METRICS: metrics_url}
        self._token_file = token_file
        self._cluster_ca = cluster_ca
        self._clock: HostClock = clock or RealClock()
        self._node = node

    def identify_node(self, node: NodeLookup) -> None:
        """How to read this node's Node (its name and status.addresses), which a CA-signed kubelet serving
        certificate must name; given once the agent's API client exists."""
        self._node = node

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
            return CommandResult(args, 124, stderr=f"timed out after {timeout:.0f}s", timed_out=True)
        return CommandResult(args, done.returncode, done.stdout, done.stderr)

    def kubelet_main_pid(self) -> int | None:
        """systemd's MainPID of kubelet.service; None when it does not run (MainPID=0) or cannot be asked."""
        result = self.run(["systemctl", "show", "--property=MainPID", "--value", KUBELET_UNIT], timeout=30)
        try:
            pid = int(result.stdout.strip()) if result.ok else 0
        except ValueError:
            return None
        return pid if pid > 0 else None

    def kubelet_process(self) -> KubeletProcess | None:
        """The kubelet of this host: kubelet.service's main process. Where systemd does not run a kubelet
        (k3s, RKE2, a kubelet started by hand) there is none: the agent does not guess one by its name."""
        pid = self.kubelet_main_pid()
        return None if pid is None else self.process(pid)

    def process(self, pid: int) -> KubeletProcess | None:
        """What /proc says of this PID (its argv, environment and binary), None once it is gone."""
        entry = self._proc / str(pid)
        try:
            argv = parse_cmdline((entry / "cmdline").read_bytes())
            environ = parse_environ((entry / "environ").read_bytes())
            exe = str((entry / "exe").readlink())
        except OSError:
            return None
        if not argv:
            return None  # a zombie, or not yet exec'd
        # A binary replaced since it started (a package upgrade) reads "<path> (deleted)": the path now
        # holds the new one, which is what a restart runs.
        exe = exe.removesuffix(" (deleted)")
        return KubeletProcess(pid, argv, environ, self._started_at(entry), exe=exe)

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

    def journal_after(self, unit: str, cursor: str, since: datetime, match: str) -> JournalChunk:
        """journalctl filters by --grep itself and reads on from --after-cursor: the cost of a look is what
        the kubelet logged since the last one, not its whole log. The cursor it shows is where it stopped
        reading, matched or not; it shows none when nothing was logged since (the old one stays)."""
        where = ["--after-cursor", cursor] if cursor else ["--since", f"@{int(since.timestamp())}"]
        argv = ["journalctl", "-u", unit, *where, "--grep", match, "-o", "cat", "--no-pager", "--show-cursor"]
        result = self.run(argv, timeout=60)  # exits 1 when nothing matched: the output still counts
        return parse_followed(result.stdout, cursor)

    def kubelet_get(self, endpoint: KubeletEndpoint) -> HttpResult:
        url = self._urls[endpoint]
        if not url.startswith("https://"):
            return _plain_get(url)
        trust = kubelet_serving_trust(self._files, self._cluster_ca)
        if not trust.cadata:
            return HttpResult(
                0,
                error=f"not calling {url}: cannot verify the kubelet's serving certificate against "
                f"{' or '.join(trust.files)} (missing, or not readable inside the host root); the "
                "token is sent only over a verified connection",
            )
        identity = None
        if trust.signed:
            identity, why = self._identity()
            if identity is None:
                return HttpResult(0, error=f"not calling {url}: {why}")
        try:
            context = ssl.create_default_context(cadata=trust.cadata)
        except ssl.SSLError as exc:
            return HttpResult(0, error=f"not calling {url}: {' or '.join(trust.files)}: {exc}")
        context.check_hostname = False  # we call 127.0.0.1; the node's names are checked below
        try:
            token = self._token_file.read_text().strip()
        except OSError:
            token = ""  # out of a pod: no token, the kubelet answers 401
        return _verified_get(url, context, token, identity)

    def _identity(self) -> tuple[servingcert.NodeIdentity | None, str]:
        """This node's name and addresses from its Node, or why there are none."""
        why = "cannot check the kubelet's serving certificate against this node's name and addresses"
        if self._node is None:
            return None, f"{why}: the agent has no Node to read them from"
        try:
            node = self._node()
        except Exception as exc:  # the API server unreachable or refusing: no call, said in one line
            return None, f"{why}: reading the Node failed: {str(exc).splitlines()[0] if str(exc) else exc!r}"
        if node is None:
            return None, f"{why}: the Node does not exist"
        return servingcert.NodeIdentity(node.name, node.addresses), ""


def _plain_get(url: str) -> HttpResult:
    request = urllib.request.Request(url)  # noqa: S310 - fixed loopback http URLs
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            return HttpResult(response.status, response.read(MAX_BODY).decode(errors="replace"))
    except urllib.error.HTTPError as exc:
        return HttpResult(exc.code, error=str(exc))
    except (urllib.error.URLError, OSError) as exc:
        return HttpResult(0, error=str(exc))


def _verified_get(
    url: str, context: ssl.SSLContext, token: str, identity: servingcert.NodeIdentity | None
) -> HttpResult:
    """GET over TLS verified by `context`; with `identity`, the peer's certificate must name this node,
    checked after the handshake and before the request (and the token in it) is written."""
    parts = urllib.parse.urlsplit(url)
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    conn = http.client.HTTPSConnection(parts.hostname or "", parts.port or 443, timeout=10, context=context)
    try:
        conn.connect()
        if identity is not None:
            sock = conn.sock
            cert = sock.getpeercert() if isinstance(sock, ssl.SSLSocket) else None
            wrong = servingcert.mismatch(identity, _sans(cert))
            if wrong is not None:
                return HttpResult(0, error=f"not sending the token to {url}: {wrong}", untrusted=wrong)
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        response = conn.getresponse()
        body = response.read(MAX_BODY).decode(errors="replace")
        if response.status >= 400:
            return HttpResult(response.status, error=f"HTTP Error {response.status}: {response.reason}")
        return HttpResult(response.status, body)
    except (OSError, http.client.HTTPException) as exc:
        return HttpResult(0, error=str(exc).replace("\n", " "))
    finally:
        conn.close()


def _sans(cert: object) -> tuple[tuple[str, str], ...]:
    """subjectAltName of a verified peer's getpeercert(): ("DNS", name) and ("IP Address", ip) pairs."""
    listed = cert.get("subjectAltName", ()) if isinstance(cert, dict) else ()
    return tuple((str(e[0]), str(e[1])) for e in listed if isinstance(e, tuple) and len(e) == 2)
