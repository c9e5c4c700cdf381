"""Single-client latency of ``POST /v1/captions`` against a running gateway: p50/p99 over N sequential
requests of one image. ``python -m loadtests.load.latency --url http://127.0.0.1:8080 --requests 200``."""

from __future__ import annotations

import argparse
import io
import json
import time
from collections.abc import Sequence

import httpx
import numpy as np
from PIL import Image


def sample_png(seed: int = 0, size: int = 96) -> bytes:
    """A SceneWorld-like test image if export is importable, else a random one."""
    try:
        from sceneworld.dataset import generate

        images, _, _ = generate(1, seed=seed + 104729, image_size=size)
        array = images[0]
    except ImportError:
        array = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def measure(url: str, requests: int, warmup: int, params: dict[str, str]) -> dict[str, object]:
    png = sample_png()
    latencies: list[float] = []
    server_total: list[float] = []
    with httpx.Client(base_url=url, timeout=30.0) as client:
        for i in range(warmup + requests):
            start = time.perf_counter()
            response = client.post(
                "/v1/captions", params=params, files={"image": ("x.png", png, "image/png")}
            )
            elapsed = (time.perf_counter() - start) * 1000
            response.raise_for_status()
            if i >= warmup:
                latencies.append(elapsed)
                server_total.append(float(response.json()["timings_ms"]["total"]))
    return {
        "url": url,
        "params": params,
        "requests": requests,
        "p50_ms": round(percentile(latencies, 50), 2),
        "p99_ms": round(percentile(latencies, 99), 2),
        "mean_ms": round(float(np.mean(latencies)), 2),
        "server_p50_ms": round(percentile(server_total, 50), 2),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--beam-size", default="5")
    parser.add_argument("--rerank", default=None, help="ranker name or 'false' (default: the model's own)")
    args = parser.parse_args(argv)
    params = {"beam_size": args.beam_size}
    if args.rerank is not None:
        params["rerank"] = args.rerank
    print(json.dumps(measure(args.url, args.requests, args.warmup, params), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
