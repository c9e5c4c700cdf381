"""Fixtures of the API tier: the tiny repository's manifest and an in-process client of the gateway."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.gateway.app import create_app
from service.manifest import Manifest, load_manifest
from service.settings import Settings

MAX_IMAGES = 3


def wait_ready(client: TestClient, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.get("/readyz").status_code == 200:
            return
        time.sleep(0.05)
    raise AssertionError(f"not ready after {timeout} s: {client.get('/readyz').json()}")


@pytest.fixture(scope="module")
def manifest(tiny_repo: Path) -> Manifest:
    return load_manifest(tiny_repo)


@pytest.fixture(scope="module")
def client(tiny_repo: Path) -> Iterator[TestClient]:
    app = create_app(Settings(repo=tiny_repo, max_images_per_request=MAX_IMAGES, intra_op_threads=1))
    with TestClient(app) as c:
        wait_ready(c)
        yield c
