"""The stand-in server every peer of ``compcap bench`` is: what the bench loads in the gateway's place,
so that a peer differs from the gateway (and from the other peers) only in how it answers a caption.

A stand-in answers ``POST /v1/captions`` (a multipart ``image``), ``GET /health`` (the bench waits for
it) and an empty ``GET /metrics`` (the bench reads step rows there; a stand-in keeps none), takes
``--repo`` (the bench passes it to every server), ``--host`` and ``--port``, and runs under uvicorn:

- ``per_request_app``: the FastAPI app a user would write around their own captioner — a plain ``def``
  route (FastAPI's thread pool), one request at a time (a lock around the model) — the torch and the
  transformers peers;
- ``STAND_IN_ROUTES`` alone on a bare Starlette app: the HTTP floor, whose caption route does the least
  any server must (``quiet``: no logging at all).
"""

from __future__ import annotations

import argparse
import io
import threading
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import FastAPI, File, HTTPException, Query, UploadFile
from PIL import Image
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

Prepared = TypeVar("Prepared")
Found = TypeVar("Found")


async def _health(_: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def _metrics(_: Request) -> Response:  # the bench reads step rows here; a stand-in keeps none
    return PlainTextResponse("")


STAND_IN_ROUTES = (Route("/health", _health), Route("/metrics", _metrics))


def per_request_app(
    title: str,
    prepare: Callable[[Image.Image, int, int], Prepared],
    caption: Callable[[Prepared, int, int], Found],
    respond: Callable[[Found, int], dict[str, Any]],
) -> FastAPI:
    """POST /v1/captions as a user would write it around a captioner: the upload decoded (400 when it is
    not an image), ``prepare(picture, beam_size, n_best)`` (may raise an ``HTTPException``), ``caption(
    prepared, beam_size, n_best)`` under the lock, one request at a time, and ``respond(found, n_best)``
    the JSON answer. Only the lock's part is serialised."""
    app = FastAPI(title=title, routes=list(STAND_IN_ROUTES))
    lock = threading.Lock()

    @app.post("/v1/captions")
    def captions(
        image: Annotated[UploadFile, File()],
        beam_size: Annotated[int, Query(ge=1, le=100)] = 5,
        n_best: Annotated[int, Query(ge=1, le=100)] = 1,
        model: str | None = None,
        rerank: str | None = None,
    ) -> dict[str, Any]:
        try:
            picture = Image.open(io.BytesIO(image.file.read())).convert("RGB")
        except Exception as exc:
            raise HTTPException(400, f"image: not a decodable image ({exc})") from None
        prepared = prepare(picture, beam_size, n_best)
        with lock:  # one request at a time
            found = caption(prepared, beam_size, n_best)
        return respond(found, n_best)

    return app


def server_parser(prog: str, description: str | None, port: int) -> argparse.ArgumentParser:
    """A stand-in's command line: ``--host`` and ``--port`` (the peer adds its own, ``--repo`` among
    them)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=port)
    return parser


def serve(app: Starlette, args: argparse.Namespace, quiet: bool = False) -> int:
    """Run ``app`` under uvicorn on ``args.host``:``args.port`` until stopped; warnings only, and with
    ``quiet`` no logging set up and no access log at all (the floor: nothing beyond the least work)."""
    import uvicorn

    options: dict[str, Any] = {"log_config": None, "access_log": False} if quiet else {}
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", **options)
    return 0


__all__ = ["STAND_IN_ROUTES", "per_request_app", "serve", "server_parser"]
