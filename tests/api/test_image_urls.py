"""Image URLs in caption requests, against real servers on ephemeral ports.

An allowed URL's caption is the multipart caption of the same image (on ``POST /v1/captions`` and the
Hugging Face task's ``inputs``). Twelve refused URLs each answer a 4xx naming why, open no connection
to the refused address, and leave the gateway serving (a normal caption works after each).

How "no connection" is checked: a ``Listener`` listens on the refused address and port and never
accepts, so any connection the gateway made is still queued when the answer is back. Two gateways:

- ``strict`` (``COMPCAP_IMAGE_URL_ALLOW_PRIVATE`` off) lists every refused address among its hosts,
  so only the address check can stop the fetch: loopback, IPv6 loopback, IPv4-mapped IPv6 and a name
  resolving to loopback each have a listener on the address that a fetch without the check would
  reach. 10.0.0.7 and 169.254.169.254 are PRE-CONNECT refusals whose addresses no test can listen on:
  their check is that the refusal names the address class (and a listener on the same port of
  127.0.0.1 stays empty, which proves only that nothing strayed there).
- ``local`` (opt-in on, host 127.0.0.1 only, 64 KiB, 3 s) serves the images: a redirect to a host
  not allowed, a host not allowed and a bad scheme each have a listener where the refused URL points
  (127.0.0.2, or the ftp port of 127.0.0.1). An oversized body, a slow server and a non-image are
  refused from an allowed server, so a connection to it is expected: what is checked there is that
  the gateway made exactly one and hung up early (before the endless body was sent, at the time
  limit, or before a page's body was read)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.gateway.app import create_app
from service.settings import Settings
from tests.api.conftest import wait_ready
from tests.api.image_servers import ImageServer, Listener
from tests.api.test_captions_api import png

IMAGE = png(3)
STRICT_HOSTS = "127.0.0.1,localhost,::1,::ffff:127.0.0.1,10.0.0.7,169.254.169.254"
HANG_UP_WAIT_S = 60.0  # an upper bound for an event, never a measured time


@contextmanager
def gateway(tiny_repo: Path, **settings: object) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(repo=tiny_repo, intra_op_threads=1, **settings))) as c:  # type: ignore[arg-type]
        wait_ready(c)
        yield c


@pytest.fixture(scope="module")
def local(tiny_repo: Path) -> Iterator[TestClient]:
    with gateway(
        tiny_repo,
        image_url_hosts="127.0.0.1",
        image_url_allow_private=True,
        image_url_max_bytes=64 * 1024,
        image_url_timeout_s=3.0,
    ) as c:
        yield c


@pytest.fixture(scope="module")
def strict(tiny_repo: Path) -> Iterator[TestClient]:
    with gateway(tiny_repo, image_url_hosts=STRICT_HOSTS) as c:
        yield c


@pytest.fixture(scope="module")
def server() -> Iterator[ImageServer]:
    s = ImageServer(IMAGE)
    yield s
    s.close()


@pytest.fixture
def listener(request: pytest.FixtureRequest) -> Iterator[Listener]:
    one = Listener(*request.param)
    yield one
    one.close()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def refused(client: TestClient, url: str, code: str, status: int = 422) -> str:
    """POST the URL; assert the 4xx and its code; the message. Then a normal caption still works."""
    r = client.post("/v1/captions", json={"images": [url], "beam_size": 2})
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == code, error
    assert error["details"][0]["field"] == "images.0"
    after = client.post("/v1/captions", json={"images": [b64(png(5))], "beam_size": 2})
    assert after.status_code == 200, after.text
    return str(error["message"])


# -- allowed ---------------------------------------------------------------------------------------


def test_an_allowed_url_is_the_multipart_caption(local: TestClient, server: ImageServer) -> None:
    query = {"beam_size": "3", "n_best": "2"}
    form = local.post("/v1/captions", params=query, files={"image": ("x.png", IMAGE, "image/png")})
    assert form.status_code == 200, form.text
    url = server.url("/sample.png")
    r = local.post("/v1/captions", json={"images": [url], "beam_size": 3, "n_best": 2})
    assert r.status_code == 200, r.text
    assert r.json()["results"] == form.json()["results"]
    path, headers = server.requests[-1]
    assert path == "/sample.png" and headers["host"] == f"127.0.0.1:{server.port}"
    # mixed with a base64 image, and through one allowed redirect on the same host (a batch of two:
    # compared with the same two images as multipart)
    two = [("image", ("x.png", IMAGE, "image/png"))] * 2
    forms = local.post("/v1/captions", params=query, files=two)
    redirect = server.url("/redirect?to=" + url)
    both = local.post("/v1/captions", json={"images": [b64(IMAGE), redirect], "beam_size": 3, "n_best": 2})
    assert both.status_code == 200, both.text
    assert both.json()["results"] == forms.json()["results"]
    assert server.paths()[-2:] == ["/redirect", "/sample.png"]


def test_the_hugging_face_task_takes_a_url_in_inputs(local: TestClient, server: ImageServer) -> None:
    raw = local.post("/", content=IMAGE, headers={"content-type": "image/png"})
    assert raw.status_code == 200, raw.text
    r = local.post("/", json={"inputs": server.url("/sample.png")})
    assert r.status_code == 200, r.text
    assert r.json() == raw.json()
    off = local.post("/", json={"inputs": server.url("/sample.png", host="127.0.0.2")})
    assert off.status_code == 422 and off.json()["error"]["code"] == "image_url_host"


def test_urls_are_off_by_default_and_the_answer_says_how_to_enable_them(client: TestClient) -> None:
    one = Listener("127.0.0.1")
    try:
        message = refused(client, f"http://127.0.0.1:{one.port}/x.png", "image_url_off")
        assert one.connections() == 0
    finally:
        one.close()
    assert "COMPCAP_IMAGE_URL_HOSTS" in message
    hf = client.post("/", json={"inputs": "https://images.example.org/cat.png"})
    assert hf.status_code == 422 and hf.json()["error"]["code"] == "image_url_off"


def test_a_fetch_in_flight_holds_no_other_request(tiny_repo: Path) -> None:
    """While one request waits on an image server that has not answered, another is captioned; the
    held one completes once the server answers (a long time limit: no race with it)."""
    import threading

    server = ImageServer(IMAGE)
    try:
        with gateway(
            tiny_repo,
            image_url_hosts="127.0.0.1",
            image_url_allow_private=True,
            image_url_timeout_s=120.0,
            request_deadline_s=120.0,
        ) as client:
            held: list[int] = []
            thread = threading.Thread(
                target=lambda: held.append(
                    client.post("/v1/captions", json={"images": [server.url("/hold")]}).status_code
                )
            )
            thread.start()
            assert server.received["/hold"].wait(HANG_UP_WAIT_S)
            other = client.post("/v1/captions", json={"images": [b64(png(6))], "beam_size": 2})
            assert other.status_code == 200, other.text
            assert thread.is_alive() and held == []  # the held request is still waiting on its image
            server.release.set()
            thread.join(HANG_UP_WAIT_S)
            assert held == [200]
    finally:
        server.release.set()
        server.close()


# -- refused by address (strict gateway: every host listed, the address check alone refuses) -------

STRICT_CASES = [
    # (case, the URL's host, listener addresses, what the message names)
    ("loopback", "127.0.0.1", ("127.0.0.1",), "127.0.0.1 is a loopback address"),
    ("ipv6-loopback", "[::1]", ("::1",), "::1 is a loopback address"),
    ("ipv4-mapped", "[::ffff:127.0.0.1]", ("127.0.0.1",), "a loopback address"),
    ("name-to-loopback", "localhost", ("127.0.0.1", "::1"), "localhost resolves to"),
    # PRE-CONNECT refusals: nothing here can listen on these addresses
    ("private-10", "10.0.0.7", ("127.0.0.1",), "10.0.0.7 is a private address"),
    ("metadata", "169.254.169.254", ("127.0.0.1",), "169.254.169.254 is a link-local address"),
]


@pytest.mark.parametrize(
    ("host", "listener", "named"),
    [case[1:] for case in STRICT_CASES],
    ids=[case[0] for case in STRICT_CASES],
    indirect=["listener"],
)
def test_a_refused_address_opens_no_connection(
    strict: TestClient, listener: Listener, host: str, named: str
) -> None:
    message = refused(strict, f"http://{host}:{listener.port}/latest/meta-data/x.png", "image_url_address")
    assert named in message, message
    assert listener.connections() == 0


def test_a_private_address_of_this_machine_is_refused(tiny_repo: Path) -> None:
    """Where this machine has a private (fc00::/7) address of its own, a listener there makes the
    private class's refusal observable too (skipped elsewhere)."""
    address = own_private_ipv6()
    if address is None:
        pytest.skip("this machine has no fc00::/7 address")
    one = Listener(address)
    try:
        with gateway(tiny_repo, image_url_hosts=address) as client:
            message = refused(client, f"http://[{address}]:{one.port}/x.png", "image_url_address")
            assert "a private address" in message
        assert one.connections() == 0
    finally:
        one.close()


