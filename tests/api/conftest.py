"""Fixtures of the API tier: the tiny repository's manifest and an in-process client of the gateway."""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.gateway.app import create_app
from service.manifest import Manifest, load_manifest
from service.settings import Settings

MAX_IMAGES = 3

# quantizing a repository needs the export extra (onnx, the Triton client), which the serve-only venvs of
# make test's Python 3.12 and 3.13 runs do not have
collect_ignore = (
    []
    if importlib.util.find_spec("onnx") and importlib.util.find_spec("tritonclient")
    else ["test_precision_api.py"]
)


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
