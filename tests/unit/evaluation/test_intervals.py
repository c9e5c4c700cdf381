"""``service.evaluation.intervals``: the two-stage bootstrap interval covers the true mean about as
often as it says, is reproducible from its seed, the paired test's p-value is small for a real
difference and large for none, and the sizing rule inverts the variance it is built from."""

from __future__ import annotations

import numpy as np
import pytest

from service.evaluation.intervals import (
    Z95,
    between_sd,
    binary_units,
    bootstrap_interval,
    bootstrap_sums,
    images_per_group,
    mean_of_means,
    paired_test,
    ratio_interval,
    stratified_interval,
)


def hits(rng: np.random.Generator, rates: list[float], images: int) -> list[list[float]]:
    return [list((rng.random(images) < r).astype(float)) for r in rates]


def test_the_estimate_is_the_mean_of_group_means_and_empty_groups_are_left_out() -> None:
    groups = [[1.0, 0.0, 0.0, 1.0], [1.0], [], [0.0, 0.0]]
    assert mean_of_means(groups) == pytest.approx((0.5 + 1.0 + 0.0) / 3)
    found = bootstrap_interval(groups)
    assert found is not None and found.estimate == pytest.approx(0.5)
    assert found.groups == 3 and found.units == 7 and found.low <= 0.5 <= found.high
    assert bootstrap_interval([[], []]) is None and mean_of_means([]) is None


def test_the_same_seed_gives_the_same_interval() -> None:
    data = hits(np.random.default_rng(1), [0.1, 0.3, 0.5, 0.2], 12)
    assert bootstrap_interval(data, seed=3) == bootstrap_interval(data, seed=3)
    assert bootstrap_interval(data, seed=3) != bootstrap_interval(data, seed=4)


def test_coverage_is_near_the_level() -> None:
    """200 data sets of 24 pairs × 20 images, pair rates spread around 0.3: the 95% interval holds the
    mean of the pairs' true rates in 88–99% of them (the percentile bootstrap is a little short with
    few groups; the bound is wide enough for the Monte-Carlo error of 200 trials)."""
    rng = np.random.default_rng(0)
    covered = 0
    trials = 200
    for _ in range(trials):
        rates = list(np.clip(rng.normal(0.3, 0.15, size=24), 0, 1))
        found = bootstrap_interval(hits(rng, rates, 20), resamples=500, seed=int(rng.integers(1 << 30)))
        assert found is not None
        covered += found.low <= 0.3 <= found.high  # the population mean of the pairs' rates
    assert 0.88 <= covered / trials <= 0.99, covered / trials


def test_the_paired_test_sees_a_difference_and_no_difference() -> None:
    rng = np.random.default_rng(5)
    base = hits(rng, [0.2] * 10, 30)
    better = [[max(v, float(rng.random() < 0.4)) for v in g] for g in base]  # hits kept, misses turned
    found = paired_test(better, base)
    assert found is not None and found.p_value < 0.001 and found.difference.low > 0
    same = paired_test(base, base)
    assert same is not None and same.p_value == 1.0 and same.difference.estimate == 0.0
    with pytest.raises(ValueError, match="same units"):
        paired_test(base, base[:-1])


def test_the_sizing_rule_inverts_the_variance_of_a_mean_of_means() -> None:
    n = images_per_group(0.05, groups=24, rate=0.2, between_sd=0.1)
    assert n is not None
    half = Z95 * np.sqrt(0.1**2 / 24 + 0.2 * 0.8 / (24 * n))
    assert half <= 0.05 < Z95 * np.sqrt(0.1**2 / 24 + 0.2 * 0.8 / (24 * (n - 1)))
    assert images_per_group(0.01, groups=6, rate=0.2, between_sd=0.2) is None  # the spread alone is wider
    with pytest.raises(ValueError, match="half_width"):
        images_per_group(0, groups=6)


def test_the_spread_between_groups_leaves_out_the_binomial_noise() -> None:
    """Pairs with one true rate: the observed rates differ only by their images' noise, and the
    estimate of the spread between pairs is near 0; pairs whose true rates spread with sd 0.2 give about
    0.2 — across many seeds, the squared estimate is unbiased for the true variance."""
    rng = np.random.default_rng(5)
    images = 40
    estimates = {0.0: [], 0.2: []}
    for _ in range(300):
        for sd in estimates:
            true = np.clip(0.4 + sd * rng.standard_normal(24), 0, 1)
            observed = [float(np.mean(g)) for g in hits(rng, list(true), images)]
            estimates[sd].append(between_sd(observed, [images] * 24) ** 2)
    assert np.mean(estimates[0.0]) < 0.002
    true_var = float(np.var(np.clip(0.4 + 0.2 * rng.standard_normal(200_000), 0, 1)))
    assert np.mean(estimates[0.2]) == pytest.approx(true_var, rel=0.15)
    assert between_sd([0.5], [10]) == 0.0 and between_sd([], []) == 0.0
    assert between_sd([0.0, 1.0], [1, 1]) == pytest.approx(np.sqrt(0.5))  # one image each: no noise to remove
    with pytest.raises(ValueError, match="one length"):
        between_sd([0.1, 0.2], [3])


