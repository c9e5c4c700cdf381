"""A random-weight ``BlipForConditionalGeneration`` snapshot: a vision transformer of patch 16, a
BERT-style text decoder with cross-attention to it, the ``blip_wordpiece`` tokenizer, a
``BlipImageProcessor`` of the vision tower's size. Token ids in BLIP's layout: ``bos`` ``[DEC]``, ``sep``
``[SEP]`` (the end of a caption), ``pad`` ``[PAD]``, and an ``eos_token_id`` that generate() never uses as
the end (``[CLS]``, as BLIP's 2). Like BLIP's own snapshots it sets no generation settings: BLIP's
generate() reads the text decoder's (20 new tokens).

Sizes: ``"tiny"`` — 32 wide, 2 + 2 layers, 64-pixel images, the tokenizer's learnt pieces; the weights are
drawn wider than BLIP's defaults (whose vision weights start at 1e-10) so that images differ and random
captions are words rather than near-ties, and ``[SEP]``'s output bias is raised by ``end_bias`` 2 so that
captions end before generate's 20 tokens now and then (about half the greedy ones). ``"real"`` —
Salesforce/blip-image-captioning-base's: ``BlipVisionConfig()`` (ViT-B/16 at 384 × 384 pixels, 577
states) and ``BlipTextConfig()`` (a 12-layer BERT-base decoder), the tokenizer padded to 30 524 tokens,
BLIP's initialisation."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compcap_lab.snapshots import TINY, parameters, tower
from compcap_lab.snapshots.tokenizer import BLIP_VOCAB, blip_wordpiece


@dataclass(frozen=True)
class Size:
    vision: dict[str, Any]  # BlipVisionConfig's arguments but the image size (none: BLIP-base's)
    text: dict[str, Any]  # BlipTextConfig's but the vocabulary and the token ids
    config: dict[str, Any]  # BlipConfig's
    image_size: int
    vocab: int | None  # the tokenizer padded to this many tokens; None: the pieces it learns
    end_bias: float  # added to [SEP]'s output bias


SIZES = {
    "tiny": Size(
        vision={**TINY, "patch_size": 16, "initializer_range": 0.3},
        text={**TINY, "encoder_hidden_size": 32, "max_position_embeddings": 64, "initializer_range": 0.25},
        config={"initializer_range": 0.25},
        image_size=64,
        vocab=None,
        end_bias=2.0,
    ),
    "real": Size(vision={}, text={}, config={}, image_size=384, vocab=BLIP_VOCAB, end_bias=0.0),
}


def build(
    out: Path,
    size: str = "tiny",
    *,
    image_size: int | None = None,
    seed: int = 0,
    end_bias: float | None = None,
) -> Path:
    """Write the snapshot of ``size`` (a key of ``SIZES``; ``image_size`` and ``end_bias`` replace the
    size's) into ``out``, the weights from torch's initialisation seeded with ``seed``; return ``out``."""
    import torch
    from transformers import (
        BlipConfig,
        BlipForConditionalGeneration,
        BlipImageProcessor,
        BlipTextConfig,
        BlipVisionConfig,
    )

    preset = SIZES[size]
    image = preset.image_size if image_size is None else image_size
    bias = preset.end_bias if end_bias is None else end_bias
    tokenizer = blip_wordpiece(preset.vocab)
    vocab = tokenizer.get_vocab()
    vision = BlipVisionConfig(**preset.vision, image_size=image)
    text = BlipTextConfig(
        vocab_size=len(tokenizer), **preset.text, bos_token_id=vocab["[DEC]"], eos_token_id=vocab["[CLS]"],
        pad_token_id=vocab["[PAD]"], sep_token_id=vocab["[SEP]"],
    )  # fmt: skip
    torch.manual_seed(seed)
    config = BlipConfig(text_config=text.to_dict(), vision_config=vision.to_dict(), **preset.config)
    model = BlipForConditionalGeneration(config).eval()
    if bias:
        with torch.no_grad():
            model.text_decoder.cls.predictions.bias[vocab["[SEP]"]] += bias
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    BlipImageProcessor(size={"height": image, "width": image}).save_pretrained(out)
    return out


def describe(out: Path) -> dict[str, Any]:
    """What the snapshot in ``out`` is, for a report: parameters, the vision tower's and text decoder's
    sizes."""
    from transformers import BlipConfig

    config: Any = BlipConfig.from_pretrained(out)  # sub-configs: typed loosely
    vision, text = config.vision_config, config.text_config
    return {
        "parameters": parameters(out),
        "vision": tower(vision, image=True),
        "text": tower(text, image=False),
    }
