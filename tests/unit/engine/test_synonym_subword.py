"""``synonym_substitution`` with words of several tokens (a subword captioner's words): the processor's
trigger on an S1 word's first token and its forced continuation of a longer S2 word across steps whose
rows the search reorders; one-token words exactly as the paper's rule; the hook on a real subword
tokenizer (``compcap_lab.snapshots.tokenizer``), its refusals and its default table; the pairs the
substitutivity probe keeps for a captioner."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from service.engine.hooks import HookError, resolve_hooks
from service.engine.processors import SynonymSubstitution
from service.text.concepts import load_concepts
from service.text.subword import SubwordVocabulary
from service.text.synonyms import distinct_first_tokens, substitution_pairs, vocabulary_words
from service.text.vocabulary import SPECIALS, Vocabulary
from tests.beam_oracle import beam_search

NEG = -np.inf
V = 16
BOS, EOS, X, Y = 0, 1, 2, 3  # X, Y: ordinary tokens
S_ONE, T2 = 4, (5, 6)  # a one-token S1 word -> a two-token S2 word
S_MULTI, T3 = (7, 8), (9, 10, 11)  # a two-token S1 word -> a three-token S2 word
S_PLAIN, T_ONE = 12, 13  # one token -> one token


def rows(*prefixes: tuple[int, ...]) -> np.ndarray:
    return np.asarray(prefixes, dtype=np.int64)


def peaked(argmax: list[int], seed: int = 0) -> np.ndarray:
    """Log-probs per row with its most likely token ``argmax[row]``."""
    lp = np.random.default_rng(seed).uniform(-6.0, -2.0, size=(len(argmax), V))
    lp[np.arange(len(argmax)), argmax] = -0.1
    return lp.astype(np.float32)


def only(token: int) -> np.ndarray:
    """A row with all the probability on ``token``."""
    out = np.full(V, NEG, dtype=np.float32)
    out[token] = 0.0
    return out


# -------------------------------------------------------------------------------------------- processor
def test_trigger_on_the_first_token_then_the_target_is_forced_to_its_end_across_reordered_rows() -> None:
    sub = SynonymSubstitution([(S_ONE, T2), (S_MULTI, T3), (S_PLAIN, T_ONE)])
    assert sub.src.tolist() == [S_ONE, S_MULTI[0], S_PLAIN] and sub.dst.tolist() == [5, 9, T_ONE]
    # step 1: three triggers (S1's first token is the argmax; S_MULTI's second token plays no part)
    lp = peaked([S_ONE, S_MULTI[0], S_PLAIN, X, S_MULTI[1]])
    out = sub(rows((BOS, X), (BOS, X), (BOS, X), (BOS, X), (BOS, X)), lp)
    for r, token in enumerate([5, 9, T_ONE]):
        np.testing.assert_array_equal(out[r], only(token))
    np.testing.assert_array_equal(out[3:], lp[3:])  # not an S1 word's first token: untouched
    assert sub.substitutions == 3
    # step 2, rows reordered by the search: the continuations are found by prefix, wherever the row is
    lp = peaked([X, S_ONE, S_ONE, X, S_PLAIN, X], seed=1)  # row 1: forced, no trigger
    prefixes = rows(
        (BOS, X, X),  # no substitution here
        (BOS, X, 9),  # the three-token target: its second token next
        (BOS, X, T_ONE),  # a one-token target: done, and the argmax (S_ONE) triggers again
        (BOS, X, 5),  # the two-token target: its second token next
        (BOS, Y, 5),  # the target's first token written by the model itself: untouched (and S_PLAIN)
        (BOS, Y, 9),
    )
    lp[1, 10] = NEG  # forced even where the model gives the token no probability at all
    out = sub(prefixes, lp)
    np.testing.assert_array_equal(out[0], lp[0])
    np.testing.assert_array_equal(out[1], only(10))
    np.testing.assert_array_equal(out[2], only(5))
    np.testing.assert_array_equal(out[3], only(6))
    np.testing.assert_array_equal(out[4], only(T_ONE))
    np.testing.assert_array_equal(out[5], lp[5])
    assert sub.substitutions == 5  # triggers only, not the forced steps
    # step 3, reordered again: the three-token target's last token (though its argmax is an S1 word's
    # first token: a forced row does not trigger); the two-token target started at step 2 goes on
    lp = peaked([X, S_ONE, S_ONE, X], seed=2)
    dead = np.full(V, NEG, dtype=np.float32)
    lp = np.vstack([lp, dead])
    prefixes = rows((BOS, X, 5, 6), (BOS, X, 9, 10), (BOS, X, T_ONE, 5), (BOS, X, X, X), (BOS, X, 9, 10))
    out = sub(prefixes, lp)
    np.testing.assert_array_equal(out[0], lp[0])  # "5 6" is whole: nothing more to force
    np.testing.assert_array_equal(out[1], only(11))
    np.testing.assert_array_equal(out[2], only(6))
    np.testing.assert_array_equal(out[3], lp[3])
    np.testing.assert_array_equal(out[4], dead)  # a dead row stays dead
    assert sub.substitutions == 5
    # step 4: the three-token target is whole, its row free again
    lp = peaked([S_ONE], seed=3)
    np.testing.assert_array_equal(sub(rows((BOS, X, 9, 10, 11)), lp)[0], only(5))
    assert sub.substitutions == 6


def test_one_token_pairs_are_the_seed_rule_with_no_state() -> None:
    table = {S_ONE: 6, S_PLAIN: T_ONE, X: Y}
    as_ids = SynonymSubstitution(table)
    as_words = SynonymSubstitution([((s,), (t,)) for s, t in table.items()])
    assert as_ids.src.tolist() == as_words.src.tolist() == sorted(table)
    assert as_ids.dst.tolist() == as_words.dst.tolist() == [table[s] for s in sorted(table)]
    assert as_ids.inner.size == 0
    rng = np.random.default_rng(4)
    count = 0
    for step in range(1, 6):
        lp = rng.normal(size=(8, V)).astype(np.float32)
        lp[rng.integers(0, 8, 3), rng.choice([S_ONE, S_PLAIN, X], 3)] = 5.0  # some rows' argmax in S1
        lp[7] = NEG  # a dead row
        prefixes = np.concatenate(
            [np.zeros((8, 1), dtype=np.int64), rng.choice([5, 6, X, T_ONE], (8, step))], axis=1
        )
        want = lp.copy()
        # Pantazopoulos et al., 2022, §4.3: the argmax word in S1 -> its synonym has probability 1
        for r in range(8):
            best = int(lp[r].argmax())
            if best in table and np.isfinite(lp[r].max()):
                want[r], want[r, table[best]] = NEG, 0.0
                count += 1
        np.testing.assert_array_equal(as_ids(prefixes, lp), want)
        np.testing.assert_array_equal(as_words(prefixes, lp), want)
    assert as_ids.substitutions == as_words.substitutions == count > 0
    assert not as_ids.pending and not as_words.pending


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        ([((7, 8), (9,)), ((7, 9), (10,))], "start with the same token"),
        ([((7, 8), (9,)), ((7, 8), (10,))], "to both"),
        ([((7, 8), (7, 8))], "another word"),
        ([((), (9,))], "non-empty"),
        ([((7, -1), (9,))], ">= 0"),
        ([((7, True), (9,))], "integer"),
    ],
)
def test_pairs_of_token_sequences_are_checked(pairs: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SynonymSubstitution(pairs)
    ok = SynonymSubstitution([((7, 8), (9,)), ((7, 8), (9,))])  # the same pair twice is one pair
    assert ok.src.tolist() == [7] and ok.dst.tolist() == [9]


def test_a_beam_search_writes_the_target_whole() -> None:
    # a toy model that never writes the target's tokens itself and likes S_ONE after X: the S search
    # writes 9 10 11 whole wherever it writes 9, through the search's own row reordering (beam 3, 2 images)
    def step(tokens: np.ndarray, lengths: np.ndarray, state: np.ndarray, image: np.ndarray) -> Any:
        out = np.zeros((tokens.shape[0], V))
        for n in range(tokens.shape[0]):
            prefix = tokens[n, : lengths[n]]
            out[n] = np.random.default_rng([int(image[n]), *prefix.tolist()]).normal(size=V)
            out[n, [9, 10, 11]] = -40.0
            out[n, S_ONE] += 4.0 * (prefix[-1] == X)
        logprobs = out - np.log(np.exp(out).sum(axis=1, keepdims=True))
        return logprobs.astype(np.float32), state

    def search(hook: Any = None) -> list[list[int]]:
        found = beam_search(step, 2, 3, 8, BOS, EOS, 3, 1.0, None, (), logits_hook=hook)
        return [h.tokens for per in found for h in per]

    sub = SynonymSubstitution({S_ONE: T3})
    original, substituted = search(), search(sub)
    assert not any(t in o for o in original for t in T3) and sub.substitutions > 0
    assert original != substituted
    for caption in substituted:  # (a row forced at max_length ends there: it finishes no caption)
        starts = [k for k, t in enumerate(caption) if t == 9]
        assert all(caption[k : k + 3] == [9, 10, 11] for k in starts)
        assert caption.count(10) == caption.count(11) == len(starts)
    assert any(9 in caption for caption in substituted)


# -------------------------------------------------------------------------------------------- the hook
def spec(**params: Any) -> list[dict[str, Any]]:
    return [{"name": "synonym_substitution", "params": params}]


@pytest.fixture(scope="module")
def sub(tmp_path_factory: pytest.TempPathFactory) -> SubwordVocabulary:
    from compcap_lab.snapshots.tokenizer import bpe

    fast = bpe()
    path: Path = tmp_path_factory.mktemp("tokenizer")
    fast.save_pretrained(path)
    return SubwordVocabulary.load(path / "tokenizer.json", len(fast), 0, 0, 1)


def spaced(vocab: SubwordVocabulary, word: str) -> list[int]:
    return vocab.encode(" " + word)


def test_the_hook_takes_words_of_several_tokens(sub: SubwordVocabulary) -> None:
    dog, cat, a = spaced(sub, "dog"), spaced(sub, "cat"), spaced(sub, "a")
    assert len(dog) == 2 and len(cat) == len(a) == 1  # "▁do" "g" for this tokenizer
    (to_cat,) = resolve_hooks(spec(pairs=[["dog", "cat"]]), sub).processors
    assert isinstance(to_cat, SynonymSubstitution)
    assert (to_cat.src.tolist(), to_cat.dst.tolist(), to_cat.rest) == ([dog[0]], cat, [()])
    (to_dog,) = resolve_hooks(spec(pairs={"a": "dog"}), sub).processors
    assert isinstance(to_dog, SynonymSubstitution)
    assert (to_dog.src.tolist(), to_dog.dst.tolist(), to_dog.rest) == (a, dog[:1], [tuple(dog[1:])])
    # on the tokenizer's own ids: "a" most likely after BOS -> "▁do", then "g" whatever the model says
    v = len(sub)
    lp = np.full((2, v), -5.0, dtype=np.float32)
    lp[:, a[0]] = -0.1
    out = to_dog(np.asarray([[0], [0]]), lp)
    assert (out[:, dog[0]] == 0).all() and np.isneginf(np.delete(out, dog[0], axis=1)).all()
    nxt = to_dog(np.asarray([[0, cat[0]], [0, dog[0]]]), lp)
    assert nxt[0, dog[0]] == 0 and to_dog.substitutions == 3  # the other row: "a" triggers again
    assert nxt[1, dog[1]] == 0 and np.isneginf(np.delete(nxt[1], dog[1])).all()
    assert sub.decode([0, dog[0], dog[1], 0]) == "dog"


def test_the_hook_refuses_s1_words_that_start_alike_and_unknown_characters(sub: SubwordVocabulary) -> None:
    assert spaced(sub, "door")[0] == spaced(sub, "dog")[0]  # "▁do" "o" "r"
    with pytest.raises(HookError, match="'dog' and 'door' both start with token") as err:
        resolve_hooks(spec(pairs=[["dog", "cat"], ["door", "table"]]), sub)
    assert err.value.loc == ("hooks", 0, "params", "pairs")
    resolve_hooks(spec(pairs=[["dog", "cat"], ["dog", "cat"], ["sofa", "dog"]]), sub)  # S2 may share
    assert sub.unknown_id is not None and sub.unknown_id in spaced(sub, "jet")  # no "j" in its alphabet
    with pytest.raises(HookError, match="'jet' has characters") as err:
        resolve_hooks(spec(pairs=[["jet", "plane"]]), sub)
    assert err.value.param == "pairs"
    with pytest.raises(HookError, match="non-empty strings"):
        resolve_hooks(spec(pairs=[["dog", 3]]), sub)


def test_the_default_table_on_a_subword_captioner(sub: SubwordVocabulary) -> None:
    table = substitution_pairs(load_concepts(), "to_category", sub.encodable_words())
    kept = distinct_first_tokens(table, sub)
    assert ("puppy", "dog") in table and not any("jet" in a for a, _ in table)  # "j": the unknown token
    assert len(kept) < len(table)  # e.g. "kid" and "kitten" both start with "▁"
    (proc,) = resolve_hooks(spec(), sub).processors
    assert isinstance(proc, SynonymSubstitution)
    firsts = [spaced(sub, a)[0] for a, _ in kept]
    assert sorted(firsts) == proc.src.tolist() and len(set(firsts)) == len(firsts)
    targets = {tuple(spaced(sub, b)) for _, b in kept}
    got = {(d, *rest) for d, rest in zip(proc.dst.tolist(), proc.rest, strict=True)}
    assert got == targets and any(len(t) > 1 for t in targets)
    (fine,) = resolve_hooks(spec(direction="to_fine"), sub).processors
    assert isinstance(fine, SynonymSubstitution) and fine.src.size > 0


def test_the_words_and_pairs_a_captioner_keeps(sub: SubwordVocabulary) -> None:
    pairs = [("puppy", "dog"), ("jet", "plane"), ("door", "dog"), ("dog", "cat"), ("sofa", "dog")]
    words = vocabulary_words(sub)
    assert [p for p in pairs if p[0] in words and p[1] in words] == [p for p in pairs if p[0] != "jet"]
    assert distinct_first_tokens(pairs, sub) == [p for p in pairs if p[0] != "dog"]  # "door" came first
    plain = Vocabulary((*SPECIALS, "puppy", "dog", "door", "cat"))
    assert vocabulary_words(plain) is plain.index and distinct_first_tokens(pairs, plain) == pairs


def test_the_unknown_token_of_a_unigram_tokenizer_too() -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from compcap_lab.snapshots.tokenizer import SENTENCES

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    specials = ["<s>", "<pad>", "<unk>"]
    tok.train_from_iterator(
        SENTENCES * 4, trainers.UnigramTrainer(special_tokens=specials, unk_token="<unk>")
    )
    vocab = SubwordVocabulary(tok, tok.get_vocab_size(), 0, 0, 1)
    assert vocab.unknown_id == tok.token_to_id("<unk>") == 2
    assert "dog" in vocab.encodable_words() and "jet" not in vocab.encodable_words()  # no "j"
    (proc,) = resolve_hooks(spec(pairs=[["dog", "cat"]]), vocab).processors
    assert isinstance(proc, SynonymSubstitution) and proc.src.tolist() == vocab.encode(" dog")[:1]
