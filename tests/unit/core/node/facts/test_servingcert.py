"""Which certificate names count as this node's: its name and status.addresses as the kubelet requests its
serving certificate for them (DNS types as names, IP types as addresses), compared exactly."""

from __future__ import annotations

from eventedpleg.core.node.facts.servingcert import NodeIdentity, mismatch

NODE = NodeIdentity(
    "Worker-1",
    (
        ("InternalIP", "10.0.0.5"),
        ("ExternalIP", "2001:db8::5"),
        ("Hostname", "worker-1.lan"),
        ("InternalDNS", "ip-10-0-0-5.internal"),
        ("ExternalDNS", "10.9.9.9"),  # a DNS type holding an IP is no IP
    ),
)


def test_a_name_or_an_address_of_the_node_passes() -> None:
    assert mismatch(NODE, [("DNS", "worker-1")]) is None  # names compare case-insensitively
    assert mismatch(NODE, [("DNS", "worker-1.lan")]) is None
    assert mismatch(NODE, [("DNS", "elsewhere"), ("DNS", "ip-10-0-0-5.internal")]) is None
    assert mismatch(NODE, [("IP Address", "10.0.0.5")]) is None
    # ssl.getpeercert() spells IPv6 uncompressed, upper case and with a newline on some builds
    assert mismatch(NODE, [("IP Address", "2001:DB8:0:0:0:0:0:5\n")]) is None


def test_anything_else_is_named_in_one_line() -> None:
    wrong = mismatch(NODE, [("DNS", "worker-2"), ("IP Address", "10.0.0.6"), ("DNS", "*.lan")])
    assert wrong == (
        "the kubelet's serving certificate names worker-2, 10.0.0.6, *.lan, not node Worker-1 "
        "(ip-10-0-0-5.internal, worker-1, worker-1.lan, 10.0.0.5 and 1 more)"
    )
    assert mismatch(NODE, [("IP Address", "10.9.9.9")]) is not None
    assert mismatch(NODE, [("DNS", "10.0.0.5")]) is not None  # an IP written as a DNS name is not one
    assert "names no DNS name or IP, not node" in (mismatch(NODE, [("email", "a@b")]) or "")
