"""The OpenAPI document: valid, no dangling ``$ref``, every caption option declared for the query
string and both request bodies, typed responses and tags on every route, ``/metrics`` left out; and
``/docs`` / ``/redoc`` that load only the app's own assets (they work with no internet)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.testclient import TestClient
from openapi_spec_validator import validate
from pydantic import BaseModel

from service.api.schemas import CaptionOptions
from service.compare.router import CompareFields
from service.explain.router import ExplainFields
from tests.api.test_captions_api import png, post_images

OPTIONS = set(CaptionOptions.model_fields)


@pytest.fixture(scope="module")
def spec(client: TestClient) -> dict[str, Any]:
    response = client.get("/openapi.json")
    assert response.status_code == 200
    document: dict[str, Any] = response.json()
    return document


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for value in node.values() for r in refs(value)]
    if isinstance(node, list):
        return [r for value in node for r in refs(value)]
    return []


def resolve(spec: dict[str, Any], ref: str) -> Any:
    assert ref.startswith("#/"), ref
    node: Any = spec
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        assert isinstance(node, dict) and part in node, f"{ref} does not resolve"
        node = node[part]
    return node


def deref(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = resolve(spec, schema["$ref"])
    return schema


def test_the_document_is_valid_openapi(spec: dict[str, Any]) -> None:
    validate(spec)  # raises on the first problem
    assert spec["openapi"].startswith("3.1")


def test_every_ref_resolves(spec: dict[str, Any]) -> None:
    found = refs(spec)
    assert "#/components/schemas/HookSpec" in found
    for ref in found:
        resolve(spec, ref)


def test_caption_options_are_declared_in_query_multipart_and_json(spec: dict[str, Any]) -> None:
    operation = spec["paths"]["/v1/captions"]["post"]
    query = {p["name"] for p in operation["parameters"] if p["in"] == "query"}
    assert query == OPTIONS
    hooks = next(p for p in operation["parameters"] if p["name"] == "hooks")
    assert "application/json" in hooks["content"]  # a JSON array inside the query string
    content = operation["requestBody"]["content"]
    form = deref(spec, content["multipart/form-data"]["schema"])
    assert set(form["properties"]) == OPTIONS | {"image"} and form["required"] == ["image"]
    assert content["multipart/form-data"]["encoding"]["hooks"]["contentType"] == "application/json"
    body = deref(spec, content["application/json"]["schema"])
    assert set(body["properties"]) == OPTIONS | {"images"} and body["required"] == ["images"]
    item = deref(spec, body["properties"]["hooks"]["anyOf"][0]["items"])
    assert set(item["properties"]) == {"name", "params"}


def test_every_route_has_typed_responses_and_a_tag(spec: dict[str, Any]) -> None:
    assert set(spec["paths"]) == {
        "/",  # the Hugging Face image-to-text task (service.gateway.hf_task)
        "/v1/captions",
        "/v1/models",
        "/v1/hooks",
        "/healthz",
        "/readyz",
        "/v1/probes",
        "/v1/probes/{job_id}",
        "/v1/probes/{job_id}/accept",
        "/v1/probes/{job_id}/compare/{other_id}",  # paired tests of two jobs on the same images
        "/v1/probe-kinds",
        "/v1/probe-sets",
        "/v1/explain",
        "/v1/explain/methods",
        "/v1/compare",
        "/v1/compare/shadow",
        "/v1/admin/reload",  # the repository reloaded while serving (service.gateway.admin)
    }
    tags = {t["name"] for t in spec["tags"]}
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            assert set(operation["tags"]) <= tags and operation["tags"], (path, method)
            success = "202" if (path, method) == ("/v1/probes", "post") else "200"
            ok = deref(spec, operation["responses"][success]["content"]["application/json"]["schema"])
            if ok.get("type") == "array":  # the Hugging Face task answers a list (its own spec)
                ok = deref(spec, ok["items"])
            assert ok.get("properties"), (path, method)
    compared = spec["paths"]["/v1/probes/{job_id}/compare/{other_id}"]["get"]["responses"]
    figures = deref(spec, compared["200"]["content"]["application/json"]["schema"])["properties"]["figures"]
    test = deref(spec, figures["additionalProperties"]["anyOf"][0])
    interval = deref(spec, test["properties"]["difference"])
    assert {"estimate", "low", "high", "se"} <= set(interval["properties"]) and "409" in compared
    errors = spec["paths"]["/v1/captions"]["post"]["responses"]
    for status in ("400", "404", "413", "414", "415", "422", "503", "504"):
        schema = errors[status]["content"]["application/json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/ErrorResponse"}, status
    ready = spec["paths"]["/readyz"]["get"]["responses"]["503"]["content"]["application/json"]["schema"]
    assert ready == {"$ref": "#/components/schemas/ReadyResponse"}


def test_metrics_is_served_but_not_documented(client: TestClient, spec: dict[str, Any]) -> None:
    assert "/metrics" not in spec["paths"]
    assert client.get("/metrics").status_code == 200


def test_the_json_examples_are_real_requests(client: TestClient, spec: dict[str, Any]) -> None:
    examples = spec["paths"]["/v1/captions"]["post"]["requestBody"]["content"]["application/json"]["examples"]
    assert examples
    for name, example in examples.items():
        response = client.post("/v1/captions", json=example["value"])
        assert response.status_code == 200, (name, response.text)


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_load_only_local_assets(client: TestClient, page: str) -> None:
    response = client.get(page)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    html = response.text
    assert "http://" not in html and "https://" not in html and "//cdn" not in html
    urls = re.findall(r'(?:src|href)="([^"]+)"', html) + re.findall(r"url: '([^']+)'", html)
    urls += re.findall(r'spec-url="([^"]+)"', html)
    assert "/openapi.json" in urls and any(u.endswith(".js") for u in urls), urls
    for url in urls:
        assert url.startswith("/") and not url.startswith("//"), url
        asset = client.get(url)
        assert asset.status_code == 200, url
        assert len(asset.content) > 0, url


def test_a_body_option_wins_over_the_same_query_parameter(client: TestClient) -> None:
    """Options may come from both: the body's value is the one used (JSON and multipart alike)."""
    import base64

    image = base64.b64encode(png(30)).decode()
    body = client.post("/v1/captions?beam_size=2", json={"images": [image], "beam_size": 3}).json()
    assert body["beam_size"] == 3
    files = [("image", ("a.png", png(30), "image/png"))]
    form = client.post("/v1/captions?beam_size=2", files=files, data={"beam_size": "3"}).json()
    assert form["beam_size"] == 3
    assert post_images(client, png(30), beam_size=2).json()["beam_size"] == 2


