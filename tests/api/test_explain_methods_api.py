"""``GET /v1/explain/methods``: per captioner, which explanation methods can run here and why not — the
refusal ``POST /v1/explain`` gives for each (torch and captum missing, the repository's torch programs
missing); and what ``GET /v1/models`` tells the web page about each captioner (where it came from, the
images it reads, whether its captions carry ``in_domain``)."""

from __future__ import annotations

import base64
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.explain import service as explain_service
from service.explain.service import METHODS
from service.gateway.app import create_app
from service.manifest import Manifest
from service.settings import Settings
from tests.api.conftest import wait_ready
from tests.api.test_captions_api import png

GRADIENTS = [m for m in METHODS if m != "attention"]


@pytest.fixture(scope="module")
def without_programs(tiny_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The tiny repository as git carries it: no torch programs."""
    repo = tmp_path_factory.mktemp("bare") / "model_repo"
    shutil.copytree(tiny_repo, repo, ignore=shutil.ignore_patterns("torch"))
    with TestClient(create_app(Settings(repo=repo, intra_op_threads=1, state_url=""))) as client:
        wait_ready(client)
        yield client


def methods_of(client: TestClient, model: str) -> dict[str, dict[str, object]]:
    response = client.get("/v1/explain/methods", params={"model": model})
    assert response.status_code == 200, response.text
    [entry] = response.json()["captioners"]
    assert entry["model"] == model and [m["name"] for m in entry["methods"]] == list(METHODS)
    return {m["name"]: m for m in entry["methods"]}


def refusal(client: TestClient, model: str, method: str) -> tuple[int, str | None]:
    image = base64.b64encode(png(5)).decode()
    body = {"image": image, "model": model, "method": method, "n_steps": 1, "overlays": False}
    response = client.post("/v1/explain", json=body)
    return response.status_code, response.json().get("error", {}).get("code")


def test_every_captioner_lists_every_method(client: TestClient, manifest: Manifest) -> None:
    body = client.get("/v1/explain/methods").json()
    assert [c["model"] for c in body["captioners"]] == [c.name for c in manifest.captioners]
    if explain_service.torch_available():  # the tiny repository has its torch programs
        for entry in body["captioners"]:
            assert all(m["available"] and m["code"] is None for m in entry["methods"]), entry


def test_an_unknown_model_is_404_naming_the_field(client: TestClient) -> None:
    response = client.get("/v1/explain/methods", params={"model": "nope"})
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "unknown_model" and "butr" in error["message"]


def test_without_programs_the_gradient_methods_say_why(without_programs: TestClient) -> None:
    methods = methods_of(without_programs, "butr")
    assert methods["attention"]["available"] is True
    for name in GRADIENTS:
        entry = methods[name]
        assert entry["available"] is False
        if explain_service.torch_available():
            assert entry["code"] == "programs_missing"
            assert "torch programs" in str(entry["reason"])
        assert refusal(without_programs, "butr", name) == (501, entry["code"])


def test_without_torch_the_gradient_methods_name_the_extra(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(explain_service, "torch_available", lambda: False)
    methods = methods_of(client, "butd")
    assert methods["attention"]["available"] is True
    for name in GRADIENTS:
        assert methods[name]["code"] == "extra_not_installed"
        assert "compcap[explain]" in str(methods[name]["reason"])
        assert refusal(client, "butd", name) == (501, "extra_not_installed")


def test_models_say_what_each_captioner_reads_and_where_it_came_from(
    client: TestClient, manifest: Manifest
) -> None:
    body = client.get("/v1/models").json()
    for info, cap in zip(body["captioners"], manifest.captioners, strict=True):
        size = cap.image or manifest.image
        assert info["image"] == {"height": size.height, "width": size.width}
        assert info["source"] == cap.source == ""  # trained here
        assert info["domain_calibration"] == (cap.domain.source if cap.domain else None)
        assert info["training"]["dataset"].startswith("sceneworld")
