"""The substitutivity synonym table (Pantazopoulos et al., 2022, §4.3, Table 10), shared by ``export``
(the substitutivity split counts both words of each pair in the training captions) and ``service`` (the
``synonym_substitution`` decoding hook replaces one word by the other during beam search).

Pairs are ``(category, fine)``: an object category and a fine-grained word for it. The paper replaces
the *fine-grained* word by its category during inference ("During inference, we replace the generated
fine-grained word with its synonym", Table 10): S1 = fine words, S2 = their categories. That direction
is ``to_category``; ``to_fine`` maps each category to its first fine word instead (``dog -> puppy``).

Which pairs a captioner can use: with the repository's word vocabulary, both words in it; with a subword
tokenizer every word is a token sequence, so any word it writes without its unknown token
(``vocabulary_words``), except that of S1 words starting with the same token only the first pair is
kept (``distinct_first_tokens``: the hook fires on an S1 word's first token and could not tell them
apart).
"""

from __future__ import annotations

from collections.abc import Container, Iterable

from service.text.concepts import ConceptInventory
from service.text.subword import SubwordVocabulary, TokenVocabulary

# Pantazopoulos et al., 2022, Table 10: COCO object category -> fine-grained class used for substitution.
TABLE_10: tuple[tuple[str, str], ...] = (
    ("person", "man"),
    ("person", "woman"),
    ("child", "boy"),
    ("child", "girl"),
    ("bicycle", "bike"),
    ("airplane", "plane"),
    ("airplane", "jet"),
    ("airplane", "jetliner"),
    ("cow", "cattle"),
    ("tv", "television"),
    ("refrigerator", "freezer"),
    ("laptop", "computer"),
)
# SceneWorld's inventory synonym sets, category word <-> fine-grained / alternative word.
SCENEWORLD_SYNONYMS: tuple[tuple[str, str], ...] = (
    ("man", "guy"),
    ("man", "gentleman"),
    ("woman", "lady"),
    ("child", "kid"),
    ("child", "boy"),
    ("dog", "puppy"),
    ("cat", "kitten"),
    ("cat", "kitty"),
    ("horse", "pony"),
    ("bird", "birdie"),
    ("bus", "coach"),
    ("truck", "lorry"),
    ("plane", "airplane"),
    ("plane", "jet"),
    ("plane", "aircraft"),
    ("boat", "ship"),
    ("table", "desk"),
    ("car", "automobile"),
)
IRREGULAR_PLURALS = {
    "person": "people",
    "man": "men",
    "woman": "women",
    "child": "children",
    "gentleman": "gentlemen",
    "cattle": "cattle",
    "aircraft": "aircraft",
    "bus": "buses",
    "coach": "coaches",
    "lady": "ladies",
    "puppy": "puppies",
    "pony": "ponies",
    "kitty": "kitties",
    "lorry": "lorries",
    "tv": "tvs",
}
DIRECTIONS = ("to_category", "to_fine")


def plural(word: str, concepts: ConceptInventory) -> str:
    """Plural of a noun: the inventory's, else ``IRREGULAR_PLURALS``, else ``-s`` / ``-es``."""
    for entry in concepts.nouns.values():
        if word in entry.get("plural", {}):
            return str(entry["plural"][word])
    if word in IRREGULAR_PLURALS:
        return IRREGULAR_PLURALS[word]
    return word + ("es" if word.endswith(("s", "x", "ch", "sh")) else "s")


def candidate_table(concepts: ConceptInventory) -> tuple[tuple[str, str], ...]:
    """The inventory's synonym pairs (SceneWorld) plus Table 10 of Pantazopoulos et al. (2022), each
    unordered pair once."""
    table = list(SCENEWORLD_SYNONYMS)
    for noun, entry in concepts.nouns.items():  # synonyms added to the inventory later
        table += [(noun, w) for w in entry["synonyms"][1:] if (noun, w) not in table]
    seen = {frozenset(p) for p in table}
    table += [p for p in TABLE_10 if frozenset(p) not in seen]  # unordered: plane/airplane once
    return tuple(table)


def substitution_pairs(
    concepts: ConceptInventory,
    direction: str = "to_category",
    words: Container[str] | None = None,
    plurals: bool = True,
) -> list[tuple[str, str]]:
    """``(S1 word, S2 word)`` pairs of ``candidate_table`` in ``direction`` (see module docstring), with
    the plural forms as pairs of their own when ``plurals``; only pairs whose two words are in ``words``
    (a vocabulary) when given. Each S1 word appears once (the first pair wins, e.g. ``to_fine`` maps
    ``child`` to ``kid``, not ``boy``)."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    out: dict[str, str] = {}
    for category, fine in candidate_table(concepts):
        src, dst = (fine, category) if direction == "to_category" else (category, fine)
        forms = [(src, dst)]
        if plurals:
            forms.append((plural(src, concepts), plural(dst, concepts)))
        for a, b in forms:
            if a == b or a in out or (words is not None and (a not in words or b not in words)):
                continue
            out[a] = b
    return list(out.items())


def vocabulary_words(vocab: TokenVocabulary) -> Container[str]:
    """The words ``vocab`` can write as one word: its index, or a subword tokenizer's encodable words."""
    return vocab.encodable_words() if isinstance(vocab, SubwordVocabulary) else vocab.index


def distinct_first_tokens(pairs: Iterable[tuple[str, str]], vocab: TokenVocabulary) -> list[tuple[str, str]]:
    """``pairs`` without those whose S1 word starts with the same token (as it follows a space) as an
    earlier pair's different S1 word (``jet`` and ``jetliner`` may both start with "▁jet"): the
    ``synonym_substitution`` hook refuses such requests, and a table drops the later pair instead. A
    word-level vocabulary's words are one token each: every pair is kept."""
    if not isinstance(vocab, SubwordVocabulary):
        return list(pairs)
    starts: dict[int, list[int]] = {}
    out: list[tuple[str, str]] = []
    for a, b in pairs:
        spaced = vocab.word_sequences(a.strip())[:1]
        if spaced and starts.setdefault(spaced[0][0], spaced[0]) == spaced[0]:
            out.append((a, b))
    return out
