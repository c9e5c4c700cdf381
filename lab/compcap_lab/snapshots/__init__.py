"""Random-weight Hugging Face snapshots, written with ``save_pretrained`` and nothing downloaded: the real
``transformers`` modules of chosen configs, tokenizers trained with ``tokenizers`` on a few sentences
(``tokenizer``), image processors of the model's size. One module per architecture — ``vit_gpt2``
(``VisionEncoderDecoderModel``: ViT + GPT-2 with cross-attention), ``blip``, ``git``, ``clip`` — each with
``build(out, size, ...)`` (writes the snapshot, returns ``out``), ``describe(out)`` (what a written one is:
its parameters and sizes) and ``SIZES``, its presets: ``"tiny"`` (32 wide, 2 + 2 layers: the tests', whose
captions they pin, and the GPU check's emulation) and, for ViT + GPT-2 and BLIP, ``"real"``
(nlpconnect/vit-gpt2-image-captioning's and Salesforce/blip-image-captioning-base's sizes: the GPU check's
real stage, ``compcap_lab.steps.forms`` and the real-size benchmarks). Seeded, so a size and seed make the
same bytes on every run (GIT's tiny tokenizer apart: see ``tokenizer.git_wordpiece``).

Run: ``python -m compcap_lab.snapshots {vit-gpt2,blip,git,clip} OUT [--size tiny|real] [--max-length N]``
(real size where the architecture has one)."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

# the tiny size's towers: 32 wide, 2 layers of 4 heads (ViT's, BLIP's, GIT's and CLIP's argument names)
TINY = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}


def parameters(out: Path) -> int:
    """The parameters of the snapshot in ``out``: the elements of its safetensors files' tensors, read from
    their headers (tied weights are written once, as ``model.parameters()`` counts them)."""
    total = 0
    for path in sorted(out.glob("*.safetensors")):
        with path.open("rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
        total += sum(math.prod(t["shape"]) for name, t in header.items() if name != "__metadata__")
    return total


def tower(config: Any, image: bool) -> dict[str, Any]:
    """A tower's width and depth (a ``transformers`` config of one), and its image size (a vision tower)
    or its vocabulary (a text one), for ``describe``."""
    last = ("image", config.image_size) if image else ("vocab", config.vocab_size)
    return {"hidden": config.hidden_size, "layers": config.num_hidden_layers, last[0]: last[1]}
