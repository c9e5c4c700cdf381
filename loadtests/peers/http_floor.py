"""The HTTP floor: the least work any Python caption server on this stack (uvicorn + Starlette) must do
per request, with no model and no beam search at all. It is a measuring instrument for ``compcap
bench``, never a caption server: its answer says ``"floor": true`` and holds no caption.

Per request it reads the multipart upload, decodes the PNG to the model's input size (a caption
needs the pixels) and answers a fixed JSON body as long as a typical caption response. The bench
loads it with the same clients and images as the gateway and reads its CPU per request; with the
models' own CPU per caption that gives the most captions/s the cores allow to any server whose
per-request work is at least this (``loadtests.load.cpu.cpu_bound``).

    python -m loadtests.peers.http_floor --repo model_repo --port 8200
"""

from __future__ import annotations

import json
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from loadtests.peers.stand_in import STAND_IN_ROUTES, serve, server_parser
from service.images.decode import ImageError, decode_images
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
    """POST /v1/captions (multipart ``image``) and the stand-in's GET /health and empty GET /metrics."""

    async def captions(request: Request) -> Response:
        content_type = request.headers.get("content-type", "")
        boundary = content_type.partition("boundary=")[2].encode()
        png = first_part(await request.body(), boundary)
        try:
            decode_images([png], height, width, max_bytes=MAX_BYTES, max_pixels=MAX_PIXELS)
        except ImageError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return Response(ANSWER, media_type="application/json")

    return Starlette(routes=[Route("/v1/captions", captions, methods=["POST"]), *STAND_IN_ROUTES])


def main(argv: list[str] | None = None) -> int:
    parser = server_parser("python -m loadtests.peers.http_floor", __doc__, port=8200)
    parser.add_argument("--repo", default="model_repo", help="whose input size the images decode to")
    args = parser.parse_args(argv)
    image = load_manifest(Path(args.repo)).image
    return serve(create_app(image.height, image.width), args, quiet=True)


__all__ = ["create_app", "first_part", "main"]

if __name__ == "__main__":
    raise SystemExit(main())
