"""A random-weight ``VisionEncoderDecoderModel`` (ViT + GPT-2 with cross-attention) snapshot for
``scripts/gpu_check.py`` stage 4: at the size of nlpconnect/vit-gpt2-image-captioning (``real_size``:
``ViTConfig()`` and ``GPT2Config(add_cross_attention=True)`` defaults — 12 + 12 layers, 768 wide, 224 ×
224 images in 16 × 16 patches, 50 257 tokens) or tiny (the emulation's). Nothing is downloaded: the
tokenizer is a byte-free BPE trained with ``tokenizers`` on a few sentences (as the tests' tiny
snapshots), its vocabulary padded with unused tokens to the model's size, so that the real-size model
has GPT-2's 50 257 output rows; the weights are random (torch's seeded initialisation)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from service.checks import at_least

GPT2_VOCAB = 50257
SENTENCES = [
    "a red bus on the street",
    "a black cat sitting on a sofa",
    "two dogs playing in the grass",
    "a man riding a brown horse",
    "a plate of food on a wooden table",
    "a small child holding a kite",
    "a white boat on the water",
]
FILLER = "▁unused{:05d}"  # a padding token: a vocabulary entry no merge produces


def padded_tokenizer(size: int, trained: int = 120) -> Any:
    """A ``PreTrainedTokenizerFast`` of exactly ``size`` tokens: BPE over SentencePiece-style pieces
    (``▁`` marks a word's start) trained to ``trained`` tokens, then padded with ``FILLER`` entries (valid
    ids that decode to a word, never produced by encoding). ``<|endoftext|>`` (id 0) starts and ends a
    caption, ``<pad>`` (id 1) pads, ``<unk>`` (id 2)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    at_least(3, size=size)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=min(trained, size), special_tokens=["<|endoftext|>", "<pad>", "<unk>"]
    )
    tok.train_from_iterator(SENTENCES * 4, trainer)
    spec = json.loads(tok.to_str())
    vocab: dict[str, int] = spec["model"]["vocab"]
    k = 0
    while len(vocab) < size:
        name = FILLER.format(k)
        k += 1
        if name not in vocab:
            vocab[name] = len(vocab)
    padded = Tokenizer.from_str(json.dumps(spec))
    if padded.get_vocab_size() != size:
        raise RuntimeError(f"the padded tokenizer has {padded.get_vocab_size()} tokens, not {size}")
    return PreTrainedTokenizerFast(
        tokenizer_object=padded,
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<pad>",
        unk_token="<unk>",
    )


def vit_gpt2_snapshot(out: Path, real_size: bool, seed: int = 0, max_length: int = 16) -> dict[str, Any]:
    """Write the snapshot into ``out`` (``save_pretrained`` of the model, tokenizer and image processor);
    return what it is (sizes, parameters) for the report. Real size: the configs' defaults, GPT-2's
    initialisation, generation ``max_length`` 16 (the start token and 15 tokens: random weights rarely
    end a caption early, so every caption runs to it, the worst case). Tiny: 32 wide, 2 + 2 layers,
    96-pixel images, 120 tokens, wider initialisation (its random captions are words that end)."""
    import torch
    from transformers import (
        GPT2Config,
        VisionEncoderDecoderConfig,
        VisionEncoderDecoderModel,
        ViTConfig,
        ViTImageProcessor,
    )

    if real_size:
        tokenizer = padded_tokenizer(GPT2_VOCAB)
        size = 224
        encoder = ViTConfig()  # hidden 768, 12 layers, 12 heads, image 224, patch 16
        decoder = GPT2Config(  # vocab 50257, 768 wide, 12 layers
            add_cross_attention=True, bos_token_id=0, eos_token_id=0, pad_token_id=1
        )
    else:
        tokenizer = padded_tokenizer(120)
        size = 96
        encoder = ViTConfig(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            image_size=size,
            patch_size=16,
        )
        decoder = GPT2Config(
            vocab_size=len(tokenizer),
            n_embd=32,
            n_layer=2,
            n_head=4,
            n_positions=64,
            add_cross_attention=True,
            initializer_range=0.3,
            bos_token_id=0,
            eos_token_id=0,
            pad_token_id=1,
        )
    if decoder.vocab_size != len(tokenizer):
        raise RuntimeError(f"decoder vocabulary {decoder.vocab_size} != tokenizer {len(tokenizer)}")
    torch.manual_seed(seed)
    config = VisionEncoderDecoderConfig.from_encoder_decoder_configs(encoder, decoder)
    config.decoder_start_token_id, config.pad_token_id, config.eos_token_id = 0, 1, 0
    model = VisionEncoderDecoderModel(config).eval()
    gen = model.generation_config
    gen.decoder_start_token_id, gen.pad_token_id, gen.eos_token_id, gen.max_length = 0, 1, 0, max_length
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    if encoder.image_size != size:
        raise RuntimeError(f"the encoder reads {encoder.image_size}-pixel images, not {size}")
    ViTImageProcessor(size={"height": size, "width": size}).save_pretrained(out)
    return {
        "real_size": real_size,
        "parameters": int(sum(p.numel() for p in model.parameters())),
        "encoder": {"hidden": encoder.hidden_size, "layers": encoder.num_hidden_layers, "image": size},
        "decoder": {"hidden": decoder.n_embd, "layers": decoder.n_layer, "vocab": decoder.vocab_size},
        "tokenizer_trained_tokens": sum(not t.startswith("▁unused") for t in tokenizer.get_vocab()),
        "max_length": max_length,
    }


