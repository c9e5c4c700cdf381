"""The OpenAPI description of ``POST /v1/captions``, generated from ``CaptionOptions``: the route reads
its raw request (two body formats, options from the query or the body, bounded parsing), so FastAPI
cannot infer it. Every option is declared as a query parameter and as a property of both request
bodies, and every schema they reference lives in ``components/schemas`` (no dangling ``$ref``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from fastapi import FastAPI
from pydantic.json_schema import models_json_schema

from service.api.bodies import component_schemas as body_schemas
from service.api.schemas import EXAMPLE_HOOKS, EXAMPLE_PNG, CaptionJSONRequest, CaptionOptions, HookSpec

REF = "#/components/schemas/{model}"
MULTIPART = "CaptionMultipartRequest"
TAGS = [  # the caption routes' tags; each feature adds its own after them (service.api.feature.add_tag)
    {"name": "captions", "description": "Caption images: beam search, re-ranking, decoding hooks."},
    {"name": "models", "description": "What this deployment serves: captioners, rankers, hooks."},
    {"name": "health", "description": "Liveness and readiness probes."},
    {"name": "admin", "description": "Operating the gateway while it serves: reload the repository."},
]


def _option_schemas() -> dict[str, dict[str, Any]]:
    """Each option's JSON schema, without the ``null`` alternative (absent means default)."""
    schema = CaptionOptions.model_json_schema(ref_template=REF)
    return {name: _without_null(prop) for name, prop in schema["properties"].items()}


def _without_null(prop: dict[str, Any]) -> dict[str, Any]:
    prop = {k: v for k, v in prop.items() if k != "title"}
    if prop.get("default", 0) is None:
        del prop["default"]
    options = [s for s in prop.pop("anyOf", []) if s != {"type": "null"}]
    if len(options) == 1:
        prop.update(options[0])
    elif options:
        prop["anyOf"] = options
    return prop


def _query_parameter(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    description = schema.pop("description", None) or name.replace("_", " ")
    parameter: dict[str, Any] = {"name": name, "in": "query", "required": False, "description": description}
    if name == "hooks":  # a JSON array in the query string
        parameter["content"] = {"application/json": {"schema": schema, "example": EXAMPLE_HOOKS}}
    else:
        parameter["schema"] = schema
    return parameter


def _multipart_schema(options: dict[str, dict[str, Any]]) -> dict[str, Any]:
    image = {
        "type": "array",
        "items": {"type": "string", "contentMediaType": "application/octet-stream"},
        "description": "image files (PNG, JPEG, ...): repeat the field for several images",
    }
    return {
        "title": MULTIPART,
        "description": "``POST /v1/captions`` as multipart/form-data: repeated ``image`` files and the "
        "decoding options as form fields (``hooks`` a JSON array). A form field wins over the same "
        "query parameter.",
        "type": "object",
        "properties": {"image": image, **options},
        "required": ["image"],
        "additionalProperties": False,
    }


def caption_operation() -> dict[str, Any]:
    """``openapi_extra`` of the captions route: its query parameters and request bodies."""
    parameters = [_query_parameter(name, dict(schema)) for name, schema in _option_schemas().items()]
    return {
        "parameters": parameters,
        "requestBody": {
            "required": True,
            "description": "images and options: multipart uploads, JSON with base64 images or http(s) image "
            "URLs (fetched only from the hosts in COMPCAP_IMAGE_URL_HOSTS; none by default), or one image's "
            "raw bytes (image/*, application/octet-stream) with the options in the query",
            "content": {
                "image/*": {"schema": {"type": "string", "format": "binary"}},
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
                "multipart/form-data": {
                    "schema": {"$ref": REF.format(model=MULTIPART)},
                    "encoding": {
                        "image": {"contentType": "image/png, image/jpeg, application/octet-stream"},
                        "hooks": {"contentType": "application/json"},
                    },
                },
                "application/json": {
                    "schema": {"$ref": REF.format(model=CaptionJSONRequest.__name__)},
                    "examples": {
                        "one image": {"value": {"images": [EXAMPLE_PNG]}},
                        "re-ranked n-best with a hook": {
                            "value": {
                                "images": [EXAMPLE_PNG],
                                "beam_size": 10,
                                "n_best": 3,
                                "rerank": True,
                                "hooks": EXAMPLE_HOOKS,
                            }
                        },
                    },
                },
            },
        },
    }


def component_schemas() -> dict[str, dict[str, Any]]:
    """The schemas ``caption_operation`` references, keyed by component name."""
    _, defs = models_json_schema(
        [(CaptionJSONRequest, "validation"), (HookSpec, "validation")], ref_template=REF
    )
    schemas: dict[str, dict[str, Any]] = dict(defs.get("$defs", {}))
    schemas[MULTIPART] = _multipart_schema(_option_schemas())
    return schemas


def _refs(node: Any) -> Iterator[str]:
    """The component names ``node`` references."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(REF.format(model="")):
            yield ref.removeprefix(REF.format(model=""))
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def install_openapi(app: FastAPI) -> None:
    """Add ``component_schemas()`` to the app's generated document, and the request bodies' schemas of
    the routes it serves (``service.api.bodies``), once, the first time it is built."""
    generate: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = generate()
            schemas = document.setdefault("components", {}).setdefault("schemas", {})
            for name, schema in component_schemas().items():
                if name in schemas and schemas[name] != schema:
                    raise RuntimeError(f"two different OpenAPI schemas are named {name}")
                schemas[name] = schema
            bodies = body_schemas()
            missing = [name for name in _refs(document) if name not in schemas and name in bodies]
            while missing:  # those the document references, and those they reference in turn
                name = missing.pop()
                if name not in schemas:
                    schemas[name] = bodies[name]
                    missing += [n for n in _refs(bodies[name]) if n not in schemas and n in bodies]
        return app.openapi_schema or {}

    app.openapi = openapi  # type: ignore[method-assign]
