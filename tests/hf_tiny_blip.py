"""A tiny random-initialised ``BlipForConditionalGeneration`` snapshot for the import tests: the real
``transformers`` module of a small config, a WordPiece tokenizer trained with ``tokenizers`` on a few
sentences (BERT's way, with BLIP's ``[DEC]`` start token added after the vocabulary), a
``BlipImageProcessor`` of small size, written with ``save_pretrained`` — nothing downloaded."""

from __future__ import annotations

from pathlib import Path

from tests.hf_tiny import SENTENCES

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # ids 0-4, as BERT's vocabulary orders them


def tiny_wordpiece(pieces: int = 70):  # type: ignore[no-untyped-def]
    """A ``BertTokenizerFast`` over a WordPiece vocabulary (``##`` continues a word) with BLIP's
    captioning tokens: ``[DEC]`` (added, as BLIP's tokenizer adds it) starts a caption, ``[SEP]`` ends
    it, ``[PAD]`` pads. The pieces are learnt by ``tokenizers``' BPE trainer over BERT's normaliser and
    pre-tokeniser, each as a word start and as a ``##`` continuation: its WordPiece trainer breaks ties
    between equally frequent pairs in a different order in every process (its ``##`` pieces get their
    ids in hash order), so it would make a different tokenizer, and model, on every run."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import BertTokenizerFast

    normaliser, pre = normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer()
    bpe = Tokenizer(models.BPE(unk_token="[UNK]"))
    bpe.normalizer, bpe.pre_tokenizer = normaliser, pre
    bpe.train_from_iterator(SENTENCES * 4, trainers.BpeTrainer(vocab_size=pieces, special_tokens=SPECIALS))
    trained = bpe.get_vocab()
    learnt = [p for p in sorted(trained, key=lambda p: trained[p]) if p not in SPECIALS]
    vocab = {p: i for i, p in enumerate([*SPECIALS, *learnt, *(f"##{p}" for p in learnt)])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer, tok.pre_tokenizer, tok.decoder = normaliser, pre, decoders.WordPiece()
    tokenizer = BertTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        mask_token="[MASK]",
    )
    tokenizer.add_special_tokens({"bos_token": "[DEC]"})
    return tokenizer


def blip(out: Path, image_size: int = 64, seed: int = 0, end_bias: float = 2.0) -> Path:
    """A ``BlipForConditionalGeneration`` snapshot in ``out`` (vision transformer of patch 16, a
    two-layer BERT-style text decoder with cross-attention to it). Its weights are drawn wider than
    BLIP's defaults (whose vision weights start at 1e-10) so that images differ and random captions are
    words rather than near-ties, and ``[SEP]``'s output bias is raised by ``end_bias`` so that captions
    end before generate's default 20 tokens now and then (about half the greedy ones). The token ids are
    BLIP's layout: ``bos`` ``[DEC]``, ``sep`` ``[SEP]`` (the end of a caption), ``pad`` ``[PAD]``, and
    an ``eos_token_id`` that generate() never uses as the end (``[CLS]``, as BLIP's 2). Like BLIP's own
    snapshots it sets no generation settings: BLIP's generate() reads the text decoder's."""
    import torch
    from transformers import (
        BlipConfig,
        BlipForConditionalGeneration,
        BlipImageProcessor,
        BlipTextConfig,
        BlipVisionConfig,
    )

    tokenizer = tiny_wordpiece()
    vocab = tokenizer.get_vocab()
    vision = BlipVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=image_size,
        patch_size=16,
        initializer_range=0.3,
    )
    text = BlipTextConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        encoder_hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=64,
        bos_token_id=vocab["[DEC]"],
        eos_token_id=vocab["[CLS]"],
        pad_token_id=vocab["[PAD]"],
        sep_token_id=vocab["[SEP]"],
        initializer_range=0.25,
    )
    torch.manual_seed(seed)
    config = BlipConfig(text_config=text.to_dict(), vision_config=vision.to_dict(), initializer_range=0.25)
    model = BlipForConditionalGeneration(config).eval()
    with torch.no_grad():
        model.text_decoder.cls.predictions.bias[vocab["[SEP]"]] += end_bias
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    BlipImageProcessor(size={"height": image_size, "width": image_size}).save_pretrained(out)
    return out
