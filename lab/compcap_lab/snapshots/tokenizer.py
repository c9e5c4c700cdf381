"""The snapshots' tokenizers, trained with ``tokenizers`` on ``SENTENCES`` (nothing downloaded) and, for a
real-size model, padded with unused entries to its vocabulary: ``bpe`` (GPT-2's and CLIP's way),
``blip_wordpiece`` (BERT's with BLIP's ``[DEC]``), ``git_wordpiece`` (BERT's, as GIT's)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from service.checks import at_least

SENTENCES = [
    "a red bus on the street",
    "a black cat sitting on a sofa",
    "two dogs playing in the grass",
    "a man riding a brown horse",
    "a plate of food on a wooden table",
    "a small child holding a kite",
    "a white boat on the water",
]
GPT2_VOCAB = 50257  # GPT-2's output rows (nlpconnect/vit-gpt2-image-captioning's decoder)
BLIP_VOCAB = 30524  # BLIP-base's text decoder: BERT's 30 522 word pieces, [DEC] and one more
FILLER = "▁unused{:05d}"  # bpe's padding token: a vocabulary entry no merge produces
BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # ids 0-4, as BERT's vocabulary orders them


def bpe(size: int | None = None, trained: int = 120, start: str = "<|endoftext|>") -> Any:
    """A ``PreTrainedTokenizerFast``: BPE over SentencePiece-style pieces (``▁`` marks a word's start)
    trained to ``trained`` tokens; ``<|endoftext|>`` (id 0) ends a caption and by default starts it too
    (GPT-2's way; CLIP's starts with ``start``, ``<|startoftext|>``, a fourth special), ``<pad>`` (id 1)
    pads, ``<unk>`` (id 2). With ``size``: exactly ``size`` tokens, trained to at most that many and
    padded with ``FILLER`` entries (valid ids that decode to a word, never produced by encoding)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    specials = ["<|endoftext|>", "<pad>", "<unk>"] + ([start] if start != "<|endoftext|>" else [])
    if size is not None:
        at_least(3, size=size)
        trained = min(trained, size)
    tok.train_from_iterator(SENTENCES * 4, trainers.BpeTrainer(vocab_size=trained, special_tokens=specials))
    if size is not None:
        spec = json.loads(tok.to_str())
        vocab: dict[str, int] = spec["model"]["vocab"]
        k = 0
        while len(vocab) < size:
            name = FILLER.format(k)
            k += 1
            if name not in vocab:
                vocab[name] = len(vocab)
        tok = Tokenizer.from_str(json.dumps(spec))
        if tok.get_vocab_size() != size:
            raise RuntimeError(f"the padded tokenizer has {tok.get_vocab_size()} tokens, not {size}")
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<pad>",
        unk_token="<unk>",
    )


def trained_tokens(out: Path) -> int:
    """How many of the tokens of the ``bpe`` tokenizer saved in ``out`` were learnt (or are special), not
    ``FILLER`` padding."""
    spec = json.loads((out / "tokenizer.json").read_text(encoding="utf-8"))
    names = set(spec["model"]["vocab"]) | {t["content"] for t in spec["added_tokens"]}
    return sum(not name.startswith(FILLER.partition("{")[0]) for name in names)


def blip_wordpiece(size: int | None = None, pieces: int = 70) -> Any:
    """A ``BertTokenizerFast`` over a WordPiece vocabulary (``##`` continues a word), BLIP's layout: BERT's
    specials, the ``pieces`` learnt from ``SENTENCES`` (each as a word start and a ``##`` continuation),
    with ``size`` ``[unusedNNNNN]`` entries up to ``size - 1``, then ``[DEC]`` (added, as BLIP's tokenizer
    adds it) last. ``[DEC]`` starts a caption, ``[SEP]`` ends it, ``[PAD]`` pads. The pieces are learnt by
    ``tokenizers``' BPE trainer over BERT's normaliser and pre-tokeniser: its WordPiece trainer breaks ties
    between equally frequent pairs in a different order in every process (its ``##`` pieces get their ids
    in hash order), so it would make a different tokenizer, and model, on every run."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import BertTokenizerFast  # type: ignore[attr-defined]  # exported lazily

    normaliser, pre = normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer()
    learner = Tokenizer(models.BPE(unk_token="[UNK]"))
    learner.normalizer, learner.pre_tokenizer = normaliser, pre
    learner.train_from_iterator(
        SENTENCES * 4, trainers.BpeTrainer(vocab_size=pieces, special_tokens=BERT_SPECIALS)
    )
    trained = learner.get_vocab()
    learnt = [p for p in sorted(trained, key=lambda p: trained[p]) if p not in BERT_SPECIALS]
    vocab = [*BERT_SPECIALS, *learnt, *(f"##{p}" for p in learnt)]
    if size is not None:
        vocab += [f"[unused{k:05d}]" for k in range(size - 1 - len(vocab))]
    tok = Tokenizer(models.WordPiece({p: i for i, p in enumerate(vocab)}, unk_token="[UNK]"))
    tok.normalizer, tok.pre_tokenizer, tok.decoder = normaliser, pre, decoders.WordPiece()
    tokenizer = BertTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]", cls_token="[CLS]",
        mask_token="[MASK]",
    )  # fmt: skip
    tokenizer.add_special_tokens({"bos_token": "[DEC]"})
    if size is not None and len(tokenizer) != size:
        raise RuntimeError(f"the padded tokenizer has {len(tokenizer)} tokens, not {size}")
    return tokenizer


def git_wordpiece(vocab_size: int = 120) -> Any:
    """A BERT tokenizer, as GIT's (fast, so that ``save_pretrained`` writes ``tokenizer.json``): WordPiece
    over lower-cased words, ``##`` marks a word's continuation, BERT's ``[CLS] … [SEP]`` template
    (``[CLS]`` starts a caption, ``[SEP]`` ends it, ``[PAD]`` pads). Trained by ``tokenizers``' WordPiece
    trainer, which breaks ties in hash order: the vocabulary (which pieces, and their ids) differs from
    process to process (``blip_wordpiece`` says why and avoids it); the GIT tests compare the imported
    model against ``generate()`` on the same snapshot, not against pinned captions."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertTokenizerFast  # type: ignore[attr-defined]  # exported lazily

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(
        SENTENCES * 4, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=BERT_SPECIALS)
    )
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
