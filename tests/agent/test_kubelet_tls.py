"""The agent's call to the kubelet's https endpoint verifies the serving certificate, and sends its token only
over a verified connection: a real TLS server on loopback with a self-signed certificate, as the kubelet
makes one, or one the cluster's CA signed for a node (serverTLSBootstrap), recording the Authorization
headers it was sent. A CA-signed certificate must name this node. The node's files are read inside its
root."""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from eventedpleg.agent.hostfiles import HostFiles
from eventedpleg.agent.interpreter import Interpreter
from eventedpleg.agent.linuxhost import (
    BOOTSTRAPPED_CERT,
    HOST_CLUSTER_CA,
    SELF_SIGNED_CERT,
    LinuxHost,
    kubelet_serving_trust,
)
from eventedpleg.core.node.blocks.effects import Scrape
from eventedpleg.core.node.blocks.host import KubeletEndpoint
from eventedpleg.core.node.blocks.hostfault import HostFault
from eventedpleg.core.node.blocks.nodeapi import AgentNode
from eventedpleg_lab.sim.fakeapi import FakeApi

NODE_A = AgentNode(
    "node-a", addresses=(("InternalIP", "10.0.0.1"), ("Hostname", "node-a"), ("InternalIP", "fd00::a"))
)


def _self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    """Like the kubelet's own (cert.GenerateSelfSignedCertKey): CA:true, names the node only."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name}-ca@1700000000")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    crt, pem = directory / f"{name}.crt", directory / f"{name}.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return crt, pem


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@dataclass
class Signer:
    """The cluster's CA (kube-controller-manager signs kubelet-serving CSRs with it)."""

    crt: Path
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def serving(
        self, directory: Path, node: str, dns: tuple[str, ...], ips: tuple[str, ...]
    ) -> tuple[Path, Path]:
        """A kubelet serving certificate as the signer issues it: CN system:node:<node>, the SANs asked."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node}")]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        directory.mkdir(parents=True, exist_ok=True)
        crt, pem = directory / f"{node}-serving.crt", directory / f"{node}-serving.key"
        crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        pem.write_bytes(_pem_key(key))
        return crt, pem


@pytest.fixture
def signer(tmp_path: Path) -> Signer:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    crt = tmp_path / "cluster-ca.crt"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Signer(crt, cert, key)


@dataclass
class Kubelet:
    url: str
    crt: Path
    seen: list[str | None]  # the Authorization header of each request that got through TLS


ServeTls = Callable[[Path, Path], Kubelet]


@pytest.fixture
def serve_tls() -> Iterator[ServeTls]:
    """Start https /metrics servers on 127.0.0.1 with a given certificate and key; stopped at the end."""
    servers: list[HTTPServer] = []

    def start(crt: Path, key: Path) -> Kubelet:
        server, kubelet = _tls_server(crt, key)
        servers.append(server)
        return kubelet

    try:
        yield start
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


@pytest.fixture
def kubelet(tmp_path: Path, serve_tls: ServeTls) -> Kubelet:
    """An https /metrics on 127.0.0.1 serving a self-signed certificate."""
    return serve_tls(*_self_signed(tmp_path / "kubelet-side", "node-a"))


def _tls_server(crt: Path, key: Path) -> tuple[HTTPServer, Kubelet]:
    seen: list[str | None] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization"))
            body = b"kubelet_running_pods 3\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            return

    server = HTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(crt, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, Kubelet(f"https://127.0.0.1:{server.server_port}/metrics", crt, seen)


def _put(root: Path, host_path: str, data: bytes) -> Path:
    path = root / host_path.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _host(
    tmp_path: Path, url: str, cluster_ca: Path | None = None, node: AgentNode | None = NODE_A
) -> LinuxHost:
    token = tmp_path / "token"
    token.write_text("secret-token\n")
    ca = cluster_ca or tmp_path / "no-pod-ca"
    return LinuxHost(
        tmp_path / "host", nsenter=False, metrics_url=url, token_file=token, cluster_ca=ca, node=lambda: node
    )


def test_the_kubelets_own_certificate_is_verified(tmp_path: Path, kubelet: Kubelet) -> None:
    _put(tmp_path / "host", SELF_SIGNED_CERT, kubelet.crt.read_bytes())
    got = _host(tmp_path, kubelet.url).kubelet_get(KubeletEndpoint.METRICS)
    assert (got.status, got.body) == (200, "kubelet_running_pods 3\n"), got.error
    assert kubelet.seen == ["Bearer secret-token"]


def test_a_server_with_another_certificate_is_refused_before_the_token_is_sent(
    tmp_path: Path, kubelet: Kubelet
) -> None:
    other, _ = _self_signed(tmp_path / "elsewhere", "kubelet")  # the node's kubelet.crt, not what answers
    _put(tmp_path / "host", SELF_SIGNED_CERT, other.read_bytes())
    got = _host(tmp_path, kubelet.url).kubelet_get(KubeletEndpoint.METRICS)
    assert got.status == 0 and "CERTIFICATE_VERIFY_FAILED" in got.error, got
    assert kubelet.seen == []


def test_a_bootstrapped_certificate_behind_an_absolute_link_is_checked_against_the_cluster_ca(
    tmp_path: Path, kubelet: Kubelet
) -> None:
    root = tmp_path / "host"
    rotated = "/var/lib/kubelet/pki/kubelet-server-2026-11-27-08-00-00.pem"
    _put(root, rotated, b"rotated by the kubelet")
    (root / BOOTSTRAPPED_CERT.lstrip("/")).symlink_to(rotated)  # as the kubelet links it: absolute
    assert not (root / BOOTSTRAPPED_CERT.lstrip("/")).exists()  # in this (the agent's) view, dangling
    pod_ca = tmp_path / "ca.crt"
    pod_ca.write_bytes(kubelet.crt.read_bytes())  # the same self-signed cert stands in for the signer
    assert kubelet_serving_trust(HostFiles(root), pod_ca).files == (str(pod_ca),)
    got = _host(tmp_path, kubelet.url, pod_ca).kubelet_get(KubeletEndpoint.METRICS)
    assert got.status == 200, got.error
    assert kubelet.seen == ["Bearer secret-token"]


def test_the_nodes_cluster_ca_serves_when_the_pod_has_none(tmp_path: Path, kubelet: Kubelet) -> None:
    root = tmp_path / "host"
    _put(root, BOOTSTRAPPED_CERT, b"rotated by the kubelet")
    _put(root, HOST_CLUSTER_CA, kubelet.crt.read_bytes())
    got = _host(tmp_path, kubelet.url).kubelet_get(KubeletEndpoint.METRICS)
    assert got.status == 200, got.error
    assert kubelet.seen == ["Bearer secret-token"]


def test_without_a_ca_on_the_node_nothing_is_called_and_the_agent_says_what_it_missed(
    tmp_path: Path, kubelet: Kubelet
) -> None:
    (tmp_path / "host").mkdir()
    got = _host(tmp_path, kubelet.url).kubelet_get(KubeletEndpoint.METRICS)
    assert got.status == 0
    assert (
        "cannot verify the kubelet's serving certificate against /var/lib/kubelet/pki/kubelet.crt (missing"
        in got.error
    )
    assert "\n" not in got.error
    _put(tmp_path / "host", BOOTSTRAPPED_CERT, b"rotated by the kubelet")
    got = _host(tmp_path, kubelet.url).kubelet_get(KubeletEndpoint.METRICS)
    assert f"against {tmp_path / 'no-pod-ca'} or {HOST_CLUSTER_CA} (missing" in got.error
    assert kubelet.seen == []


def test_a_certificate_reached_through_a_link_out_of_the_root_is_not_trusted(
    tmp_path: Path, kubelet: Kubelet
) -> None:
    root = tmp_path / "host"
    (root / "var/lib/kubelet").mkdir(parents=True)
    (root / "var/lib/kubelet/pki").symlink_to("../../../../kubelet-side")  # where the server's cert lies
    assert (root / SELF_SIGNED_CERT.lstrip("/")).exists() is False  # named node-a.crt there, so:
    (tmp_path / "kubelet-side/kubelet.crt").write_bytes(kubelet.crt.read_bytes())
    assert (root / SELF_SIGNED_CERT.lstrip("/")).read_bytes() == kubelet.crt.read_bytes()
    got = _host(tmp_path, kubelet.url).kubelet_get(KubeletEndpoint.METRICS)
    assert got.status == 0 and f"against {SELF_SIGNED_CERT} (missing" in got.error
    assert kubelet.seen == []


def _bootstrapped(tmp_path: Path) -> None:
    _put(tmp_path / "host", BOOTSTRAPPED_CERT, b"rotated by the kubelet")


def test_a_ca_signed_certificate_naming_this_node_is_trusted(
    tmp_path: Path, signer: Signer, serve_tls: ServeTls
) -> None:
    _bootstrapped(tmp_path)
    by_name = serve_tls(*signer.serving(tmp_path / "a", "node-a", ("node-a",), ()))
    got = _host(tmp_path, by_name.url, signer.crt).kubelet_get(KubeletEndpoint.METRICS)
    assert got.status == 200, got.error
    assert by_name.seen == ["Bearer secret-token"]
    # As the kubelet requests it: its addresses only (here the IPv6 InternalIP), not necessarily the name.
    by_address = serve_tls(*signer.serving(tmp_path / "a6", "node-a", (), ("fd00:0:0:0:0:0:0:a",)))
    got = _host(tmp_path, by_address.url, signer.crt).kubelet_get(KubeletEndpoint.METRICS)
    assert got.status == 200, got.error
    assert by_address.seen == ["Bearer secret-token"]


def test_another_nodes_ca_signed_certificate_is_refused_and_gets_no_token(
    tmp_path: Path, signer: Signer, serve_tls: ServeTls
) -> None:
    """The chain verifies (the same CA signs every node's certificate); the names do not: refused after
    the handshake, before the request is written, in one line naming both sides."""
    _bootstrapped(tmp_path)
    other = serve_tls(*signer.serving(tmp_path / "b", "node-b", ("node-b",), ("10.0.0.2",)))
    got = _host(tmp_path, other.url, signer.crt).kubelet_get(KubeletEndpoint.METRICS)
    assert got.status == 0
    assert got.error == (
        f"not sending the token to {other.url}: the kubelet's serving certificate names node-b, 10.0.0.2, "
        "not node node-a (node-a, 10.0.0.1, fd00::a)"
    )
    assert other.seen == []


def test_the_refusal_is_a_one_line_host_fault_of_the_scrape(
    tmp_path: Path, signer: Signer, serve_tls: ServeTls
) -> None:
    """The phases see it as a HostFault (before the first write: the node is skipped, nothing changed),
    not as a kubelet that has not answered yet."""
    _bootstrapped(tmp_path)
    other = serve_tls(*signer.serving(tmp_path / "b", "node-b", ("node-b",), ("10.0.0.2",)))
    host = _host(tmp_path, other.url, signer.crt)
    answer = Interpreter("node-a", host, FakeApi()).perform(Scrape(), NODE_A)
    assert isinstance(answer, HostFault)
    assert answer.line() == (
        "scrape the kubelet's /metrics on node-a failed (the kubelet's serving certificate names node-b, "
        "10.0.0.2, not node node-a (node-a, 10.0.0.1, fd00::a)): the token was not sent; give the kubelet a "
        "serving certificate for this node's name or addresses (approve its own CSR), or find what else "
        "answers on its port"
    )
    assert other.seen == []


def test_a_ca_signed_certificate_is_not_trusted_without_the_node_to_check_it_against(
    tmp_path: Path, signer: Signer, serve_tls: ServeTls
) -> None:
    _bootstrapped(tmp_path)
    kubelet = serve_tls(*signer.serving(tmp_path / "a", "node-a", ("node-a",), ("10.0.0.1",)))
    got = _host(tmp_path, kubelet.url, signer.crt, node=None).kubelet_get(KubeletEndpoint.METRICS)
    assert got.status == 0 and got.error.endswith(
        "against this node's name and addresses: the Node does not exist"
    )
    assert kubelet.seen == []


def test_a_self_signed_certificate_keeps_its_pinned_trust_without_a_node(
    tmp_path: Path, kubelet: Kubelet
) -> None:
    """No serverTLSBootstrap: kubelet.crt itself is the anchor, read from this node's disk; no Node read."""
    _put(tmp_path / "host", SELF_SIGNED_CERT, kubelet.crt.read_bytes())
    got = _host(tmp_path, kubelet.url, node=None).kubelet_get(KubeletEndpoint.METRICS)
    assert got.status == 200, got.error
    assert kubelet.seen == ["Bearer secret-token"]
