"""Each captioner's token ids (model contract version 2): the repository's word vocabulary for the
captioners trained here, a subword tokenizer of its own for an imported one. Which ids start a prefix,
end a caption and pad, and which ids the search never emits."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from service.manifest import Manifest, TokenizerSpec
from service.text.subword import SubwordVocabulary, TokenVocabulary
from service.text.vocabulary import Vocabulary


@dataclass(frozen=True)
class TokenIds:
    bos: int
    eos: int
    pad: int
    unk: int | None  # the word vocabulary's <unk>; a subword tokenizer needs none


def token_ids(manifest: Manifest, captioner: str) -> TokenIds:
    spec = manifest.captioner(captioner).tokens
    if spec is None:
        v = manifest.vocabulary
        return TokenIds(v.bos_id, v.eos_id, v.pad_id, v.unk_id)
    return TokenIds(spec.bos_id, spec.eos_id, spec.pad_id, None)


def banned_ids(manifest: Manifest, captioner: str) -> tuple[int, ...]:
    """Ids the search never emits: for the word vocabulary padding, the start token and <unk>; for a
    subword captioner none, as ``model.generate`` bans none (its captions are the model's own)."""
    ids = token_ids(manifest, captioner)
    if ids.unk is None:
        return ()
    return tuple(sorted({ids.pad, ids.bos, ids.unk} - {ids.eos}))


def load_subword(repo: str | Path, spec: TokenizerSpec) -> SubwordVocabulary:
    """The subword tokenizer ``spec`` names, from ``repo``."""
    return SubwordVocabulary.load(Path(repo) / spec.file, spec.size, spec.bos_id, spec.eos_id, spec.pad_id)


def captioner_vocabularies(
    repo: str | Path, manifest: Manifest, words: Vocabulary
) -> dict[str, TokenVocabulary]:
    """Each captioner's tokens, by name: ``words`` (the repository's word vocabulary) for a captioner
    trained here, its own subword tokenizer for an imported one. What the engine resolves request
    options (hooks) and decodes captions with; whatever checks options offline must use the same."""
    return {c.name: words if c.tokens is None else load_subword(repo, c.tokens) for c in manifest.captioners}


__all__ = ["TokenIds", "banned_ids", "captioner_vocabularies", "load_subword", "token_ids"]
