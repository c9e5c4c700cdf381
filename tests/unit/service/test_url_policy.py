"""The pure checks behind image URLs (``service.images.url_policy``): address classes (IPv4 inside IPv6
included), the opt-in, the host allow-list and what is a URL."""

from __future__ import annotations

import ipaddress

import pytest
from pydantic import ValidationError

from service.images.url_policy import (
    HostRule,
    address_class,
    address_refusal,
    host_allowed,
    is_url,
    normalize_host,
    parse_host_rule,
    parse_hosts,
)
from service.settings import Settings

CLASSES = {
    "127.0.0.1": "loopback",
    "127.255.0.9": "loopback",
    "::1": "loopback",
    "10.0.0.7": "private",
    "172.16.0.1": "private",
    "172.31.255.255": "private",
    "192.168.1.1": "private",
    "100.64.0.1": "private",  # shared address space: not globally reachable
    "192.0.2.1": "private",  # documentation
    "fc00::1": "private",
    "fd12:3456::1": "private",
    "fec0::1": "private",  # deprecated site-local
    "169.254.169.254": "link-local",  # the cloud metadata address
    "169.254.0.1": "link-local",
    "fe80::1": "link-local",
    "0.0.0.0": "unspecified",
    "::": "unspecified",
    "224.0.0.1": "multicast",
    "239.255.255.250": "multicast",
    "ff02::1": "multicast",
    "240.0.0.1": "reserved",
    "255.255.255.255": "reserved",
    # IPv4 inside IPv6: the class of the IPv4 address
    "::ffff:127.0.0.1": "loopback",
    "::ffff:10.0.0.7": "private",
    "::ffff:169.254.169.254": "link-local",
    "::127.0.0.1": "loopback",  # IPv4-compatible (deprecated)
    "64:ff9b::a9fe:a9fe": "link-local",  # NAT64 of 169.254.169.254
    "2002:7f00:1::": "loopback",  # 6to4 of 127.0.0.1
    "2002:a00:7::1": "private",  # 6to4 of 10.0.0.7
    # public
    "8.8.8.8": None,
    "93.184.215.14": None,
    "172.32.0.1": None,
    "2606:4700:4700::1111": None,
    "::ffff:8.8.8.8": None,
    "64:ff9b::808:808": None,
}


@pytest.mark.parametrize(("address", "expected"), list(CLASSES.items()))
def test_address_classes(address: str, expected: str | None) -> None:
    assert address_class(ipaddress.ip_address(address)) == expected


def test_the_opt_in_allows_loopback_private_and_link_local_only() -> None:
    for address, expected in CLASSES.items():
        ip = ipaddress.ip_address(address)
        assert address_refusal(ip, allow_private=False) == expected
        relaxed = address_refusal(ip, allow_private=True)
        assert relaxed == (None if expected in ("loopback", "private", "link-local") else expected), address


def test_host_rules_parse_and_match() -> None:
    rules = parse_hosts(
        " images.example.org, *.cdn.example.org:443, 127.0.0.1:8000, [::1]:9000, Bücher.example. "
    )
    assert [str(r) for r in rules] == [
        "images.example.org",
        "*.cdn.example.org:443",
        "127.0.0.1:8000",
        "[::1]:9000",
        "xn--bcher-kva.example",
    ]
    assert host_allowed("images.example.org", 80, rules) and host_allowed("images.example.org", 8443, rules)
    assert host_allowed("a.cdn.example.org", 443, rules) and host_allowed("a.b.cdn.example.org", 443, rules)
    assert not host_allowed("cdn.example.org", 443, rules)  # *.domain: subdomains, not the domain
    assert not host_allowed("a.cdn.example.org", 80, rules)
    assert not host_allowed("images.example.org.evil.test", 80, rules)
    assert not host_allowed("evilimages.example.org", 80, rules)
    assert host_allowed("127.0.0.1", 8000, rules) and not host_allowed("127.0.0.1", 8001, rules)
    assert host_allowed(normalize_host("[::1]"), 9000, rules)
    assert host_allowed(normalize_host("BÜCHER.example."), 80, rules)
    assert parse_hosts("") == () and parse_hosts(" , ") == ()
    # one address, two spellings
    assert parse_host_rule("::ffff:127.0.0.1") == HostRule(normalize_host("[::ffff:7f00:1]"))


@pytest.mark.parametrize(
    "entry", ["*", "*.*", "http://images.example.org", "a b", "[::1", "[::1]x", "h:0", "h:65536", "h:x",
              "*.10.0.0.1", "user@host", "a..b", "-a.example"],
)  # fmt: skip
def test_bad_host_entries_are_refused_naming_them(entry: str) -> None:
    with pytest.raises(ValueError, match=r"port|not a host|wildcard"):
        parse_host_rule(entry)


def test_the_settings_are_checked_naming_them() -> None:
    with pytest.raises(ValidationError, match=r"COMPCAP_IMAGE_URL_HOSTS: '\*' is not a host"):
        Settings(image_url_hosts="images.example.org, *")
    with pytest.raises(ValidationError, match="image_url_timeout_s"):
        Settings(image_url_timeout_s=0)
    with pytest.raises(ValidationError, match="image_url_max_bytes"):
        Settings(image_url_max_bytes=0)


def test_what_is_a_url() -> None:
    for text in ("http://a/x.png", "HTTPS://a", "ftp://a", "file:///etc/passwd", "gopher://x"):
        assert is_url(text)
    for text in ("iVBORw0KGgoAAAANSUhEUg==", "data:image/png;base64,iVBOR", "", "http:/a", "://a"):
        assert not is_url(text)