def own_private_ipv6() -> str | None:
    import ipaddress

    try:
        lines = Path("/proc/net/if_inet6").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        hexa = line.split()[0]
        address = ipaddress.IPv6Address(bytes.fromhex(hexa))
        if address in ipaddress.ip_network("fc00::/7"):
            return str(address)
    return None


# -- refused by host, scheme or redirect (local gateway: addresses allowed, the host list refuses) -----


@pytest.mark.parametrize("listener", [("127.0.0.2",)], indirect=True)
def test_a_redirect_to_a_host_not_allowed_is_not_followed(
    local: TestClient, server: ImageServer, listener: Listener
) -> None:
    target = f"http://127.0.0.2:{listener.port}/x.png"
    before = server.paths().count("/redirect")
    message = refused(local, server.url("/redirect?to=" + target), "image_url_host")
    assert f"redirected to {target}" in message and "127.0.0.2" in message
    assert server.paths().count("/redirect") == before + 1
    assert listener.connections() == 0


@pytest.mark.parametrize("listener", [("127.0.0.2",)], indirect=True)
def test_a_host_not_allowed_opens_no_connection(local: TestClient, listener: Listener) -> None:
    message = refused(local, f"http://127.0.0.2:{listener.port}/x.png", "image_url_host")
    assert "COMPCAP_IMAGE_URL_HOSTS" in message
    assert listener.connections() == 0


