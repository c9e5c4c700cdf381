"""Real servers for the image URL tests: ``ImageServer``, a small HTTP/1.1 server
whose paths behave as the cases need (an image, a redirect, an endless body, a slow one, a page), and
``Listener``, sockets that listen and never accept, so that a connection anyone made to them is still
in their accept queue when the test looks (no thread, no wait: the kernel completes the handshake
before the connecting side's ``connect`` returns)."""

from __future__ import annotations

import socket
import ssl
import threading
from collections import defaultdict
from urllib.parse import parse_qs, urlsplit

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
ENDLESS = 128 * 1024 * 1024  # what /big offers: more than loopback's socket buffers hold at once
CHUNK = 64 * 1024


class Listener:
    """Sockets bound on one port at each of ``addresses``, listening, never accepting."""

    def __init__(self, *addresses: str) -> None:
        for _ in range(100):
            socks: list[socket.socket] = []
            try:
                port = 0
                for address in addresses:
                    family = socket.AF_INET6 if ":" in address else socket.AF_INET
                    sock = socket.socket(family, socket.SOCK_STREAM)
                    socks.append(sock)
                    if family == socket.AF_INET6:
                        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                    sock.bind((address, port))
                    sock.listen(16)
                    port = sock.getsockname()[1]
            except OSError:
                for sock in socks:
                    sock.close()
                continue
            self.port = port
            self.socks = socks
            return
        raise RuntimeError(f"no common free port on {addresses}")

    def connections(self) -> int:
        """Connections made to any of the sockets so far (taken off their queues)."""
        count = 0
        for sock in self.socks:
            sock.setblocking(False)
            while True:
                try:
                    conn, _ = sock.accept()
                except BlockingIOError:
                    break
                conn.close()
                count += 1
        return count

    def close(self) -> None:
        for sock in self.socks:
            sock.close()


class ImageServer:
    """An HTTP/1.1 server on ``host`` (an ephemeral port), one thread per connection. Paths:

    - ``/sample.png``: ``image`` as image/png; ``/fake.png``: image/png that is text; ``/hold``: the
      image once ``release`` is set;
    - ``/redirect?to=URL``: 302 to URL;
    - ``/big``: image/png, chunked, ``ENDLESS`` bytes (``unsent['/big']``: what was left when the peer
      hung up); ``/big-declared``: a Content-Length of ``ENDLESS``, then nothing;
    - ``/slow``: image/png, 8 bytes of 1000, then nothing; ``/page``: text/html, then nothing.

    ``requests`` lists (path, headers) as received (``received[path]`` is set then); ``hung_up[path]``
    is set once the peer closed a connection that was waiting on ``path``. ``tls``: serve https with
    that context (its SNI callback records ``sni``)."""

    def __init__(self, image: bytes, host: str = "127.0.0.1", tls: ssl.SSLContext | None = None) -> None:
        self.image = image
        self.tls = tls
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.sni: list[str | None] = []
        self.unsent: dict[str, int] = {}
        self.hung_up: defaultdict[str, threading.Event] = defaultdict(threading.Event)
        self.received: defaultdict[str, threading.Event] = defaultdict(threading.Event)
        self.release = threading.Event()  # lets /hold answer
        self.connections = 0
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        if tls is not None:
            tls.sni_callback = lambda _sock, name, _ctx: self.sni.append(name)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.create_server((host, 0), family=family)
        self.port = self.sock.getsockname()[1]
        self.host = host
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def url(self, path: str, host: str | None = None, scheme: str = "http") -> str:
        name = host or (f"[{self.host}]" if ":" in self.host else self.host)
        return f"{scheme}://{name}:{self.port}{path}"

    def paths(self) -> list[str]:
        with self._lock:
            return [path for path, _ in self.requests]

    def close(self) -> None:
        self.sock.close()
        with self._lock:
            for conn in self._conns:
                conn.close()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
                self._conns.append(conn)
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, raw: socket.socket) -> None:
        conn = raw
        try:
            conn.settimeout(60)
            if self.tls is not None:
                conn = self.tls.wrap_socket(raw, server_side=True)
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 65536:
                data = conn.recv(4096)
                if not data:
                    return
                head += data
            lines = head.split(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
            target = lines[0].split(" ")[1]
            headers = {
                k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])
            }
            path = urlsplit(target).path
            with self._lock:
                self.requests.append((path, headers))
            self.received[path].set()
            self._answer(conn, path, parse_qs(urlsplit(target).query))
        except (OSError, ssl.SSLError):
            pass
        finally:
            conn.close()

    def _answer(self, conn: socket.socket, path: str, query: dict[str, list[str]]) -> None:
        def head(status: str, content_type: str, extra: str = "") -> bytes:
            lines = f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\n{extra}connection: close\r\n\r\n"
            return lines.encode()

        if path == "/hold":
            self.release.wait(60)
            path = "/sample.png"
        if path == "/sample.png":
            conn.sendall(head("200 OK", "image/png", f"content-length: {len(self.image)}\r\n") + self.image)
        elif path == "/fake.png":
            body = b"this is text, not an image"
            conn.sendall(head("200 OK", "image/png", f"content-length: {len(body)}\r\n") + body)
        elif path == "/redirect":
            conn.sendall(
                head("302 Found", "text/plain", f"location: {query['to'][0]}\r\ncontent-length: 0\r\n")
            )
        elif path == "/big":
            conn.sendall(head("200 OK", "image/png", "transfer-encoding: chunked\r\n"))
            sent = 0
            zeros = b"%x\r\n" % CHUNK + PNG_SIGNATURE + bytes(CHUNK - len(PNG_SIGNATURE)) + b"\r\n"
            try:
                while sent < ENDLESS:
                    conn.sendall(zeros)
                    sent += CHUNK
                conn.sendall(b"0\r\n\r\n")
            except OSError:
                pass
            self.unsent[path] = ENDLESS - sent
            self.hung_up[path].set()
        elif path in ("/big-declared", "/slow", "/page"):
            length = ENDLESS if path == "/big-declared" else 1000
            kind = "text/html" if path == "/page" else "image/png"
            body = b"" if path == "/page" else PNG_SIGNATURE
            conn.sendall(head("200 OK", kind, f"content-length: {length}\r\n") + body)
            self._wait_for_hang_up(conn, path)
        else:
            conn.sendall(head("404 Not Found", "text/plain", "content-length: 0\r\n"))

    def _wait_for_hang_up(self, conn: socket.socket, path: str) -> None:
        try:
            while conn.recv(4096):
                pass
        except TimeoutError:
            return  # still connected after the socket's 60 s: not a hang-up
        except OSError:
            pass
        self.hung_up[path].set()
