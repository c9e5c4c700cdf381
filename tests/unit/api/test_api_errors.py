"""The kit's error shaping: one dotted field-path style whatever the source wrote, and ``did you mean``
for an unknown field (found in the request's model at the error's path) or a value outside a fixed set
of choices."""

from __future__ import annotations

import json
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict

from service.api.errors import InvalidRequest, error_response, field_path, known_fields, validate
from service.api.errors import validation_response as respond
from service.api.schemas import CaptionJSONRequest
from service.text.suggest import closest, did_you_mean


class Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    image_id: int
    kind: Literal["attention", "saliency"] = "attention"


class Outer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    beam_size: int = 1
    refs: list[Inner] = []
    ref: Inner | None = None


@pytest.mark.parametrize(
    ("loc", "path"),
    [
        (("body", "hooks", 0, "params", "words"), "hooks.0.params.words"),
        (("query", "beam_size"), "beam_size"),
        ("configurations[1].model", "configurations.1.model"),
        ("configurations.1.hooks.0.name", "configurations.1.hooks.0.name"),
        (("configurations", 0), "configurations.0"),
        (("body",), "request"),
        ((), "request"),
    ],
)
def test_every_field_path_is_dotted(loc: tuple[object, ...] | str, path: str) -> None:
    assert field_path(loc) == path


def test_error_response_dots_a_field_given_in_another_style() -> None:
    response = error_response(
        404, "unknown_model", "no", [{"field": "configurations[1].model", "message": "no"}]
    )
    assert json.loads(response.body)["error"]["details"] == [
        {"field": "configurations.1.model", "message": "no"}
    ]


def test_did_you_mean() -> None:
    assert did_you_mean("beamsize", ["beam_size", "n_best"]) == " (did you mean 'beam_size'?)"
    assert did_you_mean("saliancy", ["attention", "saliency"]) == " (did you mean 'saliency'?)"
    assert did_you_mean("colour", ["beam_size", "n_best"]) == ""
    assert closest("BEAM_SIZE", ["beam_size"]) == "beam_size"
    assert closest(3, ["beam_size"]) is None and closest("x", []) is None


def test_known_fields_follow_the_path_through_lists_and_optionals() -> None:
    assert known_fields(Outer, []) == ["beam_size", "refs", "ref"]
    assert known_fields(Outer, ["refs", 2]) == ["image_id", "kind"]
    assert known_fields(Outer, ["ref"]) == ["image_id", "kind"]
    assert known_fields(Outer, ["nope"]) == [] and known_fields(None, []) == []


def details(model: type[BaseModel], data: object) -> list[dict[str, str]]:
    with pytest.raises(InvalidRequest) as refused:
        validate(model, data)
    body = json.loads(respond(list(refused.value.errors()), refused.value.model).body)
    assert body["error"]["code"] == "validation_error"
    return body["error"]["details"]


def test_an_unknown_field_is_named_with_the_closest_known_one() -> None:
    assert details(Outer, {"beamsize": 2}) == [
        {"field": "beamsize", "message": "unknown field 'beamsize' (did you mean 'beam_size'?)"}
    ]
    assert details(Outer, {"refs": [{"image_id": 1}, {"image_id": 2, "kinds": "saliency"}]}) == [
        {"field": "refs.1.kinds", "message": "unknown field 'kinds' (did you mean 'kind'?)"}
    ]
    assert details(Outer, {"ref": {"image_id": 1, "kind": "saliancy"}}) == [
        {
            "field": "ref.kind",
            "message": "Input should be 'attention' or 'saliency' (did you mean 'saliency'?)",
        }
    ]
    assert details(Outer, {"colour": "red"}) == [{"field": "colour", "message": "unknown field 'colour'"}]
    assert details(CaptionJSONRequest, {"images": [], "nbest": 2}) == [
        {"field": "nbest", "message": "unknown field 'nbest' (did you mean 'n_best'?)"}
    ]


def test_without_the_model_the_field_is_still_named() -> None:
    errors = [
        {"type": "extra_forbidden", "loc": ("body", "beamsize"), "msg": "Extra inputs are not permitted"}
    ]
    body = json.loads(respond(errors).body)["error"]
    assert body["details"] == [{"field": "beamsize", "message": "unknown field 'beamsize'"}]
    assert body["message"] == "beamsize: unknown field 'beamsize'"
