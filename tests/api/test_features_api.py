"""``COMPCAP_FEATURES``: the gateway serves captions with any feature left out — the feature's routes
answer 404 and its tag leaves the OpenAPI document — and with all of them in; unknown names and settings
of a feature left out are refused naming the setting."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from service.gateway.app import create_app
from service.gateway.features import FEATURES
from service.settings import FEATURES as SETTING_NAMES
from service.settings import Settings
from tests.api.conftest import wait_ready
from tests.api.test_captions_api import png, post_images

# one request per feature that it alone serves (a 404 when it is left out)
FEATURE_ROUTES = {
    "probes": ("GET", "/v1/probe-sets"),
    "explain": ("POST", "/v1/explain"),
    "compare": ("POST", "/v1/compare"),
}
TAGS = {"probes": "probes", "explain": "explanations", "compare": "comparison"}


def served(tiny_repo: Path, features: str) -> Iterator[TestClient]:
    app = create_app(Settings(repo=tiny_repo, intra_op_threads=1, state_url="", features=features))
    with TestClient(app) as client:
        wait_ready(client)
        yield client


@pytest.fixture(scope="module")
def captions_only(tiny_repo: Path) -> Iterator[TestClient]:
    yield from served(tiny_repo, "")


@pytest.fixture(scope="module")
def without_explain(tiny_repo: Path) -> Iterator[TestClient]:
    yield from served(tiny_repo, "compare, probes")


def answer(client: TestClient, feature: str) -> int:
    """404 when the feature is left out; else 200 (GET) or 422 (an empty POST body)."""
    method, path = FEATURE_ROUTES[feature]
    return client.request(method, path, json={} if method == "POST" else None).status_code


def assert_captions_work(client: TestClient) -> None:
    response = post_images(client, png(3))
    assert response.status_code == 200, response.text
    assert response.json()["results"][0]["caption"]
    hooks = {h["name"] for h in client.get("/v1/hooks").json()["hooks"]}
    assert "synonym_substitution" in hooks  # a decoding hook of the captions, not of the probes feature


def test_the_gateway_knows_every_feature_the_setting_names() -> None:
    assert tuple(FEATURES) == SETTING_NAMES


def test_captions_only(captions_only: TestClient) -> None:
    assert_captions_work(captions_only)
    assert {feature: answer(captions_only, feature) for feature in FEATURE_ROUTES} == dict.fromkeys(
        FEATURE_ROUTES, 404
    )
    tags = [t["name"] for t in captions_only.get("/openapi.json").json()["tags"]]
    assert tags == ["captions", "models", "health", "admin"]
    assert "compcap_ready 1.0" in captions_only.get("/metrics").text


def test_one_feature_left_out(without_explain: TestClient) -> None:
    assert_captions_work(without_explain)
    assert answer(without_explain, "explain") == 404
    assert answer(without_explain, "probes") == 200
    assert answer(without_explain, "compare") == 422
    tags = [t["name"] for t in without_explain.get("/openapi.json").json()["tags"]]
    assert tags == [
        "captions",
        "models",
        "health",
        "admin",
        "probes",
        "comparison",
    ]  # install order, not the setting's


def test_all_features_by_default(client: TestClient) -> None:
    assert_captions_work(client)
    assert {feature: answer(client, feature) for feature in FEATURE_ROUTES} == {
        "probes": 200,
        "explain": 422,
        "compare": 422,
    }
    tags = [t["name"] for t in client.get("/openapi.json").json()["tags"]]
    assert tags[4:] == [TAGS[name] for name in FEATURES]


def test_the_setting_is_normalised(tiny_repo: Path) -> None:
    settings = Settings(repo=tiny_repo, features=" compare,probes,,probes ")
    assert settings.features == "probes,compare"
    assert settings.feature_names() == ("probes", "compare")
    assert Settings(repo=tiny_repo).feature_names() == SETTING_NAMES


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"features": "probes,shadow"}, "COMPCAP_FEATURES: unknown feature 'shadow'"),
        ({"features": "explain", "shadow_model": "butd"}, "shadow_model: the compare feature is left out"),
        ({"features": "", "probe_schedule": "every=1h;kinds=systematicity"}, "probe_schedule: the probes"),
    ],
)
def test_bad_features_are_refused_naming_the_setting(tiny_repo: Path, overrides: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Settings(repo=tiny_repo, **overrides)