BLIP_VOCAB = 30524  # BLIP-base's text decoder: BERT's 30 522 word pieces, [DEC] and one more
BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # ids 0-4


def padded_wordpiece(size: int) -> Any:
    """A ``BertTokenizerFast`` of exactly ``size`` tokens, BLIP's layout: BERT's specials, word pieces
    learnt from ``SENTENCES`` (each as a word start and a ``##`` continuation), ``[unusedNNNNN]`` entries
    up to ``size - 1``, then ``[DEC]`` (the start of a caption) last."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import BertTokenizerFast  # type: ignore[attr-defined]  # exported lazily

    normaliser, pre = normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer()
    bpe = Tokenizer(models.BPE(unk_token="[UNK]"))
    bpe.normalizer, bpe.pre_tokenizer = normaliser, pre
    bpe.train_from_iterator(SENTENCES * 4, trainers.BpeTrainer(vocab_size=70, special_tokens=BERT_SPECIALS))
    trained = bpe.get_vocab()
    learnt = [p for p in sorted(trained, key=lambda p: trained[p]) if p not in BERT_SPECIALS]
    pieces = [*BERT_SPECIALS, *learnt, *(f"##{p}" for p in learnt)]
    pieces += [f"[unused{k:05d}]" for k in range(size - 1 - len(pieces))]
    tok = Tokenizer(models.WordPiece({p: i for i, p in enumerate(pieces)}, unk_token="[UNK]"))
    tok.normalizer, tok.pre_tokenizer, tok.decoder = normaliser, pre, decoders.WordPiece()
    tokenizer = BertTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]", cls_token="[CLS]",
        mask_token="[MASK]",
    )  # fmt: skip
    tokenizer.add_special_tokens({"bos_token": "[DEC]"})
    if len(tokenizer) != size:
        raise RuntimeError(f"the padded tokenizer has {len(tokenizer)} tokens, not {size}")
    return tokenizer


def blip_snapshot(out: Path, seed: int = 0) -> dict[str, Any]:
    """A random-weight ``BlipForConditionalGeneration`` at BLIP-base's size (Salesforce/blip-image-
    captioning-base: ``BlipVisionConfig()`` — ViT-B/16 at 384 × 384 pixels, 577 states — and
    ``BlipTextConfig()`` — a 12-layer BERT-base decoder with cross-attention, 30 524 tokens) written with
    ``save_pretrained`` into ``out``, with the padded word-piece tokenizer; what it is, for the report.
    Its generation settings are BLIP's: none of its own (generate's 20 new tokens)."""
    import torch
    from transformers import (
        BlipConfig,
        BlipForConditionalGeneration,
        BlipImageProcessor,
        BlipTextConfig,
        BlipVisionConfig,
    )

    tokenizer = padded_wordpiece(BLIP_VOCAB)
    vocab = tokenizer.get_vocab()
    vision = BlipVisionConfig()
    text = BlipTextConfig(
        vocab_size=BLIP_VOCAB, bos_token_id=vocab["[DEC]"], eos_token_id=vocab["[CLS]"],
        pad_token_id=vocab["[PAD]"], sep_token_id=vocab["[SEP]"],
    )  # fmt: skip
    torch.manual_seed(seed)
    config = BlipConfig(text_config=text.to_dict(), vision_config=vision.to_dict())
    model = BlipForConditionalGeneration(config).eval()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    size = int(vision.image_size)  # type: ignore[arg-type]  # an int in BLIP's configs
    BlipImageProcessor(size={"height": size, "width": size}).save_pretrained(out)
    return {
        "parameters": int(sum(p.numel() for p in model.parameters())),
        "vision": {"hidden": vision.hidden_size, "layers": vision.num_hidden_layers, "image": size},
        "text": {"hidden": text.hidden_size, "layers": text.num_hidden_layers, "vocab": text.vocab_size},
    }


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    parser = argparse.ArgumentParser(
        prog="python -m loadtests.gpu.snapshot",
        description="write a random-weight real-size snapshot (nothing downloaded)",
    )
    parser.add_argument("kind", choices=("vit-gpt2", "blip"))
    parser.add_argument("out", type=Path)
    parser.add_argument("--max-length", type=int, default=16, help="vit-gpt2: generate's max_length")
    args = parser.parse_args(argv)
    if args.kind == "blip":
        about = blip_snapshot(args.out)
    else:
        about = vit_gpt2_snapshot(args.out, real_size=True, max_length=args.max_length)
    print(json.dumps(about))
    return 0


__all__ = [
    "BLIP_VOCAB",
    "GPT2_VOCAB",
    "blip_snapshot",
    "padded_tokenizer",
    "padded_wordpiece",
    "vit_gpt2_snapshot",
]

if __name__ == "__main__":
    raise SystemExit(main())
