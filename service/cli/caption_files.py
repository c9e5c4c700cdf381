"""``compcap caption IMAGE…``: one-off captions of local image files, one line per image
(``path: caption``), and a warning on stderr for an image unlike those the captioner was made for (the
API's ``in_domain`` false); ``--json`` prints the API's answer instead, one JSON object per image. Without
``--url`` the engine runs in this process on a repository (``--repo``, default ``model_repo``); with
``--url`` each image is posted to a running gateway's ``/v1/captions``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from service.cli.errors import FAILURE, UsageError

MAX_BYTES = 256 * 1024 * 1024  # local files: generous bounds, the gateway's are for uploads
MAX_PIXELS = 100_000_000
FLAGS = {"model": "--model", "beam_size": "--beam-size", "rerank": "--rerank"}


def caption_files(args: argparse.Namespace) -> int:
    paths = list(args.images)
    options = {"model": args.model, "beam_size": args.beam_size, "rerank": args.rerank}
    options = {name: value for name, value in options.items() if value is not None}
    as_json = bool(getattr(args, "json", False))
    if args.url:
        return caption_remote(args.url, paths, options, args.api_key, as_json)
    for path, answer in zip(
        paths, caption_local(Path(args.repo or "model_repo"), paths, options), strict=True
    ):
        show(path, answer, as_json)
    return 0


def show(path: str, answer: dict[str, Any], as_json: bool) -> None:
    """One image's answer (the API's ``CaptionResponse`` as JSON data): the JSON itself, or ``path:
    caption`` with a warning on stderr when the image is out of domain."""
    if as_json:
        print(json.dumps(answer), flush=True)
        return
    results = answer["results"]
    print(f"{path}: {results[0]['caption'] if results else ''}", flush=True)
    if results and results[0].get("in_domain") is False:
        score = results[0].get("domain_score")
        print(
            f"compcap caption: warning: {path} is unlike the images {answer['model']} was made for "
            f"(domain score {score}, in domain <= 1): its caption may mean little",
            file=sys.stderr,
            flush=True,
        )


def caption_local(repo: Path, paths: Sequence[str], options: dict[str, Any]) -> list[dict[str, Any]]:
    """The API's answer for each file (one image each), decoded in this process on ``repo``."""
    import asyncio

    import numpy as np

    from service.engine.engine import CaptionEngine
    from service.engine.params import EngineError
    from service.engine.request import Priority
    from service.images.decode import ImageError, decode_image
    from service.manifest import MANIFEST_NAME, load_manifest

    if not (repo / MANIFEST_NAME).is_file():
        raise UsageError(f"--repo {repo}: not a model repository (no {MANIFEST_NAME}); give --repo or --url")
    manifest = load_manifest(repo)
    h, w = manifest.image.height, manifest.image.width
    try:  # every file decoded before the models load: a bad one is refused at once
        images = np.stack(
            [
                decode_image(Path(p).read_bytes(), h, w, max_bytes=MAX_BYTES, max_pixels=MAX_PIXELS, label=p)
                for p in paths
            ]
        )
    except ImageError as exc:
        raise UsageError(exc.message) from None

    from service.gateway.shape import caption_response

    async def run() -> list[dict[str, Any]]:
        async with await CaptionEngine.from_repo(repo) as engine:
            try:
                params = engine.resolve(**options)
            except EngineError as exc:
                raise UsageError(f"{FLAGS.get(exc.field, exc.field)}: {exc.message}") from None

            async def one(i: int) -> dict[str, Any]:
                start = time.perf_counter()
                out = await engine.caption(
                    images[i : i + 1], params, timeout_s=3600.0, priority=Priority.USER
                )
                ms = (time.perf_counter() - start) * 1e3
                answer: dict[str, Any] = caption_response(out, None, 0.0, ms).model_dump(mode="json")
                return answer

            return list(await asyncio.gather(*(one(i) for i in range(len(images)))))

    return asyncio.run(run())


def caption_remote(
    url: str, paths: Sequence[str], options: dict[str, Any], api_key: str | None, as_json: bool = False
) -> int:
    """Post each file to the gateway at ``url`` and print each answer as it comes (``show``)."""
    import httpx

    query = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in options.items()}
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with httpx.Client(base_url=url, headers=headers, timeout=httpx.Timeout(60.0, connect=5.0)) as client:
        for path in paths:
            files = [("image", (Path(path).name, Path(path).read_bytes(), "application/octet-stream"))]
            try:
                response = client.post("/v1/captions", params=query, files=files)
            except httpx.TransportError as exc:
                print(f"compcap caption: --url {url}: {exc or type(exc).__name__}", file=sys.stderr)
                return FAILURE
            if response.status_code >= 500:  # the gateway's failure, not the user's
                print(f"compcap caption: {_answer(url, path, response)}", file=sys.stderr)
                return FAILURE
            if response.status_code >= 400:
                raise UsageError(_answer(url, path, response))
            show(path, response.json(), as_json)
    return 0


def _answer(url: str, path: str, response: Any) -> str:
    try:
        message = str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        message = response.text[:200]
    return f"the gateway at {url} answered {response.status_code} for {path}: {message}"


__all__ = ["caption_files", "caption_local", "caption_remote"]
