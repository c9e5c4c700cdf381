"""NGSM (Wan et al., 2022, Eqs. 1–4), dominance/Perron ranking (Eq. 7, Algorithm 2), Spearman,
duplicated captions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from service.compare.ngsm import (
    discrepancy_order,
    ngram_counts,
    ngsm,
    ngsm_n,
    ngsm_orders,
    ngsm_profile,
    pairwise_ngsm,
)
from service.compare.ranking import (
    dominance_matrix,
    extend_scores,
    perron_check,
    perron_vector,
    rank_stability,
    ranking,
    spearman,
)
from service.compare.repetition import duplicated_rate, duplicated_word

WORDS = ["a", "dog", "cat", "on", "the", "grass", "red", "sits"]


def _random_captions(seed: int, count: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(0, 12)))) for _ in range(count)]


# --- NGSM ---------------------------------------------------------------------------------------------


def test_ngram_counts_exact_order() -> None:
    assert ngram_counts(["a", "b", "a", "b"], 2) == {("a", "b"): 2, ("b", "a"): 1}
    assert ngram_counts(["a", "b"], 3) == {}
    with pytest.raises(ValueError, match="n"):
        ngram_counts(["a"], 0)


def test_ngsm_symmetric_and_in_range_on_random_sequences() -> None:
    caps = _random_captions(0, 120)
    for a, b in zip(caps[::2], caps[1::2], strict=True):
        s_ab, s_ba = ngsm_profile(a, b), ngsm_profile(b, a)
        assert s_ab == s_ba
        assert 0.0 <= s_ab[0] <= 1.0 and 0.0 <= s_ab[1] <= 1.0
        for n in range(1, 5):
            v = ngsm_n(a.split(), b.split(), n)
            assert v == ngsm_n(b.split(), a.split(), n)
            assert v is None or 0.0 <= v <= 1.0


def test_identical_is_one_disjoint_is_zero() -> None:
    for c in _random_captions(1, 20):
        assert ngsm(c, c) == 1.0
    assert ngsm("a red dog sits", "two cats sleeping here") == 0.0
    assert ngsm_profile("a red dog sits", "two cats sleeping here") == (0.0, 0.0)


def test_permutation_keeps_unigrams_lowers_higher_orders() -> None:
    rng = np.random.default_rng(2)
    a = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]
    for _ in range(20):
        perm = rng.permutation(10)
        if (perm == np.arange(10)).all():
            continue
        b = [a[i] for i in perm]
        assert ngsm_n(a, b, 1) == 1.0
        for n in range(2, 5):
            v = ngsm_n(a, b, n)
            assert v is not None and v < 1.0  # distinct words: the bigrams fix the order
        assert ngsm(" ".join(a), " ".join(b)) < 1.0


def test_hand_computed_value() -> None:
    a, b = "The dog and the dog ran.", "the dog ran"
    # n=1: a {the:2, dog:2, and:1, ran:1} (U=6), b {the, dog, ran} (U=3); Cl=1+1+1=3 -> 3/(6+3-3) = 1/2
    # n=2: a {the dog:2, dog and, and the, dog ran} (U=5), b {the dog, dog ran} (U=2); Cl=min(2,1)+1=2
    #      -> 2/(5+2-2) = 2/5
    # n=3: a {the dog and, dog and the, and the dog, the dog ran} (U=4), b {the dog ran}; Cl=1 -> 1/4
    # n=4: a has 3 four-grams, b none -> 0/(3+0-0) = 0 (defined: only one caption is too short)
    ta, tb = a.lower().replace(".", "").split(), b.split()
    assert [ngsm_n(ta, tb, n) for n in (1, 2, 3, 4)] == [0.5, 0.4, 0.25, 0.0]
    s3, mean3 = ngsm_profile(a, b, max_n=3)
    assert s3 == pytest.approx((0.5 * 0.4 * 0.25) ** (1 / 3), abs=1e-12)  # (1/20)^(1/3) = 0.368403
    assert s3 == pytest.approx(0.368403, abs=1e-6)
    assert mean3 == pytest.approx(1.15 / 3, abs=1e-12)
    assert ngsm_profile(a, b) == (0.0, pytest.approx(1.15 / 4, abs=1e-12))  # the zero at n=4 -> S=0


def test_skip_rule_for_short_captions() -> None:
    assert ngsm_n(["a", "dog"], ["a", "cat"], 3) is None
    # n=3, 4 exist in neither caption: skipped, so identical short captions stay at 1 (0 if counted as 0)
    assert ngsm("a dog", "a dog") == 1.0
    assert ngsm("dog", "Dog!") == 1.0
    # "a dog" vs "a cat": n=1 -> 1/(2+2-1) = 1/3, n=2 -> 0; mean over the defined orders only = 1/6
    # (counting skipped orders as 1 would give 7/12, as 0 would give 1/12)
    assert ngsm_profile("a dog", "a cat") == (0.0, pytest.approx(1 / 6, abs=1e-12))
    # one caption long enough for n=2, the other not: defined and 0
    assert ngsm_profile("dog", "a dog") == (0.0, pytest.approx(0.5 / 2, abs=1e-12))


def test_empty_captions_and_max_n_validation() -> None:
    assert ngsm("", "") == 1.0
    assert ngsm("...", "") == 1.0  # no tokens after tokenisation
    assert ngsm("a dog", "") == 0.0
    assert ngsm("", "a dog") == 0.0
    assert ngsm_profile("a dog", "") == (0.0, 0.0) and ngsm_profile("", "") == (1.0, 1.0)
    with pytest.raises(ValueError, match="max_n"):
        ngsm("a", "a", max_n=0)
    with pytest.raises(ValueError, match="max_n"):
        pairwise_ngsm(["a"], max_n=0)


def test_per_order_overlaps_are_what_ngsm_is_the_geometric_mean_of() -> None:
    # the demo's case: five shared words, yet no shared 4-gram -> S = 0
    a, b = "a plane over the lake", "a brown plane flying over the lake"
    # n=1: 5 shared of 5 + 7 -> 5/7; n=2: {over the, the lake} -> 2/(4+6-2); n=3: {over the lake} -> 1/(3+5-1)
    assert ngsm_orders(a, b) == [5 / 7, 2 / 8, 1 / 7, 0.0]
    assert ngsm(a, b) == 0.0
    assert ngsm_profile(a, b)[1] == pytest.approx((5 / 7 + 1 / 4 + 1 / 7) / 4, abs=1e-12)
    # orders neither caption reaches are None (skipped by S), one too short gives 0
    assert ngsm_orders("a dog", "a dog") == [1.0, 1.0, None, None]
    assert ngsm_orders("dog", "a dog") == [0.5, 0.0, None, None]
    assert ngsm_orders("", "") == [None] * 4 and ngsm_orders("a dog", "") == [0.0, 0.0, None, None]
    assert len(ngsm_orders(a, b, max_n=2)) == 2
    with pytest.raises(ValueError, match="max_n"):
        ngsm_orders(a, b, max_n=0)
    rng = np.random.default_rng(3)
    words = ["a", "dog", "cat", "on", "the", "grass"]
    for _ in range(200):
        x, y = (" ".join(rng.choice(words, rng.integers(1, 8))) for _ in range(2))
        defined = [v for v in ngsm_orders(x, y) if v is not None]
        mean = math.exp(sum(math.log(v) for v in defined) / len(defined)) if min(defined) > 0 else 0.0
        assert ngsm(x, y) == pytest.approx(mean, abs=1e-12)


def test_discrepancy_order_tie_break() -> None:
    sims = [
        ngsm_profile("a dog on the grass", "a dog on the grass"),  # 1.0
        ngsm_profile("a dog", "a cat"),  # (0, 1/6)
        ngsm_profile("a red dog", "two blue cats"),  # (0, 0)
        ngsm_profile("a dog on grass", "a dog on sand"),  # (0, >1/6): shares more
        ngsm_profile("a red dog", "two blue cats"),  # (0, 0) again: exact tie with index 2
    ]
    assert sims[2] == (0.0, 0.0) and sims[3][0] == 0.0 and sims[3][1] > sims[1][1]
    assert discrepancy_order(sims) == [2, 4, 1, 3, 0]
    assert discrepancy_order(sims, keys=["e", "d", "z", "c", "b"]) == [4, 2, 1, 3, 0]
    with pytest.raises(ValueError, match="keys"):
        discrepancy_order(sims, keys=["a"])
    with pytest.raises(ValueError, match="NaN"):
        discrepancy_order([(float("nan"), 0.0)])


def test_pairwise_ngsm_matrix() -> None:
    caps = [*_random_captions(3, 6), ""]
    mat = pairwise_ngsm(caps)
    assert mat.shape == (7, 7)
    np.testing.assert_array_equal(mat, mat.T)
    np.testing.assert_array_equal(np.diag(mat), np.ones(7))
    assert mat[0, 1] == ngsm(caps[0], caps[1])
    assert pairwise_ngsm([]).shape == (0, 0)


# --- dominance and Perron ranking ---------------------------------------------------------------------


def _p_from_strengths(strength: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """p[i, j] = score of model i on D_ij, with noise; the diagonal is NaN (never read)."""
    m = len(strength)
    p = np.outer(strength, np.ones(m)) * rng.uniform(0.8, 1.2, size=(m, m))
    np.fill_diagonal(p, np.nan)
    return p


def test_dominance_reciprocity_and_floor() -> None:
    rng = np.random.default_rng(4)
    p = rng.uniform(0.0, 2.0, size=(6, 6))
    p[0, 1] = 0.0
    F = dominance_matrix(p)
    off = ~np.eye(6, dtype=bool)
    np.testing.assert_allclose((F * F.T)[off], 1.0, rtol=1e-12)
    np.testing.assert_array_equal(np.diag(F), np.ones(6))
    assert F[0, 1] == pytest.approx(1e-3 / p[1, 0]) and F[1, 0] == pytest.approx(p[1, 0] / 1e-3)
    assert F[2, 3] == pytest.approx(p[2, 3] / p[3, 2])


@pytest.mark.parametrize(
    "bad",
    [np.ones((2, 3)), np.array([[1.0, -0.1], [1.0, 1.0]]), np.array([[1.0, np.nan], [1.0, 1.0]])],
)
def test_dominance_rejects_bad_p(bad: np.ndarray) -> None:
    with pytest.raises(ValueError, match="p"):
        dominance_matrix(bad)


def test_perron_on_random_positive_matrices() -> None:
    rng = np.random.default_rng(5)
    for m in range(2, 9):
        for _ in range(3):
            F = rng.uniform(0.05, 10.0, size=(m, m))
            check = perron_check(F)
            assert check["residual"] <= 1e-9
            assert check["max_abs_diff"] <= 1e-9
            assert check["lambda_power"] == pytest.approx(check["lambda_eig"], rel=1e-10)
            q, _ = perron_vector(F)
            assert q.sum() == pytest.approx(1.0, abs=1e-12) and (q > 0).all()


def test_perron_on_reciprocal_matrices() -> None:
    rng = np.random.default_rng(6)
    for m in range(2, 9):
        F = dominance_matrix(_p_from_strengths(rng.uniform(0.2, 1.5, size=m), rng))
        check = perron_check(F)
        assert check["residual"] <= 1e-9 and check["max_abs_diff"] <= 1e-9
        assert check["lambda_eig"] >= m - 1e-9  # Perron value of a positive reciprocal matrix is >= m
        assert 0.0 <= check["cesaro_gap"] < 0.5


def test_perron_consistent_reciprocal_matrix_recovers_strengths() -> None:
    s = np.array([0.3, 1.2, 0.7, 2.0])
    F = s[:, None] / s[None, :]  # consistent: F = s sᵀ⁻¹, Perron vector ∝ s, λ = m
    q, lam = perron_vector(F)
    np.testing.assert_allclose(q, s / s.sum(), atol=1e-12)
    assert lam == pytest.approx(4.0, abs=1e-10)


def test_perron_rejects_and_fails_to_converge() -> None:
    with pytest.raises(ValueError, match="F"):
        perron_vector(np.array([[1.0, 0.0], [1.0, 1.0]]))
    with pytest.raises(ValueError, match="F"):
        perron_vector(np.ones((2, 3)))
    with pytest.raises(RuntimeError):
        perron_vector(np.array([[1.0, 5.0], [0.2, 1.0]]) + np.array([[0.0, 0.0], [0.0, 3.0]]), max_iter=2)


def test_model_losing_every_pair_ranks_last() -> None:
    names = ["alpha", "beta", "loser", "delta"]
    p = np.array(
        [
            [0.0, 0.9, 0.8, 1.1],
            [1.0, 0.0, 0.6, 0.7],
            [0.5, 0.4, 0.0, 0.3],  # 'loser' scores below its opponent on every D_{loser, j}
            [1.2, 0.9, 0.5, 0.0],
        ]
    )
    F = dominance_matrix(p)
    assert (F[2, [0, 1, 3]] < 1).all()
    q, _ = perron_vector(F)
    order = ranking(q, names)
    assert order[-1] == "loser"
    assert order[0] == "delta"  # delta beats alpha (1.2/1.1) and beta (0.9/0.7), loses nothing by much


def test_ranking_ties_by_name() -> None:
    assert ranking(np.array([0.2, 0.5, 0.2, 0.1]), ["d", "b", "a", "c"]) == ["b", "a", "d", "c"]
    with pytest.raises(ValueError):
        ranking(np.array([0.5]), ["a", "b"])


def test_extend_scores_equals_full_computation() -> None:
    rng = np.random.default_rng(7)
    for m in (2, 4, 6):
        full = _p_from_strengths(rng.uniform(0.2, 1.5, size=m + 1), rng)
        ext = extend_scores(full[:m, :m], full[m, :m].tolist(), full[:m, m].tolist())
        assert ext.shape == (m + 1, m + 1)
        off = ~np.eye(m + 1, dtype=bool)
        np.testing.assert_array_equal(ext[off], full[off])
        q_ext, lam_ext = perron_vector(dominance_matrix(ext))
        q_full, lam_full = perron_vector(dominance_matrix(full))
        np.testing.assert_allclose(q_ext, q_full, atol=1e-12)
        assert lam_ext == pytest.approx(lam_full, rel=1e-12)
        names = [f"m{i}" for i in range(m + 1)]
        assert ranking(q_ext, names) == ranking(q_full, names)
    with pytest.raises(ValueError):
        extend_scores(np.ones((2, 2)), [1.0], [1.0, 1.0])


# --- Spearman and rank stability ----------------------------------------------------------------------


def test_spearman_hand_values() -> None:
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    # no ties: 1 - 6 Σd² / (n(n²-1)) with d = (-1, 1, -1, 1, 0): 1 - 6·4/120 = 0.8
    assert spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8, abs=1e-12)
    # ties: ranks of b = (1, 2, 3.5, 5, 3.5); centred a = (-2,-1,0,1,2), b = (-2,-1,.5,2,.5)
    # r = 8 / sqrt(10 · 9.5) = 0.8207826816681233
    assert spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(8 / math.sqrt(95), abs=1e-12)
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
    with pytest.raises(ValueError):
        spearman([1, 2], [1, 2, 3])
    with pytest.raises(ValueError):
        spearman([1], [1])


def test_rank_stability_shape() -> None:
    rng = np.random.default_rng(8)
    strength = np.array([0.4, 0.9, 0.6, 1.3, 0.2])
    p_by_k = {
        70: _p_from_strengths(strength, rng),
        5: _p_from_strengths(1.0 / strength, rng),  # every pairwise order reversed
        40: _p_from_strengths(np.array([0.4, 0.9, 0.6, 0.2, 1.3]), rng),  # two models swapped
    }
    out = rank_stability(p_by_k)
    assert list(out) == [5, 40, 70]
    assert out[70] == pytest.approx(1.0)
    assert out[5] == pytest.approx(-1.0)
    # ranks (2, 4, 3, 1, 5) vs (2, 4, 3, 5, 1): Σd² = 32 -> 1 - 6·32/120 = -0.6
    assert out[40] == pytest.approx(-0.6)
    with pytest.raises(ValueError):
        rank_stability({})


# --- duplicated captions ------------------------------------------------------------------------------


def test_duplicated_word() -> None:
    assert duplicated_word("a dog dog dog on grass") == "dog"
    assert duplicated_word("a man holding a man") is None
    assert duplicated_word("a dog dog on grass") is None
    assert duplicated_word("a dog dog on grass", run=2) == "dog"
    assert duplicated_word("Red red RED. cats cats cats cats") == "red"
    assert duplicated_word("") is None
    with pytest.raises(ValueError, match="run"):
        duplicated_word("a a a", run=1)


def test_duplicated_rate() -> None:
    caps = ["a dog dog dog", "a cat", "the the the cat cat cat", "a dog dog dog dog"]
    assert duplicated_rate(caps) == {"captions": 4, "duplicated": 3, "rate": 0.75, "classes": 3}
    assert duplicated_rate([]) == {"captions": 0, "duplicated": 0, "rate": 0.0, "classes": 0}
