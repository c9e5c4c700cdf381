"""The HTTP floor: the least work any Python caption server on this stack (uvicorn + Starlette) must do
per request, with no model and no beam search at all. It is a measuring instrument for ``compcap
bench``, never a caption server: its answer says ``"floor": true`` and holds no caption.

Per request it reads the multipart upload, decodes the PNG to the model's input size (a caption
needs the pixels) and answers a fixed JSON body as long as a typical caption response. The bench
loads it with the same clients and images as the gateway and reads its CPU per request; with the
models' own CPU per caption that gives the most captions/s the cores allow to any server whose
per-request work is at least this (``loadtests.cpu.cpu_bound``).

    python -m loadtests.http_floor --repo model_repo --port 8200
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from service.images import ImageError, decode_images
from service.manifest import load_manifest
from service.settings import Settings

MAX_BYTES = int(Settings.model_fields["max_upload_bytes"].default)  # the gateway's default bounds
MAX_PIXELS = int(Settings.model_fields["max_image_pixels"].default)

# as long as the gateway's answer to one beam-5 image (model, options, one caption, timings)
ANSWER = json.dumps(
    {
        "floor": True,
        "note": "compcap bench's HTTP floor: no model ran",
        "padding": "x" * 560,
    }
).encode()


def first_part(body: bytes, boundary: bytes) -> bytes:
    """The payload of the first part of a multipart body (``b""`` when there is none)."""
    start = body.find(b"\r\n\r\n", body.find(b"--" + boundary))
    end = body.find(b"\r\n--" + boundary, start + 4)
    return b"" if start < 0 or end < 0 else body[start + 4 : end]


def create_app(height: int, width: int) -> Starlette:
    """POST /v1/captions (multipart ``image``), GET /health and an empty GET /metrics."""

    async def captions(request: Request) -> Response:
        content_type = request.headers.get("content-type", "")
        boundary = content_type.partition("boundary=")[2].encode()
        png = first_part(await request.body(), boundary)
        try:
            decode_images([png], height, width, max_bytes=MAX_BYTES, max_pixels=MAX_PIXELS)
        except ImageError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return Response(ANSWER, media_type="application/json")

    async def health(_: Request) -> Response:
        return PlainTextResponse("ok")

    async def metrics(_: Request) -> Response:  # the bench reads step rows here; no steps run
        return PlainTextResponse("")

    return Starlette(
        routes=[
            Route("/v1/captions", captions, methods=["POST"]),
            Route("/health", health),
            Route("/metrics", metrics),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.http_floor", description=__doc__)
    parser.add_argument("--repo", default="model_repo", help="whose input size the images decode to")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8200)
    args = parser.parse_args(argv)
    import uvicorn

    image = load_manifest(Path(args.repo)).image
    uvicorn.run(
        create_app(image.height, image.width),
        host=args.host,
        port=args.port,
        log_config=None,
        access_log=False,
        log_level="warning",
    )
    return 0


__all__ = ["create_app", "first_part", "main"]

if __name__ == "__main__":
    raise SystemExit(main())
