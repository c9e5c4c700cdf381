"""The shape of every failure: ``{"error": {"code", "message", "details"?}}`` with a 4xx/5xx status
(``handlers`` maps exceptions to it; a ``RequestError`` carries its status, code, field and headers).
Knows nothing of the engine.

A detail's ``field`` is the path to the value at fault in one style everywhere: dotted, list indices
as segments (``hooks.0.params.words``, ``configurations.1.model``), ``request`` for the request as a
whole. An unknown field, or a value outside a fixed set of choices, close to a known one gets
`` (did you mean 'beam_size'?)`` in its message (``validate`` knows the model, so it knows the names)."""

from __future__ import annotations

import json
import re
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

from service.api.gate import RequestError
from service.text.suggest import did_you_mean

MAX_MESSAGE = 2_000  # characters of an error message: a hostile value is never echoed whole
MAX_DETAILS = 20


def _clip(text: str, limit: int = MAX_MESSAGE) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ErrorJSONResponse(JSONResponse):
    """ASCII JSON: an echoed lone surrogate or control character cannot break the rendering."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


class ApiError(RequestError):
    """A request the kit or a router refuses (the ``RequestError`` a feature's service raises, by
    another name): one handler answers both."""


def error_response(
    status: int, code: str, message: str, details: list[dict[str, Any]] | None = None
) -> JSONResponse:
    body: dict[str, Any] = {"code": code, "message": _clip(message)}
    if details is not None:
        body["details"] = [
            {k: _clip(field_path(v) if k == "field" and isinstance(v, str) else str(v)) for k, v in d.items()}
            for d in details[:MAX_DETAILS]
        ]
    return ErrorJSONResponse({"error": body}, status_code=status)


_INDEX = re.compile(r"\[(\d+)\]")
_SOURCES = ("body", "query", "path", "header")  # where FastAPI's own locations start


def _inside(loc: Sequence[Any]) -> list[Any]:
    """``loc`` without FastAPI's leading source (``body``, ``query``, ...)."""
    parts = list(loc)
    return parts[1:] if parts and parts[0] in _SOURCES else parts


def field_path(loc: str | Sequence[Any]) -> str:
    """The one style of a field path: ``("body", "configurations", 1, "model")``,
    ``"configurations[1].model"`` and ``"configurations.1.model"`` are all ``configurations.1.model``;
    empty is ``request``."""
    parts = [loc] if isinstance(loc, str) else [str(p) for p in _inside(loc)]
    dotted = _INDEX.sub(r".\1", ".".join(parts))
    return _clip(".".join(p for p in dotted.split(".") if p), 200) or "request"


# -- validation errors ---------------------------------------------------------------------------


M = TypeVar("M", bound=BaseModel)


class InvalidRequest(RequestValidationError):
    """A ``ValidationError`` of ``model`` on a request (``validate``): answered as FastAPI's own, with
    the model at hand for ``did you mean``."""

    def __init__(self, errors: Sequence[Any], model: type[BaseModel]) -> None:
        super().__init__(errors)
        self.model = model


def validate(model: type[M], data: Any) -> M:
    """``model.model_validate(data)``; an ``InvalidRequest`` naming each field at fault."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidRequest(exc.errors(include_url=False), model) from None


def _models_in(annotation: Any) -> list[Any]:
    """The annotations a value of ``annotation`` may hold: Optional, unions and ``Annotated`` opened."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _models_in(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        return [t for arg in typing.get_args(annotation) for t in _models_in(arg)]
    return [annotation]


def _step(annotation: Any, part: Any) -> Any:
    """The annotation of ``part`` (a field name or a list index) inside a value of ``annotation``."""
    for option in _models_in(annotation):
        if isinstance(option, type) and issubclass(option, BaseModel):
            if isinstance(part, str) and part in option.model_fields:
                return option.model_fields[part].annotation
            continue
        origin, args = typing.get_origin(option), typing.get_args(option)
        if origin in (list, tuple, Sequence) and isinstance(part, int) and args:
            return args[0]
        if origin in (dict, Mapping) and len(args) == 2:
            return args[1]
    return None


def known_fields(model: Any, loc: Sequence[Any]) -> list[str]:
    """The field names of the object at ``loc`` inside ``model`` (empty where there is none)."""
    annotation = model
    for part in loc:
        annotation = _step(annotation, part)
        if annotation is None:
            return []
    names: list[str] = []
    for option in _models_in(annotation):
        if isinstance(option, type) and issubclass(option, BaseModel):
            names += [n for n in option.model_fields if n not in names]
    return names


_CHOICE = re.compile(r"'((?:[^'\\]|\\.)*)'")


def _message(error: Mapping[str, Any], model: Any) -> str:
    loc = _inside(error.get("loc", ()))
    kind, value = error.get("type"), error.get("input")
    if kind == "extra_forbidden" and loc:
        name = str(loc[-1])
        known = known_fields(model, loc[:-1]) if model is not None else []
        return f"unknown field {name!r}" + did_you_mean(name, known)
    message = str(error.get("msg", ""))
    if kind in ("literal_error", "enum") and isinstance(value, str):
        choices = _CHOICE.findall(str((error.get("ctx") or {}).get("expected", "")))
        message += did_you_mean(value, choices)
    return message


def validation_response(errors: list[Any], model: Any = None) -> JSONResponse:
    """422 ``validation_error`` with one detail per error (``field_path``, message); ``model``: the
    request's pydantic model, for ``did you mean`` on an unknown field."""
    details = [
        {"field": field_path(e.get("loc", ())), "message": _message(e, model)} for e in errors[:MAX_DETAILS]
    ]
    message = "; ".join(f"{d['field']}: {d['message']}" for d in details) or "invalid request"
    return error_response(422, "validation_error", message, details)
