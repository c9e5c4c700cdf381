"""The peer baseline of ``compcap bench --baseline transformers``: what a user gets by putting their own
``transformers`` captioner behind a plain FastAPI route instead of importing it into CompCap.

transformers 5 folds the ``image-to-text`` pipeline into ``image-text-to-text``, which needs a
``ProcessorMixin`` that a ``VisionEncoderDecoderModel`` snapshot does not carry; so the route runs the
pipeline's own three steps on the same snapshot: the image processor, ``model.generate(num_beams=…)``,
the tokenizer's decoding. One request at a time (a lock around the model: ``generate`` is not made to
run concurrently), a plain ``def`` route (FastAPI's thread pool), torch's default threads, as a user's
would be. Loaded offline from the snapshot directory, on the device CompCap's gateway would use
(``--device``, default ``COMPCAP_DEVICE``: auto is CUDA where torch has it) and in its precision
(``--dtype``, default fp16 where ``COMPCAP_PRECISION=fp16`` and the device is CUDA, else fp32), so that
``compcap bench --baseline transformers`` compares the two on the same GPU.

Run: ``python -m loadtests.peers.transformers_baseline --snapshot DIR --port 8100``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException
from PIL import Image

from loadtests.peers.stand_in import per_request_app, serve, server_parser


class TransformersCaptioner:
    """A snapshot's model, image processor and tokenizer, captioning one image per call."""

    def __init__(self, snapshot: Path, device: str = "cpu", dtype: str = "fp32") -> None:
        import torch

        from export.hf.snapshot import offline

        if dtype not in ("fp32", "fp16"):
            raise ValueError(f"dtype must be fp32 or fp16, got {dtype!r}")
        self.device, self.dtype = device, torch.float16 if dtype == "fp16" else torch.float32
        with offline():
            from transformers import AutoImageProcessor, AutoTokenizer

            path = str(snapshot)
            model = captioner_class(snapshot).from_pretrained(path, local_files_only=True).eval()
            self.model = model.to(device=device, dtype=self.dtype)
            self.processor = AutoImageProcessor.from_pretrained(path, local_files_only=True)
            self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)

    def caption(self, picture: Image.Image, beam_size: int, n_best: int) -> list[str]:
        import torch

        pixels = self.processor(images=picture, return_tensors="pt").pixel_values
        pixels = pixels.to(device=self.device, dtype=self.dtype)
        with torch.no_grad():
            out = self.model.generate(
                pixel_values=pixels, num_beams=beam_size, num_return_sequences=n_best, do_sample=False
            )
        return [str(t).strip() for t in self.tokenizer.batch_decode(out, skip_special_tokens=True)]


def captioner_class(snapshot: Path) -> Any:
    """The transformers class of the captioner snapshot ``snapshot`` (its ``config.json``'s
    ``model_type``): ``BlipForConditionalGeneration`` for BLIP, ``VisionEncoderDecoderModel`` (e.g. ViT +
    GPT-2) for the rest."""
    import json

    config = json.loads((Path(snapshot) / "config.json").read_text(encoding="utf-8"))
    if config.get("model_type") == "blip":
        from transformers import BlipForConditionalGeneration

        return BlipForConditionalGeneration
    from transformers import VisionEncoderDecoderModel

    return VisionEncoderDecoderModel


def create_app(captioner: TransformersCaptioner) -> FastAPI:
    """The FastAPI app a user would write around ``captioner``: POST /v1/captions (multipart ``image``)."""

    def prepare(picture: Image.Image, beam_size: int, n_best: int) -> Image.Image:
        if n_best > beam_size:
            raise HTTPException(422, "n_best must be <= beam_size")
        return picture

    return per_request_app(
        "transformers per-request baseline",
        prepare=prepare,
        caption=captioner.caption,
        respond=lambda found, _n: {"captions": [{"caption": text} for text in found]},
    )


def peer_device(device: str, dtype: str, precision: str) -> tuple[str, str]:
    """(torch device, fp32|fp16) of the peer: ``device`` auto is CUDA where torch has it; ``dtype`` auto
    is fp16 on CUDA where CompCap serves ``precision`` fp16, else fp32 (torch's CPU kernels in FP16 are
    not what a user would run)."""
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if dtype == "auto":
        dtype = "fp16" if device == "cuda" and precision == "fp16" else "fp32"
    return device, dtype


def main(argv: list[str] | None = None) -> int:
    parser = server_parser("python -m loadtests.peers.transformers_baseline", __doc__, port=8100)
    parser.add_argument("--snapshot", required=True, help="the transformers snapshot directory")
    parser.add_argument("--repo", default=None, help="ignored (the bench passes it to every server)")
    parser.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default=os.environ.get("COMPCAP_DEVICE", "auto")
    )
    parser.add_argument("--dtype", choices=("auto", "fp32", "fp16"), default="auto")
    parser.add_argument(
        "--precision",
        default=os.environ.get("COMPCAP_PRECISION", "fp32"),
        help="CompCap's precision being compared: --dtype auto is fp16 on CUDA for fp16",
    )
    args = parser.parse_args(argv)
    device, dtype = peer_device(args.device, args.dtype, args.precision)
    print(f"transformers peer on {device} ({dtype})", flush=True)
    return serve(create_app(TransformersCaptioner(Path(args.snapshot), device, dtype)), args)


__all__ = ["TransformersCaptioner", "captioner_class", "create_app", "main", "peer_device"]

if __name__ == "__main__":
    raise SystemExit(main())
