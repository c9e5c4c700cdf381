"""A route's request body in the two forms every image route takes (as ``POST /v1/captions``): JSON with
base64 images, or multipart with the images as ``image`` file parts and every other field a form field
(an object or array field, e.g. ``configurations`` or ``image_ref``, as a JSON string). One
``UploadBody`` per route reads both into the same thing — the options (``fields``, a pydantic model)
and the images' bytes — and describes both in the OpenAPI document.

``json_model`` is ``fields`` plus the base64 field (``image``: one, or ``images``: a list); each model
forbids unknown fields, so a misspelt one is named with a ``did you mean``.
"""

from __future__ import annotations

import json
import types
import typing
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from fastapi import Request
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from service.api.errors import ApiError, validate
from service.api.limits import check_json
from service.api.parsing import FILE_FIELD, b64_blob, check_count, request_parts
from service.api.settings import ServiceSettings

REF = "#/components/schemas/{model}"
UPLOAD_ERRORS: dict[int, str] = {
    400: "bad image, base64, JSON or multipart body",
    413: "image, body or form field over its limit",
    415: "neither multipart/form-data nor application/json",
}  # what reading an ``UploadBody`` may answer: each route's documented errors include them
F = TypeVar("F", bound=BaseModel)
_COMPONENTS: dict[str, dict[str, Any]] = {}  # the schemas the bodies' operations reference, by name


def _is_json_valued(annotation: Any) -> bool:
    """Whether a field holds an object or an array (sent as a JSON string in a form)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _is_json_valued(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        return bool(options) and all(_is_json_valued(a) for a in options)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return True
    return origin in (list, dict, tuple) or annotation in (list, dict)


@dataclass(frozen=True)
class UploadBody(Generic[F]):
    """``fields``: the options; ``json_model``: ``fields`` plus ``image_field`` (base64); ``many``:
    whether several images may be sent (``images``) or one (``image``); ``least``: the fewest images
    (0: the options may name another source, e.g. a probe-set image)."""

    fields: type[F]
    json_model: type[BaseModel]
    image_field: str
    many: bool
    least: int
    description: str

    @property
    def json_fields(self) -> frozenset[str]:
        """The form fields that carry JSON."""
        return frozenset(n for n, f in self.fields.model_fields.items() if _is_json_valued(f.annotation))

    async def read(self, request: Request, settings: ServiceSettings, most: int) -> tuple[F, list[bytes]]:
        """The options and ``least``..``most`` images of either form (422 ``no_image`` /
        ``too_many_images`` outside), every error naming its field."""
        least = self.least
        async with request_parts(request, settings, most + 1) as parts:
            if parts.form:
                options = validate(self.fields, self._decoded(parts.fields or {}))
                check_count(len(parts.uploads), most, least)
                return options, await parts.images()
        if parts.fields is None:
            raise ApiError(
                422,
                "validation_error",
                "the body must be a JSON object (or multipart/form-data)",
                field="request",
            )
        body = validate(self.json_model, parts.fields)
        value = getattr(body, self.image_field)
        texts: list[str] = [] if value is None else (list(value) if self.many else [value])
        check_count(len(texts), most, least, field=self.image_field)
        labels = [f"{self.image_field}.{i}" if self.many else self.image_field for i in range(len(texts))]
        blobs = [
            b64_blob(t, label, settings.max_upload_bytes) for t, label in zip(texts, labels, strict=True)
        ]
        return self.fields.model_validate(body.model_dump(exclude={self.image_field})), blobs

    def _decoded(self, form: dict[str, Any]) -> dict[str, Any]:
        """The form's text fields, those that carry JSON decoded (bounded as any JSON the kit reads)."""
        out = dict(form)
        for name in self.json_fields & set(form):
            try:
                check_json(form[name], f"the {name} JSON")
                out[name] = json.loads(form[name])
            except (ValueError, RecursionError) as exc:  # a LimitError (400/413) is no ValueError
                raise ApiError(
                    422, "validation_error", f"{name} must be JSON in a form field: {exc}", field=name
                ) from None
        return out

    # -- the OpenAPI description -------------------------------------------------------------------

    @property
    def form_name(self) -> str:
        return self.json_model.__name__.removesuffix("Request") + "MultipartRequest"

    def operation(self) -> dict[str, Any]:
        """``openapi_extra`` of the route: both request bodies, their schemas registered as components
        (``component_schemas``)."""
        _, defs = models_json_schema(
            [(self.json_model, "validation"), (self.fields, "validation")], ref_template=REF
        )
        schemas: dict[str, dict[str, Any]] = dict(defs.get("$defs", {}))
        schemas[self.form_name] = self._form_schema(schemas.pop(self.fields.__name__))
        for name, schema in schemas.items():
            if _COMPONENTS.setdefault(name, schema) != schema:
                raise RuntimeError(f"two different OpenAPI schemas are named {name}")
        return {
            "requestBody": {
                "required": True,
                "description": self.description,
                "content": {
                    "multipart/form-data": {
                        "schema": {"$ref": REF.format(model=self.form_name)},
                        "encoding": {
                            FILE_FIELD: {"contentType": "image/png, image/jpeg, application/octet-stream"},
                            **{n: {"contentType": "application/json"} for n in sorted(self.json_fields)},
                        },
                    },
                    "application/json": {"schema": {"$ref": REF.format(model=self.json_model.__name__)}},
                },
            }
        }

    def _form_schema(self, fields: dict[str, Any]) -> dict[str, Any]:
        file = {"type": "string", "contentMediaType": "application/octet-stream"}
        image: dict[str, Any] = (
            {"type": "array", "items": file, "description": "image files: repeat the part for several"}
            if self.many
            else {**file, "description": "the image file"}
        )
        required = ([FILE_FIELD] if self.least else []) + list(fields.get("required", []))
        return {
            **{k: v for k, v in fields.items() if k not in ("title", "properties", "required")},
            **({"required": required} if required else {}),
            "title": self.form_name,
            "description": f"{self.json_model.__name__} as multipart/form-data: "
            + (
                f"the images as '{FILE_FIELD}' file parts"
                if self.many
                else f"the image as a '{FILE_FIELD}' file part"
            )
            + ", every other field a form field (objects and arrays as JSON).",
            "type": "object",
            "properties": {FILE_FIELD: image, **fields.get("properties", {})},
            "additionalProperties": False,
        }


def component_schemas() -> dict[str, dict[str, Any]]:
    """The schemas the ``UploadBody`` operations reference, by component name."""
    return dict(_COMPONENTS)


__all__ = ["UploadBody", "component_schemas"]
