"""Cost of serving through the local Triton: start-up time, and the per-call latency of ``<cap>_step`` and
``visual_encoder`` over gRPC (``TritonBackend``, tensors in the payload or in system shared memory) against
onnxruntime in-process (``OnnxRuntimeBackend``), all with one intra-op thread.
``python -m compcap_lab.steps.triton_overhead --repo model_repo --calls 200``."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from service.backends.onnxruntime.backend import OnnxRuntimeBackend
from service.backends.triton.backend import TritonBackend
from service.engine.state_rows import state_feed
from service.manifest import Manifest, load_manifest
from service.tritonlocal.server import LocalTriton


async def step_inputs(
    manifest: Manifest, ort: OnnxRuntimeBackend, images: int, beam: int
) -> dict[str, np.ndarray]:
    cap = manifest.captioner(manifest.default_captioner)
    encoder = manifest.model("visual_encoder")
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (images, *encoder.inputs[0].dims), dtype=np.uint8)
    regions = (await ort.infer("visual_encoder", {"image": pixels}))["regions"]
    init = await ort.infer(cap.init, {"regions": regions})
    rows = images * beam
    index = np.repeat(np.arange(images), beam).astype(np.int64)
    tokens = rng.integers(4, manifest.vocabulary.size, (rows, 4)).astype(np.int64)
    tokens[:, 0] = manifest.vocabulary.bos_id
    return {
        "memory": init["memory"],
        "image_index": index,
        "tokens": tokens,
        "length": np.full(rows, 4, dtype=np.int64),
        **state_feed(init["state"][index], manifest.model(cap.step).gathers_state),
    }


async def timed(backend: Any, model: str, inputs: dict[str, np.ndarray], calls: int) -> list[float]:
    for _ in range(max(5, calls // 10)):
        await backend.infer(model, inputs)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        await backend.infer(model, inputs)
        times.append((time.perf_counter() - start) * 1000)
    return times


def p50(values: Sequence[float]) -> float:
    return round(float(np.percentile(values, 50)), 3)


def run(repo: Path, calls: int, images: Sequence[int], beam: int) -> dict[str, Any]:
    manifest = load_manifest(repo)
    cap = manifest.captioner(manifest.default_captioner)
    ort = OnnxRuntimeBackend(repo, manifest, threads=1)
    server = LocalTriton(repo, intra_op_threads=1)
    report: dict[str, Any] = {"repo": str(repo), "calls": calls, "beam": beam}
    try:
        start = time.perf_counter()
        server.start()
        server.wait_ready()
        report["start_to_ready_s"] = round(time.perf_counter() - start, 2)

        async def measure() -> list[dict[str, Any]]:
            triton = await TritonBackend.connect(server.grpc_url, manifest)
            shared = await TritonBackend.connect(server.grpc_url, manifest, shared_memory=True)
            backends = (("onnxruntime", ort), ("triton", triton), ("triton+shm", shared))
            rows = []
            try:
                encoder_in = {
                    "image": np.zeros((1, *manifest.model("visual_encoder").inputs[0].dims), np.uint8)
                }
                for name, backend in backends:
                    ms = await timed(backend, "visual_encoder", encoder_in, calls)
                    rows.append({"model": "visual_encoder", "images": 1, "backend": name, "p50_ms": p50(ms)})
                for n in images:
                    inputs = await step_inputs(manifest, ort, n, beam)
                    mbytes = sum(v.nbytes for v in inputs.values()) / 1e6
                    for name, backend in backends:
                        ms = await timed(backend, cap.step, inputs, calls)
                        rows.append(
                            {
                                "model": cap.step,
                                "images": n,
                                "rows": n * beam,
                                "input_mb": round(mbytes, 3),
                                "backend": name,
                                "p50_ms": p50(ms),
                            }
                        )
            finally:
                await triton.close()
                await shared.close()
            return rows

        report["results"] = asyncio.run(measure())
    finally:
        server.stop()
        asyncio.run(ort.close())
    return report


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repo", default="model_repo")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--images", default="1,8,32,128", help="images per step call (rows = images * beam)")
    parser.add_argument("--beam", type=int, default=5)
    args = parser.parse_args(argv)
    images = [int(n) for n in args.images.split(",")]
    report = run(Path(args.repo), args.calls, images, args.beam)
    print(json.dumps(report, indent=2))
    for row in report["results"]:
        print(
            f"{row['model']:>16} images={row['images']:>4} {row['backend']:>12} p50 {row['p50_ms']:8.3f} ms"
        )


if __name__ == "__main__":
    main()
