"""The pure checks behind image URLs (``COMPCAP_IMAGE_URL_HOSTS``): which strings are URLs, which hosts
an operator allowed, and which IP addresses a fetch may never reach. No I/O; the fetcher that uses
them is ``service.api.image_url``. Imports nothing of the service (the settings validate with it).

- ``is_url``: a JSON image that is a URL (``scheme://...``), not base64 (base64 has no ``:``).
- ``parse_hosts``: the allow-list — host names, ``*.domain`` (its subdomains), IP addresses, each
  optionally with ``:port`` (``[v6]:port``); ``host_allowed`` matches a URL's host and port against it.
- ``address_class``: what kind of non-public address an IP is (loopback, private, link-local,
  unspecified, multicast, reserved), looking inside IPv6 forms that carry an IPv4 address
  (``::ffff:127.0.0.1``, ``::127.0.0.1``, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``), or None for a
  public one; ``address_refusal`` applies the loopback/private/link-local opt-in to it."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}
# what the opt-in (COMPCAP_IMAGE_URL_ALLOW_PRIVATE) lets through; the rest is refused always
OPT_IN_CLASSES = frozenset({"loopback", "private", "link-local"})
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]{0,31}://")
_LABEL = re.compile(r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_COMPATIBLE = ipaddress.ip_network("::/96")  # the deprecated IPv4-compatible form ::a.b.c.d


def is_url(text: str) -> bool:
    """Whether a JSON image is a URL (``http://``, ``https://``, ``ftp://``, ``file://``, ...): those
    go to the URL fetcher, which refuses any scheme but http and https by name."""
    return _URL.match(text) is not None


def ip_literal(host: str) -> IPAddress | None:
    """``host`` as an IP address (IPv6 with or without brackets), or None for a name."""
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def normalize_host(host: str) -> str:
    """The comparable form of a host: an IP address in its compressed form (``::ffff:7f00:1``), a name
    in lower case ASCII (IDNA) without a trailing dot. ``ValueError`` for a string that is neither."""
    ip = ip_literal(host)
    if ip is not None:
        return ip.compressed
    name = host.strip().lower().removesuffix(".")
    try:
        name = name.encode("idna").decode("ascii")
    except UnicodeError:
        raise ValueError(f"{host!r} is not a host name") from None
    if not name or len(name) > 253 or not all(_LABEL.fullmatch(label) for label in name.split(".")):
        raise ValueError(f"{host!r} is not a host name")
    return name


@dataclass(frozen=True)
class HostRule:
    """One allowed host: ``host`` (normalized), ``wildcard`` (``*.host``: its subdomains, not itself),
    ``port`` (None: any)."""

    host: str
    wildcard: bool = False
    port: int | None = None

    def matches(self, host: str, port: int) -> bool:
        if self.port is not None and port != self.port:
            return False
        return host.endswith("." + self.host) if self.wildcard else host == self.host

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return ("*." if self.wildcard else "") + host + (f":{self.port}" if self.port is not None else "")


def parse_host_rule(entry: str) -> HostRule:
    """One allow-list entry: ``name``, ``*.domain``, ``1.2.3.4``, ``::1`` / ``[::1]``, each with an
    optional ``:port`` (``[::1]:8000``). ``ValueError`` naming the entry otherwise."""
    text = entry.strip()
    forms = "a host name, *.domain or an IP address, optionally with :port ([::1]:8000 for IPv6)"
    if not text or "/" in text or "@" in text or text in ("*", "*.*"):
        raise ValueError(f"{text!r} is not {forms}")
    port: int | None = None
    host = text
    if ip_literal(text) is None:  # a bare IPv6 address has colons but no port
        if text.startswith("["):
            host, sep, rest = text[1:].partition("]")
            if not sep or (rest and not rest.startswith(":")):
                raise ValueError(f"{text!r} is not {forms}")
            port_text = rest[1:] if rest else None
        else:
            host, sep, port_text = text.rpartition(":")
            if not sep:
                host, port_text = text, None
        if port_text is not None:
            if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
                raise ValueError(f"{text!r}: the port must be 1..65535")
            port = int(port_text)
    wildcard = host.startswith("*.")
    host = host[2:] if wildcard else host
    if wildcard and ip_literal(host) is not None:
        raise ValueError(f"{text!r}: a wildcard takes a domain, not an IP address")
    try:
        return HostRule(normalize_host(host), wildcard, port)
    except ValueError:
        raise ValueError(f"{text!r} is not {forms}") from None


def parse_hosts(text: str) -> tuple[HostRule, ...]:
    """The comma-separated allow-list (``''``: none, URL fetching off)."""
    return tuple(parse_host_rule(entry) for entry in text.split(",") if entry.strip())


def host_allowed(host: str, port: int, rules: Iterable[HostRule]) -> bool:
    """Whether ``host`` (normalized) on ``port`` is in the allow-list."""
    return any(rule.matches(host, port) for rule in rules)


def embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, compatible, NAT64 or 6to4), if any: what a
    connection to it may reach."""
    if isinstance(ip, ipaddress.IPv4Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64 or (ip in _COMPATIBLE and int(ip) > 1):  # :: and ::1 are themselves
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def address_class(ip: IPAddress) -> str | None:
    """The kind of address a fetch must not reach by default — ``unspecified``, ``loopback``,
    ``link-local`` (169.254.0.0/16 and its cloud metadata address, fe80::/10), ``multicast``,
    ``reserved``, ``private`` (10/8, 172.16/12, 192.168/16, fc00::/7, and every other range not
    globally reachable) — or None for a public address. An IPv6 form carrying an IPv4 address is
    classed by that address."""
    inner = embedded_ipv4(ip)
    if inner is not None:  # a connection to it reaches the IPv4 address
        return address_class(inner)
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if ip.is_reserved:
        return "reserved"
    if isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local:
        return "private"  # fec0::/10, deprecated site-local
    if ip.is_private or not ip.is_global:
        return "private"
    return None


def address_refusal(ip: IPAddress, allow_private: bool) -> str | None:
    """Why a fetch may not connect to ``ip`` (its ``address_class``), or None; ``allow_private``
    (the operator's opt-in) lets loopback, private and link-local addresses through, never the rest."""
    found = address_class(ip)
    if found is None or (allow_private and found in OPT_IN_CLASSES):
        return None
    return found
