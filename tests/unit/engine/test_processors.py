"""Logits processors: each one's exact effect on hand-made log-prob matrices; ``resolve_hooks``, the
registry that turns a request's JSON hooks into processors and search parameters (errors name the hook
and the parameter), the ``synonym_substitution`` hook's default word table and its request for the
original (O) next to the substituted (S) captions; ``resolve_params``, request options into
``SearchParams``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pydantic
import pytest

from service.engine.hooks import (
    DEFAULT_DIVERSITY_PENALTY,
    HOOKS,
    MAX_HOOKS,
    HookError,
    hook_catalog,
    resolve_hooks,
)
from service.engine.hooks import hook as register_hook
from service.engine.params import (
    MAX_LENGTH_PENALTY,
    MAX_RERANK_WEIGHT,
    EngineError,
    InvalidParameterError,
    SearchParams,
    UnknownModelError,
    resolve_params,
)
from service.engine.processors import (
    BanSequences,
    BanWords,
    LogitsProcessor,
    NoRepeatNgram,
    SynonymSubstitution,
)
from service.manifest import Manifest
from service.settings import Settings
from service.text.concepts import load_concepts
from service.text.synonyms import substitution_pairs
from service.text.vocabulary import SPECIALS, Vocabulary

NEG = -np.inf
VOCAB = Vocabulary((*SPECIALS, "a", "big", "dog", "puppy", "man", "guy", "on", "grass"))
A, BIG, DOG, PUPPY, MAN, GUY, ON, GRASS = range(4, 12)
V = len(VOCAB)


def logprobs(rows: int = 3, seed: int = 0) -> np.ndarray:
    logits = np.random.default_rng(seed).normal(size=(rows, V))
    return (logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))).astype(np.float32)


def tokens(*rows: list[int]) -> np.ndarray:
    return np.asarray(rows, dtype=np.int64)


def expect(lp: np.ndarray, cells: list[tuple[int, int]]) -> np.ndarray:
    """``lp`` with exactly ``cells`` set to -inf."""
    out = lp.copy()
    for r, c in cells:
        out[r, c] = NEG
    return out


def apply(processors: list[LogitsProcessor], toks: np.ndarray, lp: np.ndarray) -> np.ndarray:
    for proc in processors:
        lp = proc(toks, lp)
    return lp


# -------------------------------------------------------------------------------------------- processors
def test_ban_words_sets_only_those_words_to_minus_inf() -> None:
    lp = logprobs()
    toks = tokens([1, A], [1, BIG], [1, DOG])
    out = BanWords([DOG, PUPPY, DOG])(toks, lp)
    np.testing.assert_array_equal(out, expect(lp, [(r, c) for r in range(3) for c in (DOG, PUPPY)]))
    assert out.dtype == lp.dtype


@pytest.mark.parametrize("ids", [[], [-1], [1.5]])
def test_ban_words_rejects_bad_ids(ids: list[Any]) -> None:
    with pytest.raises(ValueError, match="ids"):
        BanWords(ids)


def test_no_repeat_bigram() -> None:
    lp = logprobs()
    toks = tokens(
        [1, A, BIG, A],  # "a big" seen and the row ends with "a": "big" would repeat it
        [1, DOG, DOG, DOG],  # "dog dog" seen: a third "dog" would repeat it (duplicates, Wan et al., 2022)
        [1, A, BIG, DOG],  # nothing to repeat
    )
    out = NoRepeatNgram(2)(toks, lp)
    np.testing.assert_array_equal(out, expect(lp, [(0, BIG), (1, DOG)]))


def test_no_repeat_trigram_and_unigram() -> None:
    lp = logprobs(2)
    toks = tokens([1, A, BIG, DOG, A, BIG], [1, A, DOG, A, BIG, A])
    out = NoRepeatNgram(3)(toks, lp)
    np.testing.assert_array_equal(out, expect(lp, [(0, DOG)]))  # row 1: "a big" was never followed
    out1 = NoRepeatNgram(1)(toks[:, :3], lp)  # bans every token used so far (BOS included)
    np.testing.assert_array_equal(out1, expect(lp, [(0, 1), (0, A), (0, BIG), (1, 1), (1, A), (1, DOG)]))


def test_no_repeat_short_prefix_is_unchanged() -> None:
    lp = logprobs(2)
    np.testing.assert_array_equal(NoRepeatNgram(3)(tokens([1, A], [1, DOG]), lp), lp)


@pytest.mark.parametrize("n", [0, -2, True, 2.0, "2"])
def test_no_repeat_rejects_bad_n(n: Any) -> None:
    with pytest.raises(ValueError, match="n must"):
        NoRepeatNgram(n)


def test_synonym_substitution_puts_all_probability_on_the_synonym() -> None:
    lp = np.full((4, V), -5.0, dtype=np.float32)
    lp[0, DOG] = -0.1  # argmax dog -> puppy
    lp[1, MAN] = -0.2  # argmax man -> guy
    lp[2, A] = -0.1  # argmax "a": unchanged although dog is likely too
    lp[2, DOG] = -0.3
    lp[3, PUPPY] = -0.1  # the synonym itself is not substituted back
    hook = SynonymSubstitution({DOG: PUPPY, MAN: GUY})
    out = hook(tokens([1], [1], [1], [1]), lp)
    want = lp.copy()
    want[0] = NEG
    want[0, PUPPY] = 0.0
    want[1] = NEG
    want[1, GUY] = 0.0
    np.testing.assert_array_equal(out, want)
    assert hook.substitutions == 2
    assert np.exp(out[0]).sum() == pytest.approx(1.0)  # "the probability of the synonym word to 1"


@pytest.mark.parametrize(
    "pairs", [{}, {DOG: DOG}, [(DOG, PUPPY), (DOG, GUY)], [(DOG,)], {-1: DOG}, {DOG: True}]
)
def test_synonym_substitution_rejects_bad_pairs(pairs: Any) -> None:
    with pytest.raises(ValueError, match="pairs"):
        SynonymSubstitution(pairs)


def test_processors_leave_inputs_unchanged_and_follow_the_protocol() -> None:
    lp = logprobs()
    toks = tokens([1, DOG, DOG], [1, A, DOG], [1, MAN, MAN])
    before, toks_before = lp.copy(), toks.copy()
    for hook in (BanWords([DOG]), NoRepeatNgram(1), SynonymSubstitution({DOG: PUPPY})):
        assert isinstance(hook, LogitsProcessor)
        out = hook(toks, lp)
        assert out.shape == lp.shape and out is not lp
    np.testing.assert_array_equal(lp, before)
    np.testing.assert_array_equal(toks, toks_before)


# -------------------------------------------------------------------------------------------- registry
def spec(name: str, **params: Any) -> dict[str, Any]:
    return {"name": name, "params": params}


def test_resolve_keeps_request_order_and_turns_min_length_into_a_search_parameter() -> None:
    resolved = resolve_hooks(
        [
            spec("ban_words", words=["grass", "On"]),
            spec("no_repeat_ngram", n=2),
            spec("min_length", min_words=3),
        ],
        VOCAB,
    )
    assert resolved.names == ["ban_words", "no_repeat_ngram", "min_length"]
    assert resolved.ordered_names == ("ban_words", "no_repeat_ngram", "min_length")
    assert [type(p) for p in resolved.processors] == [BanWords, NoRepeatNgram]  # min_length is none
    assert (resolved.min_words, resolved.min_words_index) == (3, 2)
    assert (resolved.groups, resolved.diversity_penalty, resolved.diverse_index) == (1, 0.0, None)
    lp = logprobs(2)
    toks = tokens([1, A, A], [1, A, DOG])
    want = expect(lp, [(0, GRASS), (1, GRASS), (0, ON), (1, ON), (0, A)])  # EOS untouched
    np.testing.assert_array_equal(apply(resolved.processors, toks, lp), want)


def test_the_largest_min_length_wins_and_is_the_one_checked() -> None:
    resolved = resolve_hooks(
        [spec("min_length", min_words=2), spec("min_length", min_words=5), spec("min_length", min_words=3)],
        VOCAB,
    )
    assert (resolved.min_words, resolved.min_words_index) == (5, 1)
    resolved.check(beam_size=2, max_length=5)
    with pytest.raises(HookError, match="max_length") as err:
        resolved.check(beam_size=2, max_length=4)
    assert (err.value.hook, err.value.param) == ("min_length", "min_words")
    assert err.value.loc == ("hooks", 1, "params", "min_words")
    zero = resolve_hooks([spec("min_length", min_words=0)], VOCAB)
    assert (zero.min_words, zero.processors) == (0, [])


def test_empty_hooks_change_nothing() -> None:
    for specs in (None, []):
        resolved = resolve_hooks(specs, VOCAB)
        assert resolved.processors == [] and resolved.names == [] and resolved.ordered_names == ()
        assert (resolved.min_words, resolved.groups, resolved.diversity_penalty) == (0, 1, 0.0)
        resolved.check(beam_size=3, max_length=2)


def test_ban_words_by_id_and_pydantic_specs() -> None:
    class Spec(pydantic.BaseModel):
        name: str
        params: dict[str, Any] = {}

    resolved = resolve_hooks(
        [
            Spec(name="ban_words", params={"ids": [DOG], "words": ["a"]}),
            Spec(name="no_repeat_ngram", params={"n": 2}),
        ],
        VOCAB,
    )
    ban, no_repeat = resolved.processors
    assert isinstance(ban, BanWords) and ban.ids.tolist() == [A, DOG]
    assert isinstance(no_repeat, NoRepeatNgram) and no_repeat.n == 2
    assert resolved.names == ["ban_words", "no_repeat_ngram"]


def test_synonym_substitution_from_json_takes_explicit_pairs() -> None:
    resolved = resolve_hooks([spec("synonym_substitution", pairs=[["dog", "puppy"], ["man", "guy"]])], VOCAB)
    (sub,) = resolved.processors
    assert isinstance(sub, SynonymSubstitution)
    assert dict(zip(sub.src.tolist(), sub.dst.tolist(), strict=True)) == {DOG: PUPPY, MAN: GUY}
    as_map = resolve_hooks([spec("synonym_substitution", pairs={"dog": "puppy"})], VOCAB)
    (sub,) = as_map.processors
    assert isinstance(sub, SynonymSubstitution) and sub.src.tolist() == [DOG] and sub.dst.tolist() == [PUPPY]
    assert resolved.compare_without == 0 and as_map.compare_without == 0  # return_original: default true


def test_diverse_beam_becomes_search_parameters_and_is_checked() -> None:
    resolved = resolve_hooks([spec("diverse_beam", groups=3, diversity_penalty=2)], VOCAB)
    assert (resolved.groups, resolved.diversity_penalty, resolved.diverse_index) == (3, 2.0, 0)
    assert resolved.processors == [] and resolved.names == ["diverse_beam"]
    resolved.check(beam_size=6, max_length=3)
    resolved.check(beam_size=3, max_length=3)
    with pytest.raises(HookError, match="groups") as err:
        resolved.check(beam_size=4, max_length=3)
    assert (err.value.hook, err.value.param) == ("diverse_beam", "groups")
    assert err.value.loc == ("hooks", 0, "params", "groups")
    with pytest.raises(HookError, match="groups"):
        resolved.check(beam_size=2, max_length=3)
    default = resolve_hooks([spec("no_repeat_ngram", n=2), spec("diverse_beam", groups=2)], VOCAB)
    assert (default.groups, default.diversity_penalty) == (2, DEFAULT_DIVERSITY_PENALTY) == (2, 0.5)
    assert default.diverse_index == 1


def test_ordered_names_put_diverse_beam_last() -> None:
    resolved = resolve_hooks(
        [spec("diverse_beam", groups=2), spec("ban_words", words=["dog"]), spec("min_length", min_words=2)],
        VOCAB,
    )
    assert resolved.names == ["diverse_beam", "ban_words", "min_length"]
    assert resolved.ordered_names == ("ban_words", "min_length", "diverse_beam")


@pytest.mark.parametrize(
    ("specs", "hook", "param", "message"),
    [
        ([spec("beam_me_up")], "beam_me_up", None, "unknown hook"),
        ([{"params": {}}], "None", None, "hook name"),
        (["ban_words"], "ban_words", None, "object"),
        ([{"name": "ban_words", "params": [1]}], "ban_words", None, "params must be an object"),
        ([{"name": "ban_words", "args": {}}], "ban_words", None, "unknown keys"),
        ([spec("ban_words")], "ban_words", "words", "required"),
        ([spec("ban_words", words=[])], "ban_words", "words", "required"),
        ([spec("ban_words", words="dog")], "ban_words", "words", "must be a list"),
        ([spec("ban_words", words=["cat"])], "ban_words", "words", "unknown word 'cat'"),
        ([spec("ban_words", words=["<eos>"])], "ban_words", "words", "special token"),
        ([spec("ban_words", words=[3])], "ban_words", "words", "strings"),
        ([spec("ban_words", ids=[2])], "ban_words", "ids", "not a word id"),
        ([spec("ban_words", ids=[V])], "ban_words", "ids", "not a word id"),
        ([spec("ban_words", ids=[True])], "ban_words", "ids", "integers"),
        ([spec("ban_words", words=["dog"], colour="red")], "ban_words", "colour", "unknown parameter"),
        ([spec("no_repeat_ngram")], "no_repeat_ngram", "n", "required"),
        ([spec("no_repeat_ngram", n=0)], "no_repeat_ngram", "n", ">= 1"),
        ([spec("no_repeat_ngram", n=True)], "no_repeat_ngram", "n", "integer"),
        ([spec("no_repeat_ngram", n=2.5)], "no_repeat_ngram", "n", "integer"),
        ([spec("min_length")], "min_length", "min_words", "required"),
        ([spec("min_length", min_words=-1)], "min_length", "min_words", ">= 0"),
        ([spec("min_length", min_words=True)], "min_length", "min_words", "integer"),
        ([spec("min_length", words=3)], "min_length", "words", "unknown parameter"),
        ([spec("synonym_substitution", pairs=[])], "synonym_substitution", "pairs", "required"),
        ([spec("synonym_substitution", pairs=[["dog", "cat"]])], "synonym_substitution", "pairs", "'cat'"),
        ([spec("synonym_substitution", pairs=[["dog"]])], "synonym_substitution", "pairs", "[from, to]"),
        ([spec("synonym_substitution", pairs=["dog"])], "synonym_substitution", "pairs", "[from, to]"),
        ([spec("synonym_substitution", pairs=[["dog", "dog"]])], "synonym_substitution", "pairs", "another"),
        (
            [spec("synonym_substitution", pairs=[["dog", "puppy"], ["dog", "guy"]])],
            "synonym_substitution",
            "pairs",
            "both",
        ),
        (
            [spec("synonym_substitution", pairs={"dog": "puppy"}, direction="to_fine")],
            "synonym_substitution",
            "direction",
            "default table",
        ),
        ([spec("synonym_substitution", direction="up")], "synonym_substitution", "direction", "one of"),
        (
            [spec("synonym_substitution", return_original="yes")],
            "synonym_substitution",
            "return_original",
            "true or false",
        ),
        (
            [spec("synonym_substitution", return_original=1)],
            "synonym_substitution",
            "return_original",
            "true or false",
        ),
        ([spec("synonym_substitution", colour="red")], "synonym_substitution", "colour", "unknown parameter"),
        (
            [spec("synonym_substitution", pairs={"dog": "puppy"})] * 2,
            "synonym_substitution",
            None,
            "only once",
        ),
        ([spec("diverse_beam")], "diverse_beam", "groups", "required"),
        ([spec("diverse_beam", groups=0)], "diverse_beam", "groups", ">= 1"),
        ([spec("diverse_beam", groups=2, diversity_penalty=-1)], "diverse_beam", "diversity_penalty", ">= 0"),
        (
            [spec("diverse_beam", groups=2, diversity_penalty=float("nan"))],
            "diverse_beam",
            "diversity_penalty",
            "finite",
        ),
        (
            [spec("diverse_beam", groups=2, diversity_penalty="1")],
            "diverse_beam",
            "diversity_penalty",
            "number",
        ),
        ([spec("diverse_beam", groups=2)] * 2, "diverse_beam", None, "only once"),
        ([spec("no_repeat_ngram", n=2), spec("ban_words", words=["cat"])], "ban_words", "words", "'cat'"),
    ],
)
def test_registry_errors_name_hook_index_and_param(
    specs: list[Any], hook: str, param: str | None, message: str
) -> None:
    with pytest.raises(HookError, match=message) as err:
        resolve_hooks(specs, VOCAB)
    assert (err.value.hook, err.value.param) == (hook, param)
    index = len(specs) - 1
    assert err.value.index == index
    assert err.value.loc == (("hooks", index, "params", param) if param else ("hooks", index, "name"))
    assert hook in str(err.value)


def test_repeatable_hooks_may_be_given_twice() -> None:
    resolved = resolve_hooks(
        [spec("ban_words", words=["dog"]), spec("ban_words", ids=[GUY]), spec("no_repeat_ngram", n=3)] * 2,
        VOCAB,
    )
    assert (
        len(resolved.processors) == 6 and resolved.names == ["ban_words", "ban_words", "no_repeat_ngram"] * 2
    )
    assert {h.name for h in HOOKS.values() if not h.repeatable} == {
        "synonym_substitution",
        "diverse_beam",
        "force_words",
        "ranker_guided",
    }


def test_a_hook_is_one_record_registered_once() -> None:
    """Each hook is one ``@hook`` record: its params, validation and processor together; the catalogue
    lists the records in registration order, and a name cannot be registered twice."""
    assert (
        [h["name"] for h in hook_catalog()]
        == list(HOOKS)
        == [
            "ban_words",
            "no_repeat_ngram",
            "min_length",
            "synonym_substitution",
            "diverse_beam",
            "force_words",
            "ranker_guided",
        ]
    )
    assert HOOKS["no_repeat_ngram"].params == {"n": "n-gram size, >= 1 (2 stops 'dog dog dog')"}
    with pytest.raises(ValueError, match="registered twice"):
        register_hook("ban_words", "again", {})(lambda p, vocab, out: None)
    assert HOOKS["ban_words"].description == "never emit these words"


def test_registry_limits_and_catalog() -> None:
    resolve_hooks([spec("no_repeat_ngram", n=2)] * MAX_HOOKS, VOCAB)
    with pytest.raises(HookError, match=f"at most {MAX_HOOKS}") as err:
        resolve_hooks([spec("no_repeat_ngram", n=2)] * (MAX_HOOKS + 1), VOCAB)
    assert err.value.loc == ("hooks",)
    catalog = {h["name"]: h for h in hook_catalog()}
    assert (
        set(catalog)
        == set(HOOKS)
        == {
            "ban_words",
            "no_repeat_ngram",
            "min_length",
            "synonym_substitution",
            "diverse_beam",
            "force_words",
            "ranker_guided",
        }
    )
    assert set(catalog["diverse_beam"]["params"]) == {"groups", "diversity_penalty"}
    assert set(catalog["min_length"]["params"]) == {"min_words"}
    # synonym_substitution's record holds all of its parameters, the default table's included
    assert set(catalog["synonym_substitution"]["params"]) == {"pairs", "direction", "return_original"}


# -------------------------------------------------------------------------------------------- substitution
def substitution_of(resolved: Any) -> dict[str, str]:
    """The word pairs of the request's one ``synonym_substitution`` processor."""
    (sub,) = [p for p in resolved.processors if isinstance(p, SynonymSubstitution)]
    return {VOCAB_WORDS[a]: VOCAB_WORDS[b] for a, b in zip(sub.src.tolist(), sub.dst.tolist(), strict=True)}


