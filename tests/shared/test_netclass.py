"""The egress deny list: every refused range with its reason, and the operator's ranges."""

from __future__ import annotations

import ipaddress

import pytest

from bastion.shared.errors import InvalidInput
from bastion.shared.netclass import classify, parse_ranges

REFUSED = [
    ("0.0.0.0", "unspecified address 0.0.0.0"),
    ("0.1.2.3", "unspecified address 0.1.2.3"),
    ("127.0.0.1", "loopback address 127.0.0.1"),
    ("127.255.255.255", "loopback address 127.255.255.255"),
    ("10.0.0.1", "private address 10.0.0.1"),
    ("172.16.0.1", "private address 172.16.0.1"),
    ("172.31.255.254", "private address 172.31.255.254"),
    ("192.168.0.1", "private address 192.168.0.1"),
    ("100.64.0.1", "shared (carrier-grade NAT) address 100.64.0.1"),
    ("100.127.255.254", "shared (carrier-grade NAT) address 100.127.255.254"),
    ("169.254.169.254", "link-local (cloud metadata) address 169.254.169.254"),
    ("169.254.1.1", "link-local address 169.254.1.1"),
    ("224.0.0.1", "multicast address 224.0.0.1"),
    ("239.255.255.250", "multicast address 239.255.255.250"),
    ("198.18.0.1", "benchmarking address 198.18.0.1"),
    ("240.0.0.1", "reserved address 240.0.0.1"),
    ("255.255.255.255", "broadcast address 255.255.255.255"),
    ("192.0.2.1", "documentation address 192.0.2.1"),
    ("198.51.100.7", "documentation address 198.51.100.7"),
    ("203.0.113.9", "documentation address 203.0.113.9"),
    ("192.0.0.8", "protocol-assignment address 192.0.0.8"),
    ("::", "unspecified address ::"),
    ("::1", "loopback address ::1"),
    ("fd00:ec2::254", "private address fd00:ec2::254"),
    ("fc00::1", "private address fc00::1"),
    ("fe80::1", "link-local address fe80::1"),
    ("ff02::1", "multicast address ff02::1"),
    ("2001:db8::1", "documentation address 2001:db8::1"),
    ("fec0::1", "site-local (deprecated private) address fec0::1"),
    ("::ffff:0:a9fe:a9fe", "link-local (cloud metadata) address 169.254.169.254"),
    ("::10.0.0.1", "private address 10.0.0.1 (embedded in ::a00:1)"),
    ("::ffff:127.0.0.1", "loopback address 127.0.0.1 (embedded in ::ffff:7f00:1)"),
    ("::ffff:169.254.169.254", "link-local (cloud metadata) address 169.254.169.254"),
    ("64:ff9b::a00:1", "private address 10.0.0.1 (embedded in 64:ff9b::a00:1)"),
    ("64:ff9b::a9fe:a9fe", "link-local (cloud metadata) address 169.254.169.254"),
    ("64:ff9b:1::a00:1", "private address 10.0.0.1 (embedded in 64:ff9b:1::a00:1)"),
    ("2002:a00:1::1", "private address 10.0.0.1 (embedded in 2002:a00:1::1)"),
    ("2002:7f00:1::1", "loopback address 127.0.0.1 (embedded in 2002:7f00:1::1)"),
    # Teredo: the client address is stored XOR 0xffffffff; 0x80fffffe is 127.0.0.1.
    ("2001:0:4136:e378:8000:63bf:80ff:fffe", "loopback address 127.0.0.1 (embedded in"),
]


@pytest.mark.parametrize(("address", "reason"), REFUSED)
def test_a_refused_range_is_named_in_the_reason(address: str, reason: str) -> None:
    verdict = classify(ipaddress.ip_address(address))
    assert verdict is not None
    assert verdict.startswith(reason)


@pytest.mark.parametrize(
    "address",
    [
        "8.8.8.8",
        "93.184.216.34",
        "100.63.255.254",
        "100.128.0.1",
        "2606:4700:4700::1111",
        "64:ff9b::808:808",
        "2002:808:808::1",
        "::ffff:8.8.8.8",
    ],
)
def test_a_public_address_and_a_wrapper_of_one_are_allowed(address: str) -> None:
    assert classify(ipaddress.ip_address(address)) is None


def test_an_operator_range_allows_what_it_names_and_nothing_more() -> None:
    allowed = parse_ranges("127.0.0.0/8, 10.1.0.0/16")
    assert classify(ipaddress.ip_address("127.0.0.1"), allowed) is None
    assert classify(ipaddress.ip_address("::ffff:127.0.0.1"), allowed) is None
    assert classify(ipaddress.ip_address("10.1.2.3"), allowed) is None
    assert classify(ipaddress.ip_address("10.2.0.1"), allowed) == "private address 10.2.0.1"
    assert classify(ipaddress.ip_address("::1"), allowed) == "loopback address ::1"


def test_a_range_that_does_not_parse_is_refused_with_a_sentence() -> None:
    with pytest.raises(InvalidInput, match="CIDR"):
        parse_ranges("127.0.0.0/33")
