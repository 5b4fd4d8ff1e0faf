"""The agent's call to the kubelet's https endpoint verifies the serving certificate when the node has its
CA: a real TLS server on loopback with a self-signed certificate, as the kubelet makes one."""

from __future__ import annotations

import datetime as dt
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from eventedpleg.agent.linuxhost import KUBELET_PKI, LinuxHost, kubelet_serving_ca
from eventedpleg.core.node.phases.host import KubeletEndpoint


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


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """An https /metrics on 127.0.0.1 serving a self-signed certificate; yields its URL and cert file."""
    crt, key = _self_signed(tmp_path / "kubelet-side", "node-a")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
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
    try:
        yield f"https://127.0.0.1:{server.server_port}/metrics", crt
    finally:
        server.shutdown()


def _host(root: Path, url: str) -> LinuxHost:
    return LinuxHost(
        root, nsenter=False, metrics_url=url, token_file=root / "no-token", cluster_ca=root / "no-ca"
    )


def test_the_kubelets_own_certificate_is_verified(tmp_path: Path, kubelet: tuple[str, Path]) -> None:
    url, crt = kubelet
    root = tmp_path / "host"
    (root / KUBELET_PKI).mkdir(parents=True)
    (root / KUBELET_PKI / "kubelet.crt").write_bytes(crt.read_bytes())
    assert kubelet_serving_ca(root) == root / KUBELET_PKI / "kubelet.crt"
    got = _host(root, url).kubelet_get(KubeletEndpoint.METRICS)
    assert (got.status, got.body) == (200, "kubelet_running_pods 3\n"), got.error


def test_a_server_with_another_certificate_is_refused(tmp_path: Path, kubelet: tuple[str, Path]) -> None:
    url, _ = kubelet
    root = tmp_path / "host"
    other, _ = _self_signed(root / KUBELET_PKI, "kubelet")  # the node's kubelet.crt, not what answers
    assert other == root / KUBELET_PKI / "kubelet.crt"
    got = _host(root, url).kubelet_get(KubeletEndpoint.METRICS)
    assert got.status == 0 and "CERTIFICATE_VERIFY_FAILED" in got.error, got


def test_bootstrapped_serving_certificates_are_checked_against_the_cluster_ca(
    tmp_path: Path, kubelet: tuple[str, Path]
) -> None:
    url, crt = kubelet
    root = tmp_path / "host"
    (root / KUBELET_PKI).mkdir(parents=True)
    (root / KUBELET_PKI / "kubelet-server-current.pem").write_text("rotated by the kubelet")
    ca = tmp_path / "ca.crt"
    ca.write_bytes(crt.read_bytes())  # here the same self-signed cert stands in for the cluster's signer
    assert kubelet_serving_ca(root, ca) == ca
    host = LinuxHost(root, nsenter=False, metrics_url=url, token_file=root / "no-token", cluster_ca=ca)
    assert host.kubelet_get(KubeletEndpoint.METRICS).status == 200


def test_without_a_ca_on_the_node_the_call_is_not_verified(tmp_path: Path, kubelet: tuple[str, Path]) -> None:
    url, _ = kubelet
    root = tmp_path / "host"
    root.mkdir()
    assert kubelet_serving_ca(root) is None
    assert _host(root, url).kubelet_get(KubeletEndpoint.METRICS).status == 200
