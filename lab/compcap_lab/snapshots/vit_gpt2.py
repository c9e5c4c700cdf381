"""A random-weight ``VisionEncoderDecoderModel`` snapshot: a ViT encoder and a GPT-2 decoder with
cross-attention, the ``bpe`` tokenizer (``<|endoftext|>``, id 0, starts and ends a caption; ``<pad>``, id
1, pads), a ``ViTImageProcessor`` of the encoder's image size.

Sizes: ``"tiny"`` — 32 wide, 2 + 2 layers, 96-pixel images, the 120 tokens the tokenizer learns, the
decoder's weights drawn wider than GPT-2's default (initializer range 0.3) so that its random captions are
words, not near-ties, and end before ``max_length`` now and then; generation ``max_length`` 12 (the tests';
the GPU check's emulation asks 16). ``"real"`` — nlpconnect/vit-gpt2-image-captioning's: ``ViTConfig()``
and ``GPT2Config(add_cross_attention=True)`` defaults (12 + 12 layers, 768 wide, 224 × 224 images in
16 × 16 patches, 239 M parameters), the tokenizer padded to GPT-2's 50 257 tokens, GPT-2's initialisation,
``max_length`` 16 (the start token and 15 tokens: random weights rarely end a caption early, so every
caption runs to it, the worst case)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compcap_lab.snapshots import TINY, parameters, tower
from compcap_lab.snapshots.tokenizer import GPT2_VOCAB, bpe, trained_tokens


@dataclass(frozen=True)
class Size:
    encoder: dict[str, Any]  # ViTConfig's arguments but the image size (none: ViT-base's defaults)
    decoder: dict[str, Any]  # GPT2Config's but the vocabulary and the token ids (none: GPT-2's)
    image_size: int
    vocab: int | None  # the tokenizer padded to this many tokens; None: the 120 it learns
    max_length: int  # generate's


SIZES = {
    "tiny": Size(
        encoder={**TINY, "patch_size": 16},
        decoder={"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64, "initializer_range": 0.3},
        image_size=96,
        vocab=None,
        max_length=12,
    ),
    "real": Size(encoder={}, decoder={}, image_size=224, vocab=GPT2_VOCAB, max_length=16),
}


def build(
    out: Path,
    size: str = "tiny",
    *,
    image_size: int | None = None,
    seed: int = 0,
    max_length: int | None = None,
) -> Path:
    """Write the snapshot of ``size`` (a key of ``SIZES``; ``image_size`` and ``max_length`` replace the
    size's) into ``out``, the weights from torch's initialisation seeded with ``seed``; return ``out``."""
    import torch
    from transformers import (
        GPT2Config,
        VisionEncoderDecoderConfig,
        VisionEncoderDecoderModel,
        ViTConfig,
        ViTImageProcessor,
    )

    preset = SIZES[size]
    image = preset.image_size if image_size is None else image_size
    tokenizer = bpe(preset.vocab)
    encoder = ViTConfig(**preset.encoder, image_size=image)
    decoder = GPT2Config(
        vocab_size=len(tokenizer), **preset.decoder, add_cross_attention=True, bos_token_id=0, eos_token_id=0,
        pad_token_id=1,
    )  # fmt: skip
    torch.manual_seed(seed)
    config = VisionEncoderDecoderConfig.from_encoder_decoder_configs(encoder, decoder)
    config.decoder_start_token_id, config.pad_token_id, config.eos_token_id = 0, 1, 0
    model = VisionEncoderDecoderModel(config).eval()
    gen = model.generation_config
    gen.decoder_start_token_id, gen.pad_token_id, gen.eos_token_id = 0, 1, 0
    gen.max_length = preset.max_length if max_length is None else max_length
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    ViTImageProcessor(size={"height": image, "width": image}).save_pretrained(out)
    return out


def describe(out: Path) -> dict[str, Any]:
    """What the snapshot in ``out`` is, for a report: parameters, the encoder's and decoder's sizes, the
    tokens its tokenizer learnt (not padding), generate's ``max_length``."""
    from transformers import GenerationConfig, VisionEncoderDecoderConfig

    config: Any = VisionEncoderDecoderConfig.from_pretrained(out)  # sub-configs: typed loosely
    return {
        "parameters": parameters(out),
        "encoder": tower(config.encoder, image=True),
        "decoder": tower(config.decoder, image=False),  # GPT-2's n_embd and n_layer by their common names
        "tokenizer_trained_tokens": trained_tokens(out),
        "max_length": GenerationConfig.from_pretrained(out).max_length,
    }
