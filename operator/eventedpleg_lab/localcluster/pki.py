"""Certificates and keys for the local control plane (Python `cryptography`, no openssl CLI needed).

ECDSA P-256 everywhere: generated in milliseconds, and every component accepts it (TLS serving and client
certs, and the ServiceAccount token signing key, which kube-apiserver allows as ES256).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# The first address of --service-cluster-ip-range (10.0.0.0/24): in-cluster clients reach the apiserver there.
SERVICE_IP = "10.0.0.1"
VALIDITY = dt.timedelta(days=365)


@dataclass(frozen=True)
class Pki:
    directory: Path

    def path(self, name: str) -> Path:
        return self.directory / name

    @property
    def ca_crt(self) -> Path:
        return self.path("ca.crt")

    @property
    def ca_key(self) -> Path:
        return self.path("ca.key")

    @property
    def apiserver_crt(self) -> Path:
        return self.path("apiserver.crt")

    @property
    def apiserver_key(self) -> Path:
        return self.path("apiserver.key")

    @property
    def admin_crt(self) -> Path:
        return self.path("admin.crt")

    @property
    def admin_key(self) -> Path:
        return self.path("admin.key")

    @property
    def sa_key(self) -> Path:
        return self.path("sa.key")

    @property
    def sa_pub(self) -> Path:
        return self.path("sa.pub")

    @property
    def kubelet_client_crt(self) -> Path:
        return self.path("apiserver-kubelet-client.crt")

    @property
    def kubelet_client_key(self) -> Path:
        return self.path("apiserver-kubelet-client.key")


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _cert(
    subject: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    issuer: x509.Name,
    signer: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    usage: x509.ObjectIdentifier | None = None,
    sans: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))  # tolerate small clock differences
        .not_valid_after(now + (VALIDITY * 10 if ca else VALIDITY))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
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
        ).add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(signer, hashes.SHA256())


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def create(directory: Path, *, extra_ips: tuple[str, ...] = ()) -> Pki:
    """A CA, the apiserver's serving cert (127.0.0.1, the `kubernetes` Service and names, `extra_ips`), an
    admin client cert (group system:masters) and the SA key pair."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(directory)

    ca_key = _key()
    ca_name = _name("eventedpleg-local-ca")
    _write_key(pki.ca_key, ca_key)
    _write_cert(pki.ca_crt, _cert(ca_name, ca_key.public_key(), ca_name, ca_key, ca=True))

    server_key = _key()
    sans: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address(SERVICE_IP)),
        *(x509.IPAddress(ipaddress.ip_address(ip)) for ip in extra_ips),
        x509.DNSName("localhost"),
        *(
            x509.DNSName(n)
            for n in (
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            )
        ),
    ]
    _write_key(pki.apiserver_key, server_key)
    _write_cert(
        pki.apiserver_crt,
        _cert(
            _name("kube-apiserver"),
            server_key.public_key(),
            ca_name,
            ca_key,
            usage=ExtendedKeyUsageOID.SERVER_AUTH,
            sans=sans,
        ),
    )

    # Client-certificate identity: CN is the user, O the groups. system:masters bypasses RBAC.
    admin_key = _key()
    _write_key(pki.admin_key, admin_key)
    _write_cert(
        pki.admin_crt,
        _cert(
            _name("eventedpleg-admin", "system:masters"),
            admin_key.public_key(),
            ca_name,
            ca_key,
            usage=ExtendedKeyUsageOID.CLIENT_AUTH,
        ),
    )

    sa_key = _key()
    _write_key(pki.sa_key, sa_key)
    pki.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    # The apiserver's identity towards kubelets (logs, exec, port-forward), as kubeadm makes it; real kubelets
    # authenticate it by this CA and authorize it through a SubjectAccessReview (system:masters: allowed).
    sign_client(
        pki, "kube-apiserver-kubelet-client", "system:masters", pki.kubelet_client_crt, pki.kubelet_client_key
    )
    return pki


def sign_client(pki: Pki, common_name: str, organization: str, crt: Path, key: Path) -> None:
    """A client certificate from the cluster's CA: CN is the user, O the group (e.g. a kubelet's
    system:node:<name> in system:nodes, which the Node authorizer and NodeRestriction recognise)."""
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{pki.ca_key}: not an EC key")
    issuer = x509.load_pem_x509_certificate(pki.ca_crt.read_bytes()).subject
    client_key = _key()
    _write_key(key, client_key)
    _write_cert(
        crt,
        _cert(
            _name(common_name, organization),
            client_key.public_key(),
            issuer,
            ca_key,
            usage=ExtendedKeyUsageOID.CLIENT_AUTH,
        ),
    )