@pytest.mark.parametrize(
    ("path", "fields", "image", "json_image"),
    [
        ("/v1/explain", ExplainFields, {"type": "string"}, "image"),
        ("/v1/compare", CompareFields, {"type": "array"}, "images"),
    ],
)
def test_explain_and_compare_document_both_request_bodies(
    spec: dict[str, Any], path: str, fields: type[BaseModel], image: dict[str, str], json_image: str
) -> None:
    """As the captions route: multipart (``image`` file parts, the options as form fields, objects and
    arrays as JSON) and JSON (base64 images), both schemas in ``components``."""
    content = spec["paths"][path]["post"]["requestBody"]["content"]
    assert set(content) == {"multipart/form-data", "application/json"}
    form = deref(spec, content["multipart/form-data"]["schema"])
    assert set(form["properties"]) == set(fields.model_fields) | {"image"}
    assert image.items() <= form["properties"]["image"].items()
    encoding = content["multipart/form-data"]["encoding"]
    assert encoding["image"]["contentType"].startswith("image/png")
    assert all(encoding[name]["contentType"] == "application/json" for name in set(encoding) - {"image"})
    body = deref(spec, content["application/json"]["schema"])
    assert set(body["properties"]) == set(fields.model_fields) | {json_image}


def test_per_order_overlaps_tokens_and_scene_graphs_are_documented(spec: dict[str, Any]) -> None:
    """What the demo reads and sends: each compared pair's NGSM_n per order, and an explanation's caption
    as token ids with the uploaded image's scene graph."""
    schemas = spec["components"]["schemas"]
    orders = schemas["PairSimilarity"]["properties"]["orders"]
    assert orders["minItems"] == orders["maxItems"] == 4 and "geometric mean" in orders["description"]
    assert "orders" in schemas["PairSimilarity"]["required"]
    explain = schemas["ExplainRequest"]["properties"]
    tokens = [s for s in explain["tokens"]["anyOf"] if s.get("type") == "array"]
    assert tokens and tokens[0]["items"] == {"type": "integer", "minimum": 0}
    scene = deref(spec, next(s for s in explain["scene_graph"]["anyOf"] if "$ref" in s))
    assert set(scene["required"]) == {"objects", "background", "horizon"}
    obj = deref(spec, scene["properties"]["objects"]["items"])
    assert set(obj["required"]) == {"id", "noun", "bbox"}
