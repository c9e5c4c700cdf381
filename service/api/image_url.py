"""Image URLs in a caption request (``{"images": ["https://..."]}``, the Hugging Face task's
``inputs``), fetched by the gateway only from hosts an operator allowed (``COMPCAP_IMAGE_URL_HOSTS``;
none by default: a URL is refused, saying how to turn fetching on).

``ImageURLFetcher`` holds the ``ImageURLPolicy`` and fetches one URL at a time as follows; each refusal
is an ``ImageURLError`` (4xx, ``image_url_<reason>``, naming the image's field and why), counted by
reason in ``compcap_errors`` like every refused request:

1. the URL parses, is ``http`` or ``https`` (``scheme``), carries no credentials and its host and port
   are in the allow-list (``host``); ``service.images.url_policy`` has these pure checks;
2. its host is resolved once (``dns``) and refused if ANY address is loopback, private, link-local,
   unspecified, multicast or reserved, IPv4 inside IPv6 included (``address``) — loopback, private
   and link-local pass only with ``COMPCAP_IMAGE_URL_ALLOW_PRIVATE``;
3. the request goes to the checked address itself (the IP is pinned: a second resolution cannot swap
   it), with the URL's ``Host`` header and, over https, its name as SNI and for the certificate check;
4. redirects are not followed by the client: up to ``max_redirects`` are followed here, each new URL
   checked from step 1 (``redirect`` past that);
5. the answer must be 2xx (``status``) with an ``image/*`` content type (``not_an_image``); the body is
   streamed and stopped past ``max_bytes`` (413 ``too_large``), and its first bytes must be an image
   format the decoder opens (``service.images.decode.check_upload``: the caption decodes it fully next);
6. all of it within ``timeout_s`` (``timeout``); a failed connection or read is ``unreachable``.

It is all ``async`` (httpx; the resolution runs in the loop's executor): a slow image server holds
only its own request. No proxy from the environment is used (``trust_env=False``)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx

from service.api.errors import ApiError
from service.checks import above, at_least, within
from service.images.decode import ImageError, check_upload
from service.images.url_policy import (
    DEFAULT_PORTS,
    OPT_IN_CLASSES,
    SCHEMES,
    HostRule,
    IPAddress,
    address_refusal,
    host_allowed,
    ip_literal,
    normalize_host,
    parse_hosts,
)

if TYPE_CHECKING:
    from service.api.settings import ServiceSettings

# (host, port) -> the host's addresses, as getaddrinfo gives them; tests may give their own
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
MAX_URL_CHARS = 2048
MAX_SHOWN = 120  # characters of a URL quoted in an error message
REDIRECTS = (301, 302, 303, 307, 308)
HOSTS_SETTING = "COMPCAP_IMAGE_URL_HOSTS"


async def system_resolver(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (A and AAAA), in the resolver's order, without repeats."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True)
class ImageURLPolicy:
    """What the gateway may fetch: ``hosts`` (the allow-list; empty: URL fetching is off), the most
    bytes of one image (``max_bytes``), the time one fetch may take, redirects included
    (``timeout_s``), whether loopback, private and link-local addresses are allowed
    (``allow_private``) and the most redirects followed (``max_redirects``)."""

    hosts: tuple[HostRule, ...] = ()
    max_bytes: int = 8 * 1024 * 1024
    timeout_s: float = 5.0
    allow_private: bool = False
    max_redirects: int = 3

    def __post_init__(self) -> None:
        at_least(1, max_bytes=self.max_bytes)
        above(0, timeout_s=self.timeout_s)
        within(0, 10, max_redirects=self.max_redirects)

    @classmethod
    def from_settings(cls, settings: ServiceSettings) -> ImageURLPolicy:
        return cls(
            hosts=parse_hosts(settings.image_url_hosts),
            max_bytes=min(settings.image_url_max_bytes, settings.max_upload_bytes),
            timeout_s=settings.image_url_timeout_s,
            allow_private=settings.image_url_allow_private,
        )

    @property
    def enabled(self) -> bool:
        return bool(self.hosts)


class ImageURLError(ApiError):
    """A refused image URL: ``image_url_<reason>`` with ``status`` (422, or 413 for a body over the
    limit), the request field at fault in ``field``."""

    def __init__(self, reason: str, message: str, field: str, status: int = 422) -> None:
        super().__init__(status, f"image_url_{reason}", message, field=field)
        self.reason = reason


@dataclass(frozen=True)
class _Target:
    """A URL that passed the policy: where to connect (``addresses``, all checked) and what to send."""

    url: httpx.URL
    host: str  # normalized
    port: int
    addresses: tuple[IPAddress, ...]

    @property
    def host_header(self) -> str:
        raw = self.url.raw_host.decode("ascii")
        name = f"[{raw}]" if ":" in raw else raw
        return name if self.port == DEFAULT_PORTS[self.url.scheme] else f"{name}:{self.port}"

    def pinned(self, address: IPAddress) -> httpx.URL:
        """The URL with the checked address in place of the host (the port, path and query kept)."""
        return self.url.copy_with(host=str(address), port=self.port, fragment=None)


def shown(url: str | httpx.URL) -> str:
    text = str(url)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 1] + "…"


class ImageURLFetcher:
    """Fetches image URLs under ``policy`` (see the module). ``resolver``: how host names are
    resolved (default: the system's ``getaddrinfo``, off the loop); ``verify``: the TLS context that
    checks https servers (default: httpx's, the certifi bundle)."""

    def __init__(
        self,
        policy: ImageURLPolicy,
        resolver: Resolver | None = None,
        verify: ssl.SSLContext | None = None,
    ) -> None:
        if not isinstance(policy, ImageURLPolicy):
            raise TypeError(f"policy must be an ImageURLPolicy, got {type(policy).__name__}")
        self.policy = policy
        self._resolve = resolver if resolver is not None else system_resolver
        self._verify = verify

    def _tls(self) -> ssl.SSLContext:
        if self._verify is None:
            self._verify = httpx.create_ssl_context()
        return self._verify

    async def fetch_all(self, items: Sequence[tuple[str, str]]) -> list[bytes]:
        """``fetch`` of every (url, field), at once; the first refusal stops the others."""
        if len(items) == 1:
            return [await self.fetch(*items[0])]
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(self.fetch(url, field)) for url, field in items]
        except BaseExceptionGroup as failed:
            raise failed.exceptions[0] from None
        return [task.result() for task in tasks]

    async def fetch(self, url: str, field: str) -> bytes:
        """The image at ``url`` (the request's ``field``, e.g. ``images.0``), or an ``ImageURLError``."""
        if not self.policy.enabled:
            raise ImageURLError(
                "off",
                f"{field} is an image URL, and this gateway fetches none: its operator turns image URLs on "
                f"by listing the hosts to fetch from in {HOSTS_SETTING} (e.g. images.example.org,"
                "*.cdn.example.org); send the image itself meanwhile (multipart, base64 or a raw body)",
                field,
            )
        try:
            async with asyncio.timeout(self.policy.timeout_s):
                return await self._fetch(url, field)
        except TimeoutError:
            raise ImageURLError(
                "timeout",
                f"{field}: fetching {shown(url)} took longer than {self.policy.timeout_s:g} s "
                "(COMPCAP_IMAGE_URL_TIMEOUT_S)",
                field,
            ) from None

    async def _fetch(self, text: str, field: str) -> bytes:
        url = self._parse(text, field, field)
        async with httpx.AsyncClient(
            follow_redirects=False,
            trust_env=False,  # no proxy, netrc or certificate file named by the environment
            verify=self._tls(),
            timeout=httpx.Timeout(self.policy.timeout_s),
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=0),
        ) as client:
            where = f"{field} ({shown(text)})"
            for _ in range(self.policy.max_redirects + 1):
                target = await self._check(url, field, where)
                response = await self._send(client, target, field, where)
                try:
                    if response.status_code not in REDIRECTS:
                        return await self._body(response, field, where)
                    location = response.headers.get("location")
                    if not location:
                        raise ImageURLError(
                            "status",
                            f"{where} answered HTTP {response.status_code} without a Location",
                            field,
                        )
                finally:
                    await response.aclose()
                try:
                    next_url = url.join(location)
                except (httpx.InvalidURL, ValueError):
                    raise ImageURLError(
                        "redirect", f"{where} redirects to an invalid URL {shown(location)!r}", field
                    ) from None
                where = f"{field} ({shown(text)}) redirected to {shown(next_url)}"
                url = self._parse(str(next_url), field, where)
        raise ImageURLError(
            "redirect",
            f"{field} ({shown(text)}) redirects more than {self.policy.max_redirects} times",
            field,
        )

    def _parse(self, text: str, field: str, where: str) -> httpx.URL:
        """The URL, if its form, scheme and host pass the policy (step 1)."""
        if len(text) > MAX_URL_CHARS:
            raise ImageURLError("invalid", f"{field} is a URL longer than {MAX_URL_CHARS} characters", field)
        try:
            url = httpx.URL(text)
            port = url.port
        except (httpx.InvalidURL, ValueError) as exc:
            raise ImageURLError("invalid", f"{where}: not a valid URL: {exc}", field) from None
        if url.scheme not in SCHEMES:
            raise ImageURLError(
                "scheme",
                f"{where}: the scheme {url.scheme}:// is not fetched; image URLs are http:// or https://",
                field,
            )
        if url.userinfo:
            raise ImageURLError("invalid", f"{where}: credentials in an image URL are refused", field)
        raw = url.raw_host.decode("ascii")
        port = port if port is not None else DEFAULT_PORTS[url.scheme]
        try:
            host = normalize_host(raw)
        except ValueError:
            raise ImageURLError("invalid", f"{where}: {shown(raw)!r} is not a host", field) from None
        if not 1 <= port <= 65535:
            raise ImageURLError("invalid", f"{where}: the port {port} is not 1..65535", field)
        if not host_allowed(host, port, self.policy.hosts):
            named = f"[{host}]" if ":" in host else host
            raise ImageURLError(
                "host",
                f"{where}: the host {named}:{port} is not one this gateway fetches images from "
                f"({HOSTS_SETTING})",
                field,
            )
        return url

    async def _check(self, url: httpx.URL, field: str, where: str) -> _Target:
        """The URL's addresses, resolved once, every one allowed (step 2)."""
        host = normalize_host(url.raw_host.decode("ascii"))
        port = url.port if url.port is not None else DEFAULT_PORTS[url.scheme]
        literal = ip_literal(host)
        if literal is not None:
            addresses: tuple[IPAddress, ...] = (literal,)
        else:
            try:
                resolved = await self._resolve(host, port)
                addresses = tuple(ipaddress.ip_address(a) for a in resolved)
            except (OSError, ValueError) as exc:
                raise ImageURLError("dns", f"{where}: {host} does not resolve ({exc})", field) from None
            if not addresses:
                raise ImageURLError("dns", f"{where}: {host} resolves to no address", field)
        for address in addresses:
            why = address_refusal(address, self.policy.allow_private)
            if why is not None:
                opt_in = (
                    " (COMPCAP_IMAGE_URL_ALLOW_PRIVATE allows loopback, private and link-local ones)"
                    if why in OPT_IN_CLASSES
                    else ""
                )
                what = f"{address} is" if literal is not None else f"{host} resolves to {address},"
                article = "an" if why[0] in "aeiou" else "a"
                raise ImageURLError(
                    "address",
                    f"{where}: {what} {article} {why} address; image URLs never reach {why} addresses"
                    + opt_in,
                    field,
                )
        return _Target(url, host, port, addresses)

    async def _send(
        self, client: httpx.AsyncClient, target: _Target, field: str, where: str
    ) -> httpx.Response:
        """The response head from the first checked address that answers (step 3)."""
        headers = {
            "Host": target.host_header,
            "Accept": "image/*",
            "Accept-Encoding": "identity",  # the bytes counted are the bytes decoded: no gzip bomb
            "User-Agent": "compcap-image-fetch",
        }
        extensions = (
            {"sni_hostname": target.url.raw_host.decode("ascii")} if target.url.scheme == "https" else {}
        )
        failure: Exception | None = None
        for address in target.addresses:
            request = client.build_request(
                "GET", target.pinned(address), headers=headers, extensions=extensions
            )
            try:
                return await client.send(request, stream=True)
            except httpx.TimeoutException:
                raise TimeoutError from None  # fetch() names the time limit
            except httpx.HTTPError as exc:
                failure = exc
        raise ImageURLError("unreachable", f"{where}: no connection ({failure})", field)

    async def _body(self, response: httpx.Response, field: str, where: str) -> bytes:
        """The image's bytes, if the answer is one (step 5)."""
        if not 200 <= response.status_code < 300:
            raise ImageURLError("status", f"{where} answered HTTP {response.status_code}", field)
        content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if not content_type.startswith("image/"):
            raise ImageURLError(
                "not_an_image",
                f"{where} answered content type {content_type or 'none'!r}, not an image (image/*)",
                field,
            )
        limit = self.policy.max_bytes
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise self._too_large(field, where, f"declares {declared} bytes")
        chunks: list[bytes] = []
        size = 0
        try:
            async for chunk in response.aiter_raw():
                size += len(chunk)
                if size > limit:
                    raise self._too_large(field, where, f"sent more than {limit} bytes")
                chunks.append(chunk)
        except httpx.TimeoutException:
            raise TimeoutError from None
        except httpx.HTTPError as exc:
            raise ImageURLError(
                "unreachable", f"{where}: the connection failed mid-body ({exc})", field
            ) from None
        data = b"".join(chunks)
        try:
            check_upload(data, max_bytes=limit, label=where)
        except ImageError as exc:
            raise ImageURLError("not_an_image", exc.message, field) from None
        return data

    def _too_large(self, field: str, where: str, what: str) -> ImageURLError:
        return ImageURLError(
            "too_large",
            f"{where} {what}; the limit is {self.policy.max_bytes} bytes (COMPCAP_IMAGE_URL_MAX_BYTES)",
            field,
            status=413,
        )


__all__ = ["ImageURLError", "ImageURLFetcher", "ImageURLPolicy", "Resolver", "system_resolver"]
