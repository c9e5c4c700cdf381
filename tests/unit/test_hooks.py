"""Decoding hooks: each processor's exact effect on hand-made log-prob matrices, and the registry that
builds a request's ``HookPlan`` from JSON (errors name the hook and the parameter)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pydantic
import pytest

from service.engine.hooks import (
    HOOKS,
    MAX_HOOKS,
    BanWords,
    HookChain,
    HookError,
    LogitsHook,
    MinLength,
    NoRepeatNgram,
    SynonymSubstitution,
    build_hooks,
    hook_catalog,
)
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
        [1, DOG, DOG, DOG],  # "dog dog" seen: a third "dog" would repeat it (seed 003's duplicates)
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


def test_min_length_blocks_eos_until_min_words() -> None:
    lp = logprobs(2)
    toks = tokens([1, A, BIG], [1, A, DOG])  # two words each
    np.testing.assert_array_equal(MinLength(3, VOCAB.eos_id)(toks, lp), expect(lp, [(0, 2), (1, 2)]))
    np.testing.assert_array_equal(MinLength(2, VOCAB.eos_id)(toks, lp), lp)
    with pytest.raises(ValueError, match="min_words"):
        MinLength(-1, 2)


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
    for hook in (BanWords([DOG]), NoRepeatNgram(1), MinLength(5, 2), SynonymSubstitution({DOG: PUPPY})):
        assert isinstance(hook, LogitsHook)
        out = hook(toks, lp)
        assert out.shape == lp.shape and out is not lp
    np.testing.assert_array_equal(lp, before)
    np.testing.assert_array_equal(toks, toks_before)


# -------------------------------------------------------------------------------------------- registry
def spec(name: str, **params: Any) -> dict[str, Any]:
    return {"name": name, "params": params}


def test_build_composes_in_request_order() -> None:
    plan = build_hooks(
        [
            spec("ban_words", words=["grass", "On"]),
            spec("no_repeat_ngram", n=2),
            spec("min_length", min_words=3),
        ],
        VOCAB,
    )
    assert plan.names == ["ban_words", "no_repeat_ngram", "min_length"]
    assert plan.groups == 1 and not plan.return_original
    chain = plan.logits_hook()
    assert isinstance(chain, HookChain)
    lp = logprobs(2)
    toks = tokens([1, A, A], [1, A, DOG])
    want = expect(lp, [(0, GRASS), (1, GRASS), (0, ON), (1, ON), (0, A), (0, 2), (1, 2)])
    np.testing.assert_array_equal(chain(toks, lp), want)
    assert plan.counts == {"ban_words": 1, "no_repeat_ngram": 1, "min_length": 1}


def test_empty_plan_changes_nothing() -> None:
    for specs in (None, []):
        plan = build_hooks(specs, VOCAB)
        assert plan.search_kwargs() == {"logits_hook": None, "groups": 1, "diversity_penalty": 0.0}
        assert plan.names == [] and plan.substitutions == 0
        plan.check(beam_size=3, max_length=2)


def test_ban_words_by_id_and_pydantic_specs() -> None:
    class Spec(pydantic.BaseModel):
        name: str
        params: dict[str, Any] = {}

    plan = build_hooks(
        [Spec(name="ban_words", params={"ids": [DOG]}), Spec(name="no_repeat_ngram", params={"n": 2})], VOCAB
    )
    ban = plan.processors[0][1]
    assert isinstance(ban, BanWords) and ban.ids.tolist() == [DOG]


def test_synonym_substitution_from_json() -> None:
    plan = build_hooks([spec("synonym_substitution", pairs=[["dog", "puppy"], ["man", "guy"]])], VOCAB)
    sub = plan.substitution
    assert isinstance(sub, SynonymSubstitution)
    assert dict(zip(sub.src.tolist(), sub.dst.tolist(), strict=True)) == {DOG: PUPPY, MAN: GUY}
    assert plan.return_original  # default: the API also returns the original caption
    as_map = build_hooks([spec("synonym_substitution", pairs={"dog": "puppy"}, return_original=False)], VOCAB)
    assert not as_map.return_original
    assert as_map.substitution is not None and as_map.substitution.src.tolist() == [DOG]


def test_synonym_substitution_default_table_follows_the_seed() -> None:
    # seed 001 Table 10: "we replace the generated fine-grained word with its synonym" (puppy -> dog)
    plan = build_hooks([spec("synonym_substitution")], VOCAB)
    sub = plan.substitution
    assert sub is not None
    assert dict(zip(sub.src.tolist(), sub.dst.tolist(), strict=True)) == {PUPPY: DOG, GUY: MAN}
    rev = build_hooks([spec("synonym_substitution", direction="to_fine")], VOCAB).substitution
    assert rev is not None
    assert dict(zip(rev.src.tolist(), rev.dst.tolist(), strict=True)) == {DOG: PUPPY, MAN: GUY}
    table = substitution_pairs(load_concepts())
    assert ("puppies", "dogs") in table and ("man", "person") in table  # plurals; Table 10
    assert dict(table)["jet"] == "plane"  # each S1 word once


def test_plan_counts_applications_and_leaves_out_substitution_for_the_original() -> None:
    calls: list[tuple[str, int]] = []
    plan = build_hooks(
        [
            spec("ban_words", words=["grass"]),
            spec("synonym_substitution", pairs=[["dog", "puppy"]]),
            spec("diverse_beam", groups=2),
        ],
        VOCAB,
        on_apply=lambda name, rows: calls.append((name, rows)),
    )
    lp = np.full((2, V), -4.0, dtype=np.float32)
    lp[:, DOG] = -0.1
    toks = tokens([1], [1])
    s_hook = plan.search_kwargs()["logits_hook"]
    o_kwargs = plan.search_kwargs(substitute=False)
    assert o_kwargs["groups"] == 2 and o_kwargs["diversity_penalty"] == 0.5
    out_s = s_hook(toks, lp)
    out_o = o_kwargs["logits_hook"](toks, lp)
    assert (out_s[:, PUPPY] == 0).all() and (out_o[:, DOG] == lp[:, DOG]).all()
    assert plan.counts == {"ban_words": 2, "synonym_substitution": 1, "diverse_beam": 2}
    assert calls == [
        ("ban_words", 2),
        ("synonym_substitution", 2),
        ("diverse_beam", 2),
        ("ban_words", 2),
        ("diverse_beam", 2),
    ]
    assert plan.substitutions == 2


def test_diverse_beam_alone_is_counted_and_checked() -> None:
    plan = build_hooks([spec("diverse_beam", groups=3, diversity_penalty=2)], VOCAB)
    kwargs = plan.search_kwargs()
    assert kwargs["groups"] == 3 and kwargs["diversity_penalty"] == 2.0
    lp = logprobs(2)
    np.testing.assert_array_equal(kwargs["logits_hook"](tokens([1], [1]), lp), lp)
    assert plan.counts == {"diverse_beam": 1}
    plan.check(beam_size=6)
    with pytest.raises(HookError, match="groups") as err:
        plan.check(beam_size=4)
    assert (err.value.hook, err.value.param) == ("diverse_beam", "groups")
    with pytest.raises(HookError, match="groups"):
        plan.check(beam_size=2)


def test_min_length_checked_against_max_length() -> None:
    plan = build_hooks([spec("min_length", min_words=5)], VOCAB)
    plan.check(beam_size=2, max_length=5)
    with pytest.raises(HookError) as err:
        plan.check(beam_size=2, max_length=4)
    assert (err.value.hook, err.value.param) == ("min_length", "min_words")


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
        ([spec("ban_words", words=["dog"], colour="red")], "ban_words", "colour", "unknown parameter"),
        ([spec("no_repeat_ngram")], "no_repeat_ngram", "n", "required"),
        ([spec("no_repeat_ngram", n=0)], "no_repeat_ngram", "n", ">= 1"),
        ([spec("no_repeat_ngram", n=True)], "no_repeat_ngram", "n", "integer"),
        ([spec("no_repeat_ngram", n=2.5)], "no_repeat_ngram", "n", "integer"),
        ([spec("min_length", min_words=-1)], "min_length", "min_words", ">= 0"),
        ([spec("min_length", words=3)], "min_length", "words", "unknown parameter"),
        ([spec("synonym_substitution", pairs=[["dog", "cat"]])], "synonym_substitution", "pairs", "'cat'"),
        ([spec("synonym_substitution", pairs=[["dog"]])], "synonym_substitution", "pairs", "[from, to]"),
        ([spec("synonym_substitution", pairs=[["dog", "dog"]])], "synonym_substitution", "pairs", "another"),
        ([spec("synonym_substitution", pairs=[])], "synonym_substitution", "pairs", "empty"),
        (
            [spec("synonym_substitution", pairs=[["dog", "puppy"], ["dog", "guy"]])],
            "synonym_substitution",
            "pairs",
            "both",
        ),
        ([spec("synonym_substitution", direction="up")], "synonym_substitution", "direction", "one of"),
        (
            [spec("synonym_substitution", pairs={"dog": "puppy"}, direction="to_fine")],
            "synonym_substitution",
            "direction",
            "default table",
        ),
        (
            [spec("synonym_substitution", return_original="yes")],
            "synonym_substitution",
            "return_original",
            "true or false",
        ),
        ([spec("synonym_substitution")] * 2, "synonym_substitution", None, "only once"),
        ([spec("diverse_beam")], "diverse_beam", "groups", "required"),
        ([spec("diverse_beam", groups=0)], "diverse_beam", "groups", ">= 1"),
        ([spec("diverse_beam", groups=2, diversity_penalty=-1)], "diverse_beam", "diversity_penalty", ">= 0"),
        (
            [spec("diverse_beam", groups=2, diversity_penalty=float("nan"))],
            "diverse_beam",
            "diversity_penalty",
            "finite",
        ),
        ([spec("diverse_beam", groups=2)] * 2, "diverse_beam", None, "only once"),
    ],
)
def test_registry_errors_name_hook_and_param(
    specs: list[Any], hook: str, param: str | None, message: str
) -> None:
    with pytest.raises(HookError, match=message) as err:
        build_hooks(specs, VOCAB)
    assert (err.value.hook, err.value.param) == (hook, param)
    index = len(specs) - 1
    assert err.value.index == index
    assert err.value.loc == (("hooks", index, "params", param) if param else ("hooks", index, "name"))
    assert hook in str(err.value)


def test_registry_error_when_no_default_pair_is_in_the_vocabulary() -> None:
    vocab = Vocabulary((*SPECIALS, "a", "dog"))
    with pytest.raises(HookError, match="default synonym table") as err:
        build_hooks([spec("synonym_substitution")], vocab)
    assert err.value.param == "pairs"


def test_registry_limits_and_catalog() -> None:
    with pytest.raises(HookError, match=f"at most {MAX_HOOKS}") as err:
        build_hooks([spec("no_repeat_ngram", n=2)] * (MAX_HOOKS + 1), VOCAB)
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
        }
    )
    assert set(catalog["diverse_beam"]["params"]) == {"groups", "diversity_penalty"}
