"""``ImageURLFetcher`` on its own, against real servers: over https it connects
to the address it checked while sending the URL's name as Host and SNI (and checking the certificate
against that name); a host name is resolved once per hop (a second answer cannot swap the address);
a name is refused if ANY of its addresses is refused. The resolver is the fetcher's constructor
argument ``resolver``: the names ``*.test`` resolve as each test says."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from service.api.image_url import ImageURLError, ImageURLFetcher, ImageURLPolicy
from service.images.url_policy import parse_hosts
from tests.api.image_servers import ImageServer
from tests.api.test_captions_api import png

IMAGE = png(7)


class Names:
    """A resolver over a fixed table that counts its calls."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.calls.append(host)
        if host not in self.table:
            raise OSError(f"{host}: name not known")
        return self.table[host]


def fetch(fetcher: ImageURLFetcher, url: str) -> bytes:
    return asyncio.run(fetcher.fetch(url, "images.0"))


def refusal(fetcher: ImageURLFetcher, url: str) -> ImageURLError:
    with pytest.raises(ImageURLError) as caught:
        fetch(fetcher, url)
    return caught.value


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for images.test (openssl), its key."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make a test certificate")
    out = tmp_path_factory.mktemp("tls")
    cert, key = out / "cert.pem", out / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=images.test",
         "-addext", "subjectAltName=DNS:images.test"],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.fixture
def tls_server(certificate: tuple[Path, Path]) -> Iterator[ImageServer]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*map(str, certificate))
    server = ImageServer(IMAGE, tls=context)
    yield server
    server.close()


def trusting(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(certificate[0]))


def test_https_goes_to_the_checked_address_with_the_names_host_and_sni(
    tls_server: ImageServer, certificate: tuple[Path, Path]
) -> None:
    names = Names({"images.test": ["127.0.0.1"]})
    policy = ImageURLPolicy(hosts=parse_hosts("images.test"), allow_private=True)
    fetcher = ImageURLFetcher(policy, resolver=names, verify=trusting(certificate))
    url = tls_server.url("/sample.png", host="images.test", scheme="https")
    assert fetch(fetcher, url) == IMAGE
    assert tls_server.sni == ["images.test"]
    path, headers = tls_server.requests[-1]
    assert path == "/sample.png" and headers["host"] == f"images.test:{tls_server.port}"
    assert names.calls == ["images.test"]  # resolved once: the connection used that answer


def test_https_checks_the_certificate_against_the_urls_name(
    tls_server: ImageServer, certificate: tuple[Path, Path]
) -> None:
    names = Names({"other.test": ["127.0.0.1"]})
    policy = ImageURLPolicy(hosts=parse_hosts("other.test"), allow_private=True)
    fetcher = ImageURLFetcher(policy, resolver=names, verify=trusting(certificate))
    error = refusal(fetcher, tls_server.url("/sample.png", host="other.test", scheme="https"))
    assert error.code == "image_url_unreachable" and error.status == 422
    assert tls_server.requests == []  # the handshake failed: no request was sent


def test_a_redirect_is_resolved_and_checked_again(
    tls_server: ImageServer, certificate: tuple[Path, Path]
) -> None:
    """Each hop is resolved once by itself and checked again: a redirect to a name that resolves to
    a refused address (0.0.0.0: refused even with the opt-in) is refused after the first hop."""
    names = Names({"images.test": ["127.0.0.1"], "next.test": ["0.0.0.0"]})
    policy = ImageURLPolicy(hosts=parse_hosts("images.test,next.test"), allow_private=True)
    fetcher = ImageURLFetcher(policy, resolver=names, verify=trusting(certificate))
    to = "http://next.test:1/x.png"
    error = refusal(fetcher, tls_server.url("/redirect?to=" + to, host="images.test", scheme="https"))
    assert error.code == "image_url_address" and "0.0.0.0, an unspecified address" in error.message
    assert f"redirected to {to}" in error.message
    assert tls_server.paths() == ["/redirect"]
    assert names.calls == ["images.test", "next.test"]


def test_a_name_is_refused_if_any_of_its_addresses_is() -> None:
    """PRE-CONNECT refusals, decided on the resolver's answer: a public first address does not hide a
    private second one. Were only the first checked, the fetch would try 93.184.215.14 (unreachable
    here) and fail with another code."""
    names = Names({"mixed.test": ["93.184.215.14", "10.0.0.7"], "ten.test": ["10.0.0.7"]})
    fetcher = ImageURLFetcher(ImageURLPolicy(hosts=parse_hosts("mixed.test,ten.test")), resolver=names)
    error = refusal(fetcher, "http://mixed.test/x.png")
    assert error.code == "image_url_address"
    assert "mixed.test resolves to 10.0.0.7, a private address" in error.message
    assert "COMPCAP_IMAGE_URL_ALLOW_PRIVATE" in error.message
    assert "ten.test resolves to 10.0.0.7" in refusal(fetcher, "https://ten.test/x.png").message
    unknown = refusal(
        ImageURLFetcher(ImageURLPolicy(hosts=parse_hosts("*.test")), resolver=names), "http://no.test/"
    )
    assert unknown.code == "image_url_dns"


def test_the_policy_and_fetcher_reject_bad_arguments_by_name() -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        ImageURLPolicy(max_bytes=0)
    with pytest.raises(ValueError, match="timeout_s"):
        ImageURLPolicy(timeout_s=0)
    with pytest.raises(ValueError, match="max_redirects"):
        ImageURLPolicy(max_redirects=-1)
    with pytest.raises(TypeError, match="policy"):
        ImageURLFetcher("127.0.0.1")  # type: ignore[arg-type]


def test_urls_the_policy_refuses_before_anything_is_resolved() -> None:
    names = Names({})
    fetcher = ImageURLFetcher(ImageURLPolicy(hosts=parse_hosts("images.example.org:443")), resolver=names)
    cases = {
        "http://images.example.org/x.png": "image_url_host",  # port 80, only 443 allowed
        "https://user:pw@images.example.org/x.png": "image_url_invalid",
        "https://images.example.org:99999/x.png": "image_url_invalid",
        "gopher://images.example.org/x": "image_url_scheme",
        "https://evil.example.org/x.png": "image_url_host",
        "https://images.example.org.evil.test/x.png": "image_url_host",
        "https://2130706433/x.png": "image_url_host",
        "https://" + "a" * 3000: "image_url_invalid",
    }
    for url, code in cases.items():
        assert refusal(fetcher, url).code == code, url
    assert names.calls == []
    off = ImageURLFetcher(ImageURLPolicy())
    assert refusal(off, "https://images.example.org/x.png").code == "image_url_off"
