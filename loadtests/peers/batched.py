"""The offline peer of ``compcap bench --baseline transformers``: what a user gets from their own
captioner without any server — the bench's images in batches of ``--batch`` through the snapshot's image
processor, ``generate(num_beams=…)`` and the tokenizer, for at least ``--seconds`` (whole batches), in one
process with torch's default threads. ``--runtime optimum`` runs Optimum's ONNX Runtime model
(``ORTModelForVision2Seq``) instead, from an export of the snapshot (``--onnx DIR``: what ``optimum-cli
export onnx --task image-to-text-with-past`` wrote); Optimum pins an older ``transformers``, so it runs in
a virtual environment of its own (``make optimum-venv``).

Prints one JSON line: captions/s, the cores the process kept busy (its CPU time over the wall time of the
timed batches) and its peak memory (``VmHWM``, MB). It imports nothing of CompCap, so that it runs in any
environment with ``numpy``, ``PIL`` and ``transformers``: its images come from ``--images`` (uint8 [N, H, W,
3] in a ``.npy`` file: the bench writes the gateway's own).

Run: ``python -m loadtests.peers.batched --snapshot DIR --images images.npy --batch 8 --seconds 20``.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, MB (``VmHWM``; ``ru_maxrss`` where /proc is not)."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def load(snapshot: Path, runtime: str, onnx: Path | None) -> tuple[Any, Any, Any]:
    """(model, image processor, tokenizer) of ``snapshot``, offline: transformers' model or Optimum's."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoImageProcessor, PreTrainedTokenizerFast

    if runtime == "optimum":
        from optimum.onnxruntime import ORTModelForVision2Seq

        if onnx is None:
            raise SystemExit("--runtime optimum needs --onnx DIR (optimum-cli export onnx's output)")
        model: Any = ORTModelForVision2Seq.from_pretrained(str(onnx), local_files_only=True, use_cache=True)
    else:
        import json

        import transformers

        kind = json.loads((snapshot / "config.json").read_text(encoding="utf-8")).get("model_type")
        name = "BlipForConditionalGeneration" if kind == "blip" else "VisionEncoderDecoderModel"
        model = getattr(transformers, name).from_pretrained(str(snapshot), local_files_only=True).eval()
    processor = AutoImageProcessor.from_pretrained(str(snapshot), local_files_only=True)
    # the tokenizer decodes only: read from tokenizer.json itself (a snapshot saved by transformers 5 names
    # a tokenizer class that Optimum's transformers 4.57 does not have)
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(snapshot / "tokenizer.json"))
    return model, processor, tokenizer


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from PIL import Image

    model, processor, tokenizer = load(args.snapshot, args.runtime, args.onnx)
    pictures = [Image.fromarray(x) for x in np.load(args.images)]

    def batch(k: int) -> int:
        chosen = [pictures[(k * args.batch + i) % len(pictures)] for i in range(args.batch)]
        pixels = processor(images=chosen, return_tensors="pt").pixel_values
        with torch.no_grad():
            out = model.generate(pixel_values=pixels, num_beams=args.beam_size, do_sample=False)
        return len(tokenizer.batch_decode(out, skip_special_tokens=True))

    batch(0)  # first call: allocations and the session's own start, not the peer's speed
    cpu0, start, captions, k = time.process_time(), time.perf_counter(), 0, 1
    while captions == 0 or time.perf_counter() - start < args.seconds:
        captions += batch(k)
        k += 1
    wall = time.perf_counter() - start
    return {
        "runtime": args.runtime,
        "batch": args.batch,
        "captions": captions,
        "captions_per_s": round(captions / wall, 3),
        "cores_used": round((time.process_time() - cpu0) / wall, 3),
        "peak_rss_mb": peak_rss_mb(),
        "torch_threads": torch.get_num_threads(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.peers.batched", description=__doc__)
    parser.add_argument("--snapshot", type=Path, required=True, help="the transformers snapshot directory")
    parser.add_argument("--runtime", choices=("transformers", "optimum"), default="transformers")
    parser.add_argument("--onnx", type=Path, default=None, help="--runtime optimum: the exported model")
    parser.add_argument("--batch", type=int, default=8, help="images per generate() call")
    parser.add_argument("--seconds", type=float, default=20.0, help="at least this long, whole batches")
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--images", type=Path, required=True, help="the images: uint8 [N, H, W, 3], .npy")
    args = parser.parse_args(argv)
    print(json.dumps(measure(args)), flush=True)
    return 0


__all__ = ["main", "measure", "peak_rss_mb"]

if __name__ == "__main__":
    raise SystemExit(main())
