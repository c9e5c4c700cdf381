"""Hostile bodies in process: every bounded part of a caption request — JSON, hooks (query, form,
body), query string, multipart fields, chunked bodies — answers a 4xx JSON error naming the limit,
and the gateway goes on serving."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from service.api.limits import (
    MAX_FIELD_NAME,
    MAX_FORM_FIELD_BYTES,
    MAX_FORM_FIELDS,
    MAX_HOOK_PARAM_DEPTH,
    MAX_JSON_DEPTH,
    MAX_JSON_VALUES,
    MAX_QUERY_BYTES,
    MAX_QUERY_PARAMS,
)
from service.engine.hooks import MAX_HOOKS
from service.gateway.app import create_app
from service.settings import Settings
from tests.api.conftest import wait_ready
from tests.api.test_captions_api import assert_valid_request_works, error_of, png

JSON = {"content-type": "application/json"}
IMAGE = base64.b64encode(png(21)).decode()


def deep_params(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def hooks_with_params(params: str) -> str:
    return f'[{{"name":"min_length","params":{params}}}]'


def multipart(
    fields: list[tuple[str, str]], boundary: str = "limitsboundary"
) -> tuple[bytes, dict[str, str]]:
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n' for k, v in fields]
    image = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="image"; filename="a.png"\r\n'
            "Content-Type: image/png\r\n\r\n"
        ).encode()
        + png(21)
        + b"\r\n"
    )
    body = "".join(parts).encode() + image + f"--{boundary}--\r\n".encode()
    return body, {"content-type": f"multipart/form-data; boundary={boundary}"}


def cases(client: TestClient) -> dict[str, tuple[Callable[[], httpx.Response], int, str, str]]:
    def post(content: bytes, headers: dict[str, str], query: str = "") -> Callable[[], httpx.Response]:
        return lambda: client.post(f"/v1/captions{query}", content=content, headers=headers)

    def form(fields: list[tuple[str, str]]) -> Callable[[], httpx.Response]:
        return post(*multipart(fields))

    def with_image(extra: str) -> bytes:
        return f'{{"images":["{IMAGE}"],{extra}}}'.encode()

    many_values = "[" + ",".join(["0"] * MAX_JSON_VALUES) + "]"
    many_params = ",".join(["0"] * 10_001)
    form_ok = multipart([])  # a valid multipart request: its query string carries the bad hooks
    hooks_query = "?" + str(httpx.QueryParams({"hooks": hooks_with_params(deep_params(40))}))
    return {
        "json_5000_deep": (post(b"[" * 5000 + b"]" * 5000, JSON), 400, "json_too_deep", str(MAX_JSON_DEPTH)),
        "json_deep_in_images": (
            post(f'{{"images":{"[" * 100}"x"{"]" * 100}}}'.encode(), JSON),
            400,
            "json_too_deep",
            str(MAX_JSON_DEPTH),
        ),
        "json_too_many_values": (
            post(with_image(f'"x":{many_values}'), JSON),
            413,
            "json_too_many_values",
            str(MAX_JSON_VALUES),
        ),
        "json_huge_integer": (
            post(with_image('"beam_size":1' + "0" * 5000), JSON),
            400,
            "invalid_json",
            "digits",
        ),
        "json_bad_utf8": (post(b'{"images":["\xff\xfe"]}', JSON), 400, "invalid_json", "JSON"),
        "hooks_body_params_5000_deep": (
            post(with_image(f'"hooks":{hooks_with_params(deep_params(5000))}'), JSON),
            400,
            "json_too_deep",
            str(MAX_JSON_DEPTH),
        ),
        "hooks_body_params_too_deep": (
            post(with_image(f'"hooks":{hooks_with_params(deep_params(MAX_HOOK_PARAM_DEPTH + 1))}'), JSON),
            422,
            "validation_error",
            f"hooks.0.params: Value error, nested deeper than the limit of {MAX_HOOK_PARAM_DEPTH}",
        ),
        "hooks_body_params_too_many_values": (
            post(with_image(f'"hooks":[{{"name":"ban_words","params":{{"ids":[{many_params}]}}}}]'), JSON),
            422,
            "validation_error",
            "hooks.0.params: Value error, more than the limit of 10000 values",
        ),
        "too_many_hooks": (
            post(with_image('"hooks":' + json.dumps([{"name": "min_length"}] * (MAX_HOOKS + 1))), JSON),
            422,
            "validation_error",
            f"at most {MAX_HOOKS}",
        ),
        "hooks_query_deep": (post(*form_ok, query=hooks_query), 400, "json_too_deep", "hooks JSON"),
        "hooks_form_field_deep": (
            form([("hooks", hooks_with_params(deep_params(5000)))]),
            400,
            "json_too_deep",
            "hooks JSON",
        ),
        "hooks_query_not_json": (post(*form_ok, query="?hooks=%5B%7B"), 422, "validation_error", "hooks"),
        "query_too_long": (
            post(*form_ok, query="?beam_size=3&pad=" + "x" * MAX_QUERY_BYTES),
            414,
            "query_too_long",
            str(MAX_QUERY_BYTES),
        ),
        "too_many_query_params": (
            post(*form_ok, query="?" + "&".join(f"k{i}=1" for i in range(MAX_QUERY_PARAMS + 1))),
            400,
            "too_many_query_params",
            str(MAX_QUERY_PARAMS),
        ),
        "query_name_too_long": (
            post(*form_ok, query=f"?{'k' * (MAX_FIELD_NAME + 1)}=1"),
            400,
            "field_name_too_long",
            str(MAX_FIELD_NAME),
        ),
        "form_5000_fields": (
            form([(f"f{i}", "x") for i in range(5000)]),
            413,
            "too_many_form_fields",
            str(MAX_FORM_FIELDS),
        ),
        "form_field_too_large": (
            form([("hooks", "x" * (MAX_FORM_FIELD_BYTES + 1))]),
            413,
            "form_field_too_large",
            str(MAX_FORM_FIELD_BYTES),
        ),
        "form_name_too_long": (
            form([("k" * (MAX_FIELD_NAME + 1), "1")]),
            400,
            "field_name_too_long",
            str(MAX_FIELD_NAME),
        ),
        "multipart_without_boundary": (
            post(b"--x\r\n", {"content-type": "multipart/form-data"}),
            400,
            "invalid_multipart",
            "boundary",
        ),
        "model_name_too_long": (
            post(with_image('"model":"' + "m" * 10_000 + '"'), JSON),
            422,
            "validation_error",
            "64",
        ),
    }


CASES = [
    "json_5000_deep", "json_deep_in_images", "json_too_many_values", "json_huge_integer", "json_bad_utf8",
    "hooks_body_params_5000_deep", "hooks_body_params_too_deep", "hooks_body_params_too_many_values",
    "too_many_hooks", "hooks_query_deep", "hooks_form_field_deep", "hooks_query_not_json", "query_too_long",
    "too_many_query_params", "query_name_too_long", "form_5000_fields", "form_field_too_large",
    "form_name_too_long", "multipart_without_boundary", "model_name_too_long",
]  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_hostile_input_is_a_4xx_naming_the_limit(client: TestClient, case: str) -> None:
    send, status, code, mentions = cases(client)[case]
    response = send()
    assert response.status_code == status, response.text[:500]
    error = error_of(response)
    assert error["code"] == code, error
    assert mentions in error["message"], error
    assert len(response.content) < 10_000, "the error echoed the hostile input"
    assert_valid_request_works(client)


def test_bounds_leave_room_for_real_requests(client: TestClient) -> None:
    """The deepest real request (synonym_substitution pairs) and hooks through query and form pass."""
    hooks = [{"name": "synonym_substitution", "params": {"pairs": [["dog", "puppy"]]}}]
    body = {"images": [IMAGE], "beam_size": 2, "hooks": hooks}
    response = client.post("/v1/captions", json=body)
    assert response.status_code == 200, response.text
    content, headers = multipart(
        [("hooks", json.dumps([{"name": "min_length", "params": {"min_words": 1}}]))]
    )
    response = client.post("/v1/captions?beam_size=2", content=content, headers=headers)
    assert response.status_code == 200, response.text
    assert response.json()["hooks"] == ["min_length"]


def test_a_utf16_json_body_is_still_read(client: TestClient) -> None:
    body = json.dumps({"images": [IMAGE], "beam_size": 2}).encode("utf-16")
    response = client.post("/v1/captions", content=body, headers=JSON)
    assert response.status_code == 200, response.text


def test_a_lone_surrogate_is_answered_in_json(client: TestClient) -> None:
    response = client.post(
        "/v1/captions", content=f'{{"images":["{IMAGE}"],"\\ud800":1}}'.encode(), headers=JSON
    )
    assert response.status_code == 422
    assert error_of(response)["code"] == "validation_error"


@pytest.fixture(scope="module")
def small_client(tiny_repo: Path) -> Iterator[TestClient]:
    """Body limit = 1 image x 1 KiB, base64, + 1 MiB of options."""
    settings = Settings(repo=tiny_repo, max_upload_bytes=1024, max_images_per_request=1, intra_op_threads=1)
    with TestClient(create_app(settings)) as c:
        wait_ready(c)
        yield c


def chunks(total: int, first: bytes = b"") -> Iterator[bytes]:
    yield first
    sent = len(first)
    while sent < total:
        yield b" " * 65536
        sent += 65536


@pytest.mark.parametrize("content_type", ["application/json", "multipart/form-data; boundary=limitsboundary"])
def test_a_chunked_body_is_bounded_as_it_arrives(small_client: TestClient, content_type: str) -> None:
    """No Content-Length: the body is cut off at the limit, not buffered whole first."""
    start = b"[" if content_type == "application/json" else b"--limitsboundary\r\n"
    response = small_client.post(
        "/v1/captions", content=chunks(3 << 20, start), headers={"content-type": content_type}
    )
    assert response.status_code == 413, response.text
    error: dict[str, Any] = error_of(response)
    assert error["code"] == "request_too_large" and "limit" in error["message"]
    ok = small_client.post("/v1/captions", json={"images": [base64.b64encode(png(1, (16, 12))).decode()]})
    assert ok.status_code == 200, ok.text


def test_a_body_that_stops_arriving_is_a_408() -> None:
    """``bounded_stream`` with ``idle_s``: a body whose next part does not come (a client that stopped
    halfway through its upload) raises 408 ``body_timeout``; parts that keep coming are all read, the
    time between them being under the bound (real serving: tests/integration/test_serve_process.py)."""
    import asyncio

    from service.api.limits import LimitError, bounded_stream

    async def stalls() -> Any:
        yield b'{"model": '
        await asyncio.Event().wait()  # never set: the rest never comes

    async def flows() -> Any:
        for part in (b"a", b"b", b"c"):
            await asyncio.sleep(0)
            yield part

    async def read(stream: Any, idle_s: float) -> bytes:
        return b"".join([chunk async for chunk in bounded_stream(stream, 1000, idle_s)])

    with pytest.raises(LimitError) as refused:
        asyncio.run(read(stalls(), 0.05))
    assert (refused.value.status, refused.value.code) == (408, "body_timeout")
    assert "0.05 s" in refused.value.message
    assert asyncio.run(read(flows(), 30.0)) == b"abc"
