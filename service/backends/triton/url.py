"""``COMPCAP_TRITON_URL``: where the Triton servers are — one ``host:port``, a comma-separated list, or
``dns:///name:port`` (every address the name resolves to). Parsed when the settings are validated and
by the Triton backend (``triton_target``: one function for both); imports nothing of the service."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

URL_FORMS = "host:port, host:port,host:port or dns:///name:port"


@dataclass(frozen=True)
class Target:
    """Where the Triton servers are: fixed ``addresses`` (``single``, ``list``) or a DNS name."""

    kind: Literal["single", "list", "dns"]
    addresses: tuple[str, ...] = ()
    host: str = ""
    port: int = 0

    def __str__(self) -> str:
        return (
            f"dns:///{join_hostport(self.host, self.port)}"
            if self.kind == "dns"
            else ",".join(self.addresses)
        )


def split_hostport(text: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` → (host, port); ``ValueError`` saying what is wrong."""
    text = text.strip()
    if "://" in text:
        raise ValueError(f"{text!r}: no scheme, just host:port")
    if text.startswith("["):
        host, closed, rest = text[1:].partition("]")
        if not closed or not rest.startswith(":"):
            raise ValueError(f"{text!r} is not [IPv6]:port")
        port_text = rest[1:]
    else:
        host, colon, port_text = text.rpartition(":")
        if not colon:
            raise ValueError(f"{text!r} has no port (host:port)")
        if ":" in host:
            raise ValueError(f"{text!r}: write an IPv6 address in brackets, [addr]:port")
    if not host or any(c in host for c in "/ \t@?#"):
        raise ValueError(f"{text!r} is not host:port")
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"{text!r}: the port must be a number from 1 to 65535")
    return host, int(port_text)


def join_hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_target(url: str) -> Target:
    """``COMPCAP_TRITON_URL`` → ``Target``; ``ValueError`` naming the setting and its forms."""
    text = url.strip()
    try:
        if not text:
            raise ValueError("it is empty")
        if text.startswith("dns:"):
            rest = text[len("dns:") :]
            if rest.startswith("//"):
                authority, slash, rest = rest[2:].partition("/")
                if not slash or authority:
                    raise ValueError("a DNS server in the URL (dns://server/name:port) is not supported")
            host, port = split_hostport(rest)
            return Target("dns", host=host, port=port)
        parts = [part.strip() for part in text.split(",")]
        if any(not part for part in parts):
            raise ValueError("an empty address in the comma-separated list")
        addresses = tuple(join_hostport(*split_hostport(part)) for part in parts)
        if len(set(addresses)) != len(addresses):
            raise ValueError("an address repeats")
        return Target("single" if len(addresses) == 1 else "list", addresses=addresses)
    except ValueError as exc:
        raise ValueError(f"COMPCAP_TRITON_URL={url!r}: {exc}; expected {URL_FORMS}") from None


__all__ = ["URL_FORMS", "Target", "join_hostport", "parse_target", "split_hostport"]


def triton_target(url: str, shared_memory: bool = False) -> Target:
    """``url`` parsed (``parse_target``); with ``shared_memory`` it must be one ``host:port``: the
    tensors' regions are in this host's ``/dev/shm``, shared only with a server on this host (a
    ``ValueError`` naming ``triton_shared_memory`` and ``COMPCAP_TRITON_URL`` otherwise)."""
    target = parse_target(url)
    if shared_memory and target.kind != "single":
        raise ValueError(
            f"triton_shared_memory: needs one co-located Triton (COMPCAP_TRITON_URL=host:port), not "
            f"{url!r}: shared memory is only shared with a server on this host"
        )
    return target