VOCAB_WORDS = dict(enumerate(VOCAB.words))


def test_no_substitution_hook_asks_for_no_original() -> None:
    assert resolve_hooks(None, VOCAB).compare_without is None
    assert resolve_hooks([], VOCAB).compare_without is None
    assert (
        resolve_hooks(
            [spec("ban_words", words=["dog"]), spec("diverse_beam", groups=2)], VOCAB
        ).compare_without
        is None
    )


def test_default_table_follows_the_seed_and_is_restricted_to_the_vocabulary() -> None:
    # Pantazopoulos et al., 2022, Table 10: "we replace the generated fine-grained word with its synonym"
    # (puppy -> dog)
    default = resolve_hooks([spec("synonym_substitution")], VOCAB)
    assert substitution_of(default) == {"puppy": "dog", "guy": "man"}
    assert default.compare_without == 0  # return_original defaults to true: O is the request without it
    to_fine = resolve_hooks([spec("synonym_substitution", direction="to_fine")], VOCAB)
    assert substitution_of(to_fine) == {"dog": "puppy", "man": "guy"}
    to_category = resolve_hooks([spec("synonym_substitution", direction="to_category")], VOCAB)
    assert substitution_of(to_category) == substitution_of(default)
    table = substitution_pairs(load_concepts())
    assert ("puppies", "dogs") in table and ("man", "person") in table  # plurals; Table 10
    assert dict(table)["jet"] == "plane"  # each S1 word once
    # on a real vocabulary: every pair's two words are in it, plurals included
    big = Vocabulary((*SPECIALS, "puppy", "puppies", "dog", "dogs", "kitten", "cat", "person", "guy"))
    (sub,) = resolve_hooks([spec("synonym_substitution")], big).processors
    assert isinstance(sub, SynonymSubstitution)
    pairs = {big.words[a]: big.words[b] for a, b in zip(sub.src.tolist(), sub.dst.tolist(), strict=True)}
    assert pairs == {"puppy": "dog", "puppies": "dogs", "kitten": "cat"}


