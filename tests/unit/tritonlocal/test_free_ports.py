"""The local Triton's ports: the three it draws for one launch (HTTP, gRPC, metrics) are distinct — drawn
one at a time, a port closed at once could come back for the next, and the server refuses to listen for
HTTP and metrics on one port."""

from __future__ import annotations

import socket

from service.tritonlocal.server import free_ports


def test_the_ports_of_one_launch_are_distinct_and_free() -> None:
    for _ in range(50):
        ports = free_ports(3)
        assert len(set(ports)) == 3
    for port in ports:  # free again once drawn: the server can bind each
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))
