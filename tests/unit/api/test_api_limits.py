"""The request bounds of ``service.api.limits`` as pure functions: the JSON depth/size scan agrees with
what ``json.loads`` would nest, strings (escapes included) hide their brackets, and the hook-params
walk is iterative."""

from __future__ import annotations

import json
import random
import time

import pytest

from service.api.limits import (
    MAX_FIELD_NAME,
    MAX_HOOK_PARAM_DEPTH,
    MAX_HOOK_PARAM_STRING,
    MAX_HOOK_PARAM_VALUES,
    MAX_JSON_DEPTH,
    MAX_JSON_VALUES,
    MAX_QUERY_BYTES,
    MAX_QUERY_PARAMS,
    LimitError,
    check_hook_params,
    check_json,
    check_query,
)


def nested(depth: int, leaf: str = "1") -> str:
    return (
        '{"a":' * (depth // 2)
        + "[" * (depth - depth // 2)
        + leaf
        + "]" * (depth - depth // 2)
        + "}" * (depth // 2)
    )


def test_depth_at_the_limit_passes_and_one_more_fails() -> None:
    check_json(nested(MAX_JSON_DEPTH).encode())
    json.loads(nested(MAX_JSON_DEPTH))  # the scan's depth is the decoder's depth
    with pytest.raises(LimitError) as err:
        check_json(nested(MAX_JSON_DEPTH + 1).encode())
    assert (err.value.status, err.value.code) == (400, "json_too_deep")
    assert str(MAX_JSON_DEPTH) in err.value.message


def test_brackets_inside_strings_do_not_count() -> None:
    inside = json.dumps({"images": ["[" * 5000, '\\"[[[[' * 500, "{" * 5000 + '"']})
    check_json(inside.encode())
    check_json(inside)  # str input too
    escaped_quote_then_deep = '["\\\\", ' + "[" * 100 + "]" * 100 + "]"  # the string is one backslash
    with pytest.raises(LimitError, match="nested deeper"):
        check_json(escaped_quote_then_deep.encode())


def random_document(rng: random.Random, depth: int) -> tuple[object, int]:
    """A random JSON value and its nesting depth; strings full of brackets, quotes and backslashes."""
    kind = rng.random()
    if depth > 40 or kind < 0.3:
        return "".join(rng.choice('[]{}",\\/a\n') for _ in range(rng.randrange(8))), 0
    children = [random_document(rng, depth + 1) for _ in range(rng.randrange(1, 3))]
    inner = max(d for _, d in children) + 1
    if kind < 0.65:
        return [c for c, _ in children], inner
    return {f'k{i}[\\"': c for i, (c, _) in enumerate(children)}, inner


def test_scan_depth_matches_the_document_depth() -> None:
    rng = random.Random(0)
    seen = set()
    for _ in range(400):
        doc, depth = random_document(rng, 0)
        text = json.dumps(doc)
        seen.add(depth > MAX_JSON_DEPTH)
        if depth > MAX_JSON_DEPTH:
            with pytest.raises(LimitError, match="nested deeper"):
                check_json(text.encode())
        else:
            check_json(text.encode())
    assert seen == {True, False}, "the random documents never crossed the limit: the test shows nothing"


def test_an_unterminated_string_stops_the_scan() -> None:
    check_json(b'["' + b"[" * 5000)  # invalid JSON: json.loads rejects it without recursing
    with pytest.raises(json.JSONDecodeError):
        json.loads(b'["' + b"[" * 5000)


def test_value_count_bound() -> None:
    check_json(("[" + ",".join(["0"] * (MAX_JSON_VALUES - 2)) + "]").encode())
    with pytest.raises(LimitError) as err:
        check_json(("[" + ",".join(["0"] * (MAX_JSON_VALUES + 1)) + "]").encode())
    assert (err.value.status, err.value.code) == (413, "json_too_many_values")


def test_scan_is_linear_on_a_large_base64_body() -> None:
    body = json.dumps({"images": ["QUJD" * 4_000_000]}).encode()  # 16 MB of base64
    start = time.perf_counter()
    check_json(body)
    assert time.perf_counter() - start < 2.0


def test_query_bounds() -> None:
    check_query(b"beam_size=3&model=butd")
    for query, status, code in [
        (b"a=" + b"x" * MAX_QUERY_BYTES, 414, "query_too_long"),
        (b"&".join([b"a=1"] * (MAX_QUERY_PARAMS + 1)), 400, "too_many_query_params"),
        (b"k" * (MAX_FIELD_NAME + 1) + b"=1", 400, "field_name_too_long"),
    ]:
        with pytest.raises(LimitError) as err:
            check_query(query)
        assert (err.value.status, err.value.code) == (status, code)


def lists(k: int) -> object:
    value: object = 1
    for _ in range(k):
        value = [value]
    return value


def test_hook_params_bounds() -> None:
    check_hook_params({"pairs": [["puppy", "dog"], ["kitten", "cat"]]})
    check_hook_params({"a": lists(MAX_HOOK_PARAM_DEPTH - 1)})  # params itself is the first level
    with pytest.raises(ValueError, match=f"limit of {MAX_HOOK_PARAM_DEPTH} levels"):
        check_hook_params({"a": lists(MAX_HOOK_PARAM_DEPTH)})
    very_deep: object = 1
    for _ in range(100_000):  # far past the recursion limit: the walk is iterative
        very_deep = {"a": very_deep}
    with pytest.raises(ValueError, match="levels"):
        check_hook_params({"a": very_deep})
    with pytest.raises(ValueError, match=str(MAX_HOOK_PARAM_VALUES)):
        check_hook_params({"ids": list(range(MAX_HOOK_PARAM_VALUES))})
    with pytest.raises(ValueError, match=str(MAX_HOOK_PARAM_STRING)):
        check_hook_params({"words": ["x" * (MAX_HOOK_PARAM_STRING + 1)]})