def test_return_original_names_the_hook_to_leave_out_among_the_others() -> None:
    hooks = [
        spec("ban_words", words=["grass"]),
        spec("synonym_substitution", pairs=[["dog", "puppy"]]),
        spec("diverse_beam", groups=2),
    ]
    s = resolve_hooks(hooks, VOCAB)
    assert s.compare_without == 1
    o = resolve_hooks([h for i, h in enumerate(hooks) if i != s.compare_without], VOCAB)
    assert o.compare_without is None
    assert [type(p) for p in s.processors] == [BanWords, SynonymSubstitution]
    assert [type(p) for p in o.processors] == [BanWords]
    assert (s.groups, s.diversity_penalty) == (o.groups, o.diversity_penalty) == (2, 0.5)
    assert s.ordered_names == ("ban_words", "synonym_substitution", "diverse_beam")
    assert o.ordered_names == ("ban_words", "diverse_beam")
    lp = np.full((2, V), -4.0, dtype=np.float32)
    lp[:, DOG] = -0.1
    toks = tokens([1], [1])
    out_s, out_o = apply(s.processors, toks, lp), apply(o.processors, toks, lp)
    assert (out_s[:, PUPPY] == 0).all() and np.isneginf(out_s[:, DOG]).all()
    assert (out_o[:, DOG] == lp[:, DOG]).all() and np.isneginf(out_o[:, GRASS]).all()
    assert resolve_hooks([spec("synonym_substitution", return_original=True)], VOCAB).compare_without == 0
    no_o = resolve_hooks([hooks[0], spec("synonym_substitution", return_original=False)], VOCAB)
    assert no_o.compare_without is None
    assert substitution_of(no_o) == {"puppy": "dog", "guy": "man"}


