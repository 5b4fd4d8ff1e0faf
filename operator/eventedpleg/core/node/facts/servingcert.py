"""Does the kubelet's serving certificate name this node? Pure: the node's identity and the certificate's
subjectAltNames in, the mismatch (or None) out.

A CA-signed kubelet serving certificate (serverTLSBootstrap) is requested by the kubelet for its Node's
addresses: DNS names from the Hostname/InternalDNS/ExternalDNS addresses, IPs from InternalIP/ExternalIP
(and a Hostname that is an IP), kubernetes/kubernetes pkg/kubelet/certificate/kubelet.go,
`addressesToHostnamesAndIPs`. The API server's own kubelet client dials one of the Node's status.addresses
(pkg/kubelet/client/kubelet_client.go, `NodeConnectionInfoGetter.GetConnectionInfo`) and, given
--kubelet-certificate-authority, verifies the certificate against that name. Every node's certificate is
signed by the same CA, so the chain alone lets one node's certificate pass for another's: a certificate
passes here only when one of its names is this node's name or one of its addresses. Names compare exactly
(case-insensitively, no wildcards: the kubelet requests none), IPs by value.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

DNS_ADDRESS_TYPES = frozenset({"Hostname", "InternalDNS", "ExternalDNS"})
IP_ADDRESS_TYPES = frozenset({"InternalIP", "ExternalIP", "Hostname"})
SHOWN = 4  # names listed in a refusal, each side


@dataclass(frozen=True)
class NodeIdentity:
    """What a certificate of this node may name: the Node's name and its status.addresses."""

    name: str
    addresses: tuple[tuple[str, str], ...] = ()  # (type, address)

    def dns_names(self) -> frozenset[str]:
        names = {self.name.lower()} if self.name else set()
        names |= {a.lower() for t, a in self.addresses if t in DNS_ADDRESS_TYPES and _ip(a) is None}
        return frozenset(names)

    def ips(self) -> frozenset[ipaddress.IPv4Address | ipaddress.IPv6Address]:
        found = (_ip(a) for t, a in self.addresses if t in IP_ADDRESS_TYPES)
        return frozenset(ip for ip in found if ip is not None)


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


def mismatch(identity: NodeIdentity, sans: Iterable[tuple[str, str]]) -> str | None:
    """None when one of the certificate's subjectAltNames (as ssl.getpeercert() lists them: ("DNS", name),
    ("IP Address", ip)) names this node; else one line saying what it names and what this node is."""
    listed = tuple(sans)
    dns, ips = identity.dns_names(), identity.ips()
    for kind, value in listed:
        if kind == "DNS" and value.lower() in dns:
            return None
        if kind == "IP Address" and _ip(value) in ips:
            return None
    names = [v.strip() for k, v in listed if k in ("DNS", "IP Address")]
    ours = sorted(dns) + sorted(str(ip) for ip in ips)
    return (
        f"the kubelet's serving certificate names {_few(names) or 'no DNS name or IP'}, not node "
        f"{identity.name} ({_few(ours)})"
    )


def _few(items: Sequence[str]) -> str:
    shown = ", ".join(items[:SHOWN])
    return shown + (f" and {len(items) - SHOWN} more" if len(items) > SHOWN else "")