def test_a_statistic_of_sums_is_bootstrapped_over_units() -> None:
    """A ratio of sums (a corpus figure such as BLEU): the estimate is the ratio of the totals, the
    interval holds it, the seed reproduces it, and with the ratio's numerator a unit's hit it agrees
    with the one-group mean's interval in width (same data, other draws: within Monte-Carlo error)."""
    rng = np.random.default_rng(2)
    hit = (rng.random(200) < 0.3).astype(float)
    units = [[h, 1.0] for h in hit]

    def ratio(sums: np.ndarray) -> np.ndarray:
        return sums[:, 0] / sums[:, 1]

    found = bootstrap_sums(units, ratio, seed=7)
    assert found is not None and found.estimate == pytest.approx(hit.mean())
    assert found.low <= found.estimate <= found.high and found.units == 200
    assert found == bootstrap_sums(units, ratio, seed=7)
    mean = bootstrap_interval([list(hit)], seed=7)
    assert mean is not None and abs(found.se - mean.se) < 0.2 * mean.se  # se's own MC error is ~1.6%
    assert bootstrap_sums([], ratio) is None


def test_binary_units_recover_a_hit_count() -> None:
    assert binary_units(2, 5) == [1.0, 1.0, 0.0, 0.0, 0.0] and binary_units(0, 0) == []
    with pytest.raises(ValueError, match="hits"):
        binary_units(6, 5)


def test_the_stratified_interval_is_the_mean_over_strata_and_matches_the_pooled_one() -> None:
    """Equal strata: the estimate is the mean of all group means; the interval is near the pooled
    two-stage bootstrap's (drawing within strata can only narrow it a little)."""
    rng = np.random.default_rng(2)
    strata = [hits(rng, [0.05, 0.3, 0.0, 0.1, 0.2, 0.0], 40) for _ in range(4)]
    found = stratified_interval(strata)
    pooled = bootstrap_interval([g for s in strata for g in s])
    assert found is not None and pooled is not None
    assert found.estimate == pytest.approx(pooled.estimate)
    assert found.groups == 24 and found.units == 960
    assert abs(found.low - pooled.low) < 0.02 and abs(found.high - pooled.high) < 0.02
    assert stratified_interval(strata, seed=1) == stratified_interval(strata, seed=1)
    unequal = [[[1.0, 1.0]], [[0.0], [0.0], [0.0]]]  # the mean over strata, not over groups
    one = stratified_interval(unequal)
    assert one is not None and one.estimate == pytest.approx(0.5) and one.low == one.high == 0.5
    assert stratified_interval([[[], []]]) is None


def test_the_ratio_interval_draws_groups_jointly() -> None:
    """A system that doubles another's every pair: the ratio is 2 and, groups drawn jointly, its
    interval is narrow; a real ratio of 3 is inside the interval, 1 is not."""
    rng = np.random.default_rng(4)
    rates = [0.05, 0.2, 0.1, 0.0, 0.15, 0.08]
    base = [[binary_units(round(r * 200), 200) for r in rates]]
    double = [[binary_units(2 * round(r * 200), 200) for r in rates]]
    found = ratio_interval(double, base)
    assert found is not None and found.estimate == pytest.approx(2.0)
    assert 1.5 < found.low <= 2.0 <= found.high < 2.7
    b = [hits(rng, [r / 3 for r in rates] * 4, 100)]
    a = [hits(rng, rates * 4, 100)]
    three = ratio_interval(a, b)
    assert three is not None and three.low <= 3.0 <= three.high and three.low > 1
    assert ratio_interval(a, [[[0.0] * 5] * 24]) is None  # nothing to divide by
    with pytest.raises(ValueError, match="same groups"):
        ratio_interval(a, [b[0][:-1]])


def test_a_ratio_over_a_rare_denominator_has_an_infinite_upper_bound() -> None:
    a = [[binary_units(10, 50), binary_units(8, 50)]]
    b = [[binary_units(1, 50), binary_units(0, 50)]]  # half the resamples have no hit at all
    found = ratio_interval(a, b)
    assert found is not None and found.estimate == pytest.approx(18.0) and found.high == float("inf")