def test_substitution_error_when_no_default_pair_is_in_the_vocabulary() -> None:
    vocab = Vocabulary((*SPECIALS, "a", "dog"))
    with pytest.raises(HookError, match="default synonym table") as err:
        resolve_hooks([spec("no_repeat_ngram", n=2), spec("synonym_substitution")], vocab)
    assert err.value.loc == ("hooks", 1, "params", "pairs")
    # explicit pairs need no table
    (sub,) = resolve_hooks([spec("synonym_substitution", pairs=[["dog", "a"]])], vocab).processors
    assert isinstance(sub, SynonymSubstitution) and (sub.src.tolist(), sub.dst.tolist()) == ([5], [4])


# -------------------------------------------------------------------------------------------- resolve_params
@pytest.fixture(scope="module")
def tiny_vocab(tiny_repo: Path, manifest: Manifest) -> Vocabulary:
    return Vocabulary.load(tiny_repo / manifest.vocabulary.file)


def settings(repo: Path, **overrides: Any) -> Settings:
    base: dict[str, Any] = {"default_beam_size": 3, "max_beam_size": 8, "max_length_cap": 12}
    return Settings(repo=repo, **{**base, **overrides})


def test_defaults_come_from_settings_and_the_manifest(
    tiny_repo: Path, manifest: Manifest, tiny_vocab: Vocabulary
) -> None:
    assert manifest.default_captioner == "butr" and manifest.captioner("butr").max_length == 16
    assert manifest.captioner("butr").ranker == "butr" and manifest.captioner("butd").ranker is None
    p = resolve_params(manifest, tiny_vocab, settings(tiny_repo))
    assert p == SearchParams(model="butr", beam_size=3, n_best=3, max_length=12, ranker="butr")
    assert (p.min_length, p.length_penalty, p.groups, p.diversity_penalty) == (1, 1.0, 1, 0.0)
    assert (p.processors, p.hook_names, p.rerank_weight) == ((), (), 0.0)
    assert p.search_n_best == 3
    wider = resolve_params(manifest, tiny_vocab, settings(tiny_repo, default_beam_size=7, max_length_cap=40))
    assert (wider.beam_size, wider.n_best, wider.max_length) == (7, 7, 16)  # the captioner's own cap
    butd = resolve_params(manifest, tiny_vocab, settings(tiny_repo), model="butd", n_best=2)
    assert (butd.model, butd.ranker, butd.n_best, butd.search_n_best) == ("butd", None, 2, 2)
    reranked = resolve_params(manifest, tiny_vocab, settings(tiny_repo), n_best=1)
    assert reranked.search_n_best == 3  # the ranker reads every finished beam


