"""Tiny random-initialised Hugging Face snapshots for the import tests: real ``transformers`` modules of
small configs, a byte-level BPE tokenizer trained with ``tokenizers`` on a few sentences, an image
processor of small size, written with ``save_pretrained`` — no weights downloaded, nothing fetched."""

from __future__ import annotations

from pathlib import Path

SENTENCES = [
    "a red bus on the street",
    "a black cat sitting on a sofa",
    "two dogs playing in the grass",
    "a man riding a brown horse",
    "a plate of food on a wooden table",
    "a small child holding a kite",
    "a white boat on the water",
]


def tiny_tokenizer(vocab_size: int = 120, start: str = "<|endoftext|>"):  # type: ignore[no-untyped-def]
    """A ``PreTrainedTokenizerFast``: BPE over SentencePiece-style pieces (``▁`` marks a word's start),
    ``<|endoftext|>`` ends a caption and by default starts it too (GPT-2's way; CLIP's starts with
    ``<|startoftext|>``), ``<pad>`` pads."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    specials = ["<|endoftext|>", "<pad>", "<unk>"] + ([start] if start != "<|endoftext|>" else [])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials)
    tok.train_from_iterator(SENTENCES * 4, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<pad>",
        unk_token="<unk>",
    )


def vit_gpt2(out: Path, image_size: int = 96, seed: int = 0, max_length: int = 12) -> Path:
    """A ``VisionEncoderDecoderModel`` (ViT encoder, GPT-2 decoder with cross-attention) snapshot in
    ``out``. The decoder's weights are drawn wider than GPT-2's default so that its random captions are
    words, not near-ties, and end before ``max_length`` now and then."""
    import torch
    from transformers import (
        GPT2Config,
        VisionEncoderDecoderConfig,
        VisionEncoderDecoderModel,
        ViTConfig,
        ViTImageProcessor,
    )

    tokenizer = tiny_tokenizer()
    encoder = ViTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        image_size=image_size,
        patch_size=16,
    )
    decoder = GPT2Config(
        vocab_size=len(tokenizer),
        n_embd=32,
        n_layer=2,
        n_head=4,
        n_positions=64,
        add_cross_attention=True,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=1,
        initializer_range=0.3,
    )
    torch.manual_seed(seed)
    config = VisionEncoderDecoderConfig.from_encoder_decoder_configs(encoder, decoder)
    config.decoder_start_token_id, config.pad_token_id, config.eos_token_id = 0, 1, 0
    model = VisionEncoderDecoderModel(config).eval()
    gen = model.generation_config
    gen.decoder_start_token_id, gen.pad_token_id, gen.eos_token_id, gen.max_length = 0, 1, 0, max_length
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    ViTImageProcessor(size={"height": image_size, "width": image_size}).save_pretrained(out)
    return out


def clip(out: Path, image_size: int = 48, seed: int = 0) -> Path:
    """A ``CLIPModel`` snapshot in ``out``: small text and vision towers, the tiny tokenizer with
    ``<|startoftext|>`` / ``<|endoftext|>``, a CLIP image processor resizing the shortest edge to
    ``image_size + 8`` and cropping ``image_size`` at the centre (as CLIP's does, at 224)."""
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPTextConfig, CLIPVisionConfig

    tokenizer = tiny_tokenizer(start="<|startoftext|>")
    ids = tokenizer.convert_tokens_to_ids(["<|startoftext|>", "<|endoftext|>", "<pad>"])
    text = CLIPTextConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=32, bos_token_id=ids[0], eos_token_id=ids[1],
        pad_token_id=ids[2], projection_dim=16,
    )  # fmt: skip
    vision = CLIPVisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        image_size=image_size, patch_size=16, projection_dim=16,
    )  # fmt: skip
    torch.manual_seed(seed)
    model = CLIPModel(
        CLIPConfig(text_config=text.to_dict(), vision_config=vision.to_dict(), projection_dim=16)
    )
    out.mkdir(parents=True, exist_ok=True)
    model.eval().save_pretrained(out)
    tokenizer.save_pretrained(out)
    CLIPImageProcessor(
        size={"shortest_edge": image_size + 8}, crop_size={"height": image_size, "width": image_size}
    ).save_pretrained(out)
    return out