@pytest.mark.parametrize("listener", [("127.0.0.1",)], indirect=True)
def test_a_bad_scheme_opens_no_connection(local: TestClient, listener: Listener) -> None:
    message = refused(local, f"ftp://127.0.0.1:{listener.port}/x.png", "image_url_scheme")
    assert "ftp://" in message
    assert "file://" in refused(local, "file:///etc/passwd", "image_url_scheme")
    assert listener.connections() == 0


# -- refused by what an allowed server answers (one connection expected; the gateway hangs up early) --


def one_more_connection(server: ImageServer, before: int) -> None:
    assert server.connections == before + 1


def test_an_oversized_body_is_cut_at_the_limit(local: TestClient, server: ImageServer) -> None:
    before = server.connections
    message = refused(local, server.url("/big"), "image_url_too_large", status=413)
    assert "65536 bytes" in message
    assert server.hung_up["/big"].wait(HANG_UP_WAIT_S)
    assert server.unsent["/big"] > 0  # the gateway hung up before the endless body was sent
    one_more_connection(server, before)
    before = server.connections
    refused(local, server.url("/big-declared"), "image_url_too_large", status=413)
    assert server.hung_up["/big-declared"].wait(HANG_UP_WAIT_S)
    one_more_connection(server, before)


def test_a_slow_server_is_cut_at_the_time_limit(local: TestClient, server: ImageServer) -> None:
    before = server.connections
    message = refused(local, server.url("/slow"), "image_url_timeout")
    assert "3 s" in message and "COMPCAP_IMAGE_URL_TIMEOUT_S" in message
    assert server.hung_up["/slow"].wait(HANG_UP_WAIT_S)
    one_more_connection(server, before)


def test_a_non_image_is_refused(local: TestClient, server: ImageServer) -> None:
    before = server.connections
    message = refused(local, server.url("/page"), "image_url_not_an_image")
    assert "text/html" in message
    assert server.hung_up["/page"].wait(HANG_UP_WAIT_S)  # its body was never read
    one_more_connection(server, before)
    before = server.connections
    assert "not an image" in refused(local, server.url("/fake.png"), "image_url_not_an_image")
    one_more_connection(server, before)


def test_refusals_are_counted_by_reason(local: TestClient) -> None:
    local.post("/v1/captions", json={"images": ["gopher://127.0.0.1/x"]})
    metrics = local.get("/metrics").text
    assert 'compcap_errors_total{reason="image_url_scheme"}' in metrics


def test_a_listener_sees_a_connection() -> None:
    """The check above is meaningful: a connection to a listener's address is counted."""
    import socket

    one = Listener("127.0.0.1", "::1")
    try:
        socket.create_connection(("127.0.0.1", one.port)).close()
        socket.create_connection(("::ffff:127.0.0.1", one.port)).close()
        socket.create_connection(("::1", one.port)).close()
        assert one.connections() == 3
    finally:
        one.close()


def test_routes_that_take_no_urls_say_which_do(local: TestClient, server: ImageServer) -> None:
    configurations = [{"name": "a", "model": "butd"}, {"name": "b", "model": "butr"}]
    r = local.post(
        "/v1/compare", json={"images": [server.url("/sample.png")], "configurations": configurations}
    )
    assert r.status_code == 422 and r.json()["error"]["code"] == "image_url_unsupported"
    assert "POST /v1/captions" in r.json()["error"]["message"]