def test_hooks_become_search_parameters(tiny_repo: Path, manifest: Manifest, tiny_vocab: Vocabulary) -> None:
    p = resolve_params(
        manifest,
        tiny_vocab,
        settings(tiny_repo),
        beam_size=4,
        max_length=6,
        hooks=[
            spec("diverse_beam", groups=2, diversity_penalty=1.5),
            spec("ban_words", words=["dog"]),
            spec("min_length", min_words=6),
            spec("no_repeat_ngram", n=2),
        ],
    )
    assert (p.groups, p.diversity_penalty, p.min_length) == (2, 1.5, 6)
    assert [type(x) for x in p.processors] == [BanWords, NoRepeatNgram]
    assert p.hook_names == ("ban_words", "min_length", "no_repeat_ngram", "diverse_beam")
    zero = resolve_params(manifest, tiny_vocab, settings(tiny_repo), hooks=[spec("min_length", min_words=0)])
    assert zero.min_length == 1 and zero.hook_names == ("min_length",)


@pytest.mark.parametrize(
    ("options", "error", "field"),
    [
        ({"model": "gpt"}, UnknownModelError, "model"),
        ({"beam_size": 0}, InvalidParameterError, "beam_size"),
        ({"beam_size": 9}, InvalidParameterError, "beam_size"),  # settings.max_beam_size = 8
        ({"beam_size": 4, "n_best": 5}, InvalidParameterError, "n_best"),
        ({"n_best": 0}, InvalidParameterError, "n_best"),
        ({"max_length": 0}, InvalidParameterError, "max_length"),
        ({"max_length": 13}, InvalidParameterError, "max_length"),  # settings.max_length_cap = 12
        ({"length_penalty": -0.1}, InvalidParameterError, "length_penalty"),
        ({"length_penalty": MAX_LENGTH_PENALTY + 0.1}, InvalidParameterError, "length_penalty"),
        ({"model": "butd", "rerank": True}, InvalidParameterError, "rerank"),  # butd has no ranker
        ({"rerank": "nope"}, UnknownModelError, "rerank"),
        ({"rerank": False, "rerank_weight": 0.5}, InvalidParameterError, "rerank_weight"),
        ({"model": "butd", "rerank_weight": 0.5}, InvalidParameterError, "rerank_weight"),
        ({"rerank_weight": -0.5}, InvalidParameterError, "rerank_weight"),
        ({"rerank_weight": MAX_RERANK_WEIGHT + 0.5}, InvalidParameterError, "rerank_weight"),
        ({"hooks": [spec("no_repeat_ngram", n=0)]}, InvalidParameterError, "hooks.0.params.n"),
        ({"hooks": [spec("ban_words", words=["dog"]), spec("nope")]}, InvalidParameterError, "hooks.1.name"),
        ({"hooks": [spec("no_repeat_ngram", n=2)] * (MAX_HOOKS + 1)}, InvalidParameterError, "hooks"),
        (
            {"beam_size": 3, "hooks": [spec("diverse_beam", groups=2)]},
            InvalidParameterError,
            "hooks.0.params.groups",
        ),
        (
            {"max_length": 4, "hooks": [spec("ban_words", ids=[5]), spec("min_length", min_words=5)]},
            InvalidParameterError,
            "hooks.1.params.min_words",
        ),
        (
            {"hooks": [spec("synonym_substitution", pairs=[["dog", "unicorn"]])]},
            InvalidParameterError,
            "hooks.0.params.pairs",
        ),
        (
            {"hooks": [spec("synonym_substitution", pairs=[["dog", "kitten"]], return_original="yes")]},
            InvalidParameterError,
            "hooks.0.params.return_original",
        ),
    ],
)
def test_resolve_params_errors_name_the_option(
    tiny_repo: Path,
    manifest: Manifest,
    tiny_vocab: Vocabulary,
    options: dict[str, Any],
    error: type[EngineError],
    field: str,
) -> None:
    with pytest.raises(error) as err:
        resolve_params(manifest, tiny_vocab, settings(tiny_repo), **options)
    assert type(err.value) is error
    assert err.value.field == field
    assert err.value.message == str(err.value) and err.value.message


