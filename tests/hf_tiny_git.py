"""A tiny random-initialised ``GitForCausalLM`` snapshot for the GIT import test: the real
``transformers`` module of a small config (a CLIP-style vision tower of 64 x 64 images in 16 x 16
patches, a two-layer text transformer), a WordPiece tokenizer trained with ``tokenizers`` on a few
sentences and wrapped as BERT's (GIT's own tokenizer is BERT's: ``[CLS]`` starts a caption, ``[SEP]``
ends it, ``[PAD]`` pads), and the CLIP image processor GIT's processor uses (shortest-edge resize and
centre crop), written with ``save_pretrained`` — no weights downloaded, nothing fetched."""

from __future__ import annotations

from pathlib import Path

from tests.hf_tiny import SENTENCES

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # ids 0-4, in this order


def tiny_wordpiece(vocab_size: int = 120):  # type: ignore[no-untyped-def]
    """A BERT tokenizer (fast, so that ``save_pretrained`` writes ``tokenizer.json``): WordPiece over
    lower-cased words, ``##`` marks a word's continuation, BERT's ``[CLS] … [SEP]`` template."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIAL)
    tok.train_from_iterator(SENTENCES * 4, trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    return BertTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        mask_token="[MASK]",
    )


def git(out: Path, image_size: int = 64, seed: int = 0, max_length: int = 12, end_bias: float = 3.0) -> Path:
    """A ``GitForCausalLM`` snapshot in ``out``. Its weights are drawn wider than GIT's default so that
    its random captions are words, not near-ties. With random weights alone ``[SEP]`` is one of 120
    tokens and hardly ever wins, so its output bias is raised (``end_bias``): on the test's images
    about half of the captions end before ``max_length``, one in ten at once (an empty caption, as
    ``generate`` gives it too). Dropout is off, as in eval mode."""
    import torch
    from transformers import CLIPImageProcessor, GitConfig, GitForCausalLM

    tokenizer = tiny_wordpiece()
    pad, cls, sep = (tokenizer.convert_tokens_to_ids(t) for t in ("[PAD]", "[CLS]", "[SEP]"))
    config = GitConfig(
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "image_size": image_size,
            "patch_size": 16,
        },
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        initializer_range=0.3,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        pad_token_id=pad,
        bos_token_id=cls,
        eos_token_id=sep,
    )
    torch.manual_seed(seed)
    model = GitForCausalLM(config).eval()
    with torch.no_grad():
        model.output.bias[sep] = end_bias
    gen = model.generation_config
    gen.bos_token_id, gen.pad_token_id, gen.eos_token_id, gen.max_length = cls, pad, sep, max_length
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    CLIPImageProcessor(
        size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size}
    ).save_pretrained(out)
    return out