def test_resolve_params_bounds_are_inclusive(
    tiny_repo: Path, manifest: Manifest, tiny_vocab: Vocabulary
) -> None:
    s = settings(tiny_repo)
    p = resolve_params(manifest, tiny_vocab, s, beam_size=8, n_best=8, max_length=12, length_penalty=2.0)
    assert (p.beam_size, p.n_best, p.max_length, p.length_penalty) == (8, 8, 12, MAX_LENGTH_PENALTY)
    one = resolve_params(manifest, tiny_vocab, s, beam_size=1, max_length=1, length_penalty=0.0)
    assert (one.beam_size, one.n_best, one.max_length, one.length_penalty) == (1, 1, 1, 0.0)
    top = resolve_params(
        manifest, tiny_vocab, settings(tiny_repo, max_beam_size=100, default_beam_size=5), beam_size=100
    )
    assert top.beam_size == 100 and top.n_best == 100


def test_rerank_options(tiny_repo: Path, manifest: Manifest, tiny_vocab: Vocabulary) -> None:
    s = settings(tiny_repo)

    def ranker(**options: Any) -> str | None:
        return resolve_params(manifest, tiny_vocab, s, **options).ranker

    assert ranker() == "butr" and ranker(rerank=None) == "butr" and ranker(rerank=True) == "butr"
    assert ranker(rerank=False) is None
    assert ranker(rerank="vsepp") == "vsepp" and ranker(model="butd", rerank="vsepp") == "vsepp"
    assert ranker(model="butd") is None and ranker(model="butd", rerank=False) is None
    weighted = resolve_params(manifest, tiny_vocab, s, rerank="vsepp", rerank_weight=MAX_RERANK_WEIGHT)
    assert (weighted.ranker, weighted.rerank_weight) == ("vsepp", MAX_RERANK_WEIGHT)
    assert weighted.search_n_best == weighted.beam_size


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"beam_size": 0}, "beam_size"),
        ({"beam_size": 2, "n_best": 3}, "n_best"),
        ({"max_length": 0}, "max_length"),
        ({"max_length": 3, "min_length": 4}, "min_length"),
        ({"length_penalty": 2.5}, "length_penalty"),
        ({"beam_size": 4, "n_best": 1, "groups": 3}, "groups"),
        ({"diversity_penalty": -1.0}, "diversity_penalty"),
        ({"rerank_weight": 0.5}, "rerank_weight needs a ranker"),
    ],
)
def test_search_params_validate_themselves(kwargs: dict[str, Any], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        SearchParams(model="toy", **kwargs)


# -------------------------------------------------------------------------------------------- subword
def test_ban_sequences_bans_a_word_of_several_tokens_only_where_it_would_complete() -> None:
    ban = BanSequences([[DOG, PUPPY], [MAN]])
    lp = logprobs(3)
    toks = tokens([1, A, DOG], [1, DOG, A], [1, BIG, DOG])
    out = ban(toks, lp)
    assert np.isneginf(out[:, MAN]).all()  # one token: banned everywhere
    assert np.isneginf(out[0, PUPPY]) and np.isneginf(out[2, PUPPY])  # after DOG: PUPPY would complete it
    assert out[1, PUPPY] == lp[1, PUPPY]  # not after DOG
    with pytest.raises(ValueError, match="non-empty"):
        BanSequences([[]])


def test_hooks_on_a_subword_captioner(tmp_path: Path) -> None:
    from compcap_lab.snapshots.tokenizer import bpe
    from service.text.subword import SubwordVocabulary

    fast = bpe()
    fast.save_pretrained(tmp_path)
    sub = SubwordVocabulary.load(tmp_path / "tokenizer.json", len(fast), 0, 0, 1)
    dog = sub.word_sequences("dog")
    assert dog == [sub.encode(" dog")] and len(dog[0]) == 2  # "▁do" "g": one sequence (Metaspace)
    (ban,) = resolve_hooks([spec("ban_words", words=["dog", "red"], ids=[5])], sub).processors
    assert isinstance(ban, BanSequences) and ban.longer == [tuple(dog[0])]
    assert sorted(ban.single.tolist()) == sorted([5, *sub.encode(" red")])
    (swap,) = resolve_hooks([spec("synonym_substitution", pairs=[["a", "the"]])], sub).processors
    assert isinstance(swap, SynonymSubstitution) and swap.src.tolist() == sub.encode(" a")
    (longer,) = resolve_hooks([spec("synonym_substitution", pairs=[["dog", "cat"]])], sub).processors
    assert isinstance(longer, SynonymSubstitution) and longer.src.tolist() == dog[0][:1]  # its first token
    with pytest.raises(HookError, match="not a word id"):
        resolve_hooks([spec("ban_words", ids=[0])], sub)  # the start / end token
