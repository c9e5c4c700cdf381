"""Uncertainty of the probes' and studies' figures: 95% bootstrap intervals over the units a figure
averages, paired tests between two models or configurations on the same images, and a sizing rule.

Every figure CompCap reports is a mean of means: Recall@K is the mean over pairs of each pair's share of
images hit; a false-composition rate, a GroundingScore or a substitutivity score likewise, over pairs
(or buckets, or captions) and their images. Its interval comes from a **two-stage (cluster) bootstrap**:
resample the groups (pairs) with replacement, then each drawn group's units (images) with replacement,
and take the statistic of each resample; the interval is the percentile interval of ``resamples`` of
them. Seeded (``seed``), so the same data give the same interval on every machine.

A **paired test** compares two systems scored on the same units: the per-unit differences are the
data; the two-sided p-value is that of a sign-flip permutation test with the flips per unit (it keeps
the pairing and takes the groups as given: a test about these pairs), and the difference's interval is
the two-stage bootstrap of the differences (which also resamples the groups: about pairs like these).
With few groups the two can disagree — a small p-value beside an interval that holds 0 — and both are
reported.

Shapes: a figure's data is ``Sequence[Sequence[float]]`` — ``groups[g][u]`` the value of unit ``u`` of
group ``g`` (a hit is 1.0, a miss 0.0). Groups may have different sizes; an empty group is left out
(as the means leave out a pair without images). All values are plain floats; nothing here knows
captions or models.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from service.checks import above, at_least, within

LEVEL = 0.95
RESAMPLES = 2000
SEED = 0
Z95 = 1.959963984540054  # the standard normal's 97.5% quantile


@dataclass(frozen=True)
class Interval:
    """A figure with its interval: ``estimate`` (the mean of group means), ``low``/``high`` (the
    percentile bootstrap interval at ``level``), ``groups`` and ``units`` it rests on, and
    ``resamples`` (``se``: the bootstrap standard error)."""

    estimate: float
    low: float
    high: float
    se: float
    groups: int
    units: int
    level: float = LEVEL
    resamples: int = RESAMPLES

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def as_dict(self, digits: int = 6) -> dict[str, float | int]:
        return {
            "estimate": round(self.estimate, digits),
            "low": round(self.low, digits),
            "high": round(self.high, digits),
            "se": round(self.se, digits),
            "groups": self.groups,
            "units": self.units,
            "level": self.level,
            "resamples": self.resamples,
        }


@dataclass(frozen=True)
class PairedTest:
    """Two systems on the same units: ``difference`` (a − b, a mean of group means) with its bootstrap
    interval, and the two-sided sign-flip permutation ``p_value``."""

    difference: Interval
    p_value: float
    permutations: int

    def as_dict(self, digits: int = 6) -> dict[str, object]:
        return {
            "difference": self.difference.as_dict(digits),
            "p_value": round(self.p_value, digits),
            "permutations": self.permutations,
        }


def _check(level: float, resamples: int) -> None:
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    at_least(100, resamples=resamples)


def _kept(groups: Sequence[Sequence[float]]) -> list[np.ndarray]:
    kept = [np.asarray(g, dtype=np.float64) for g in groups if len(g) > 0]
    for g in kept:
        if g.ndim != 1 or not np.all(np.isfinite(g)):
            raise ValueError("each group must be a flat sequence of finite numbers")
    return kept


def mean_of_means(groups: Sequence[Sequence[float]]) -> float | None:
    """The unweighted mean over non-empty groups of each group's mean (None: no unit at all)."""
    kept = _kept(groups)
    return float(np.mean([g.mean() for g in kept])) if kept else None


def _resampled_means(kept: list[np.ndarray], resamples: int, rng: np.random.Generator) -> np.ndarray:
    """[resamples] two-stage bootstrap replicates of the mean of group means."""
    sizes = np.array([len(g) for g in kept])
    n_groups = len(kept)
    picks = rng.integers(0, n_groups, size=(resamples, n_groups))  # [R, G] groups drawn
    out = np.empty(resamples)
    # for each group, a block of unit draws per time it is drawn; vectorised per group
    totals = np.zeros((resamples, n_groups))
    for g, values in enumerate(kept):
        drawn = picks == g  # [R, G] where group g was drawn
        count = int(drawn.sum())
        if count == 0:
            continue
        means = values[rng.integers(0, sizes[g], size=(count, sizes[g]))].mean(axis=1)  # [count]
        totals[drawn] = means
    out[:] = totals.mean(axis=1)
    return out


def bootstrap_interval(
    groups: Sequence[Sequence[float]],
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Interval | None:
    """The mean of group means with its two-stage bootstrap percentile interval (None: no unit)."""
    _check(level, resamples)
    kept = _kept(groups)
    if not kept:
        return None
    estimate = float(np.mean([g.mean() for g in kept]))
    reps = _resampled_means(kept, resamples, np.random.default_rng(seed))
    return _percentile(estimate, reps, level, len(kept), int(sum(len(g) for g in kept)))


def bootstrap_sums(
    units: Sequence[Sequence[float]],
    statistic: Callable[[np.ndarray], np.ndarray],
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Interval | None:
    """A figure that is a function of sums over units rather than a mean (a corpus BLEU from each
    image's n-gram counts): ``units[u]`` the unit's row of counts, ``statistic`` maps column sums
    ``[R, d]`` to ``[R]`` figures. One-stage bootstrap over the units (each resample draws the units'
    multiplicities); the estimate is the statistic of the full sums (None: no unit)."""
    _check(level, resamples)
    if not units:
        return None
    rows = np.asarray(units, dtype=np.float64)
    if rows.ndim != 2 or not np.all(np.isfinite(rows)):
        raise ValueError("units must be rows of finite numbers, all of one length")
    n = len(rows)
    rng = np.random.default_rng(seed)
    weights = rng.multinomial(n, np.full(n, 1.0 / n), size=resamples)  # [R, n] times each unit is drawn
    reps = np.asarray(statistic(weights @ rows), dtype=np.float64)
    estimate = float(np.asarray(statistic(rows.sum(axis=0, keepdims=True)))[0])
    return _percentile(estimate, reps, level, 1, n)


def paired_test(
    a: Sequence[Sequence[float]],
    b: Sequence[Sequence[float]],
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    permutations: int = 10_000,
    seed: int = SEED,
) -> PairedTest | None:
    """``a`` against ``b`` scored on the same units (same group sizes, unit for unit): the difference
    a − b with its interval and the two-sided sign-flip permutation p-value (the flips are per unit; a
    p-value is never below 1 / (permutations + 1)). None when no unit is shared."""
    if len(a) != len(b) or any(len(x) != len(y) for x, y in zip(a, b, strict=True)):
        raise ValueError("a and b must hold the same units: same groups, same sizes")
    diffs: list[list[float]] = [
        np.subtract(x, y, dtype=np.float64).tolist() for x, y in zip(a, b, strict=True)
    ]
    interval = bootstrap_interval(diffs, level, resamples, seed)
    if interval is None:
        return None
    kept = _kept(diffs)
    observed = abs(np.mean([d.mean() for d in kept]))
    rng = np.random.default_rng(seed + 1)
    stats = np.zeros(permutations)
    for d in kept:
        signs = rng.choice((-1.0, 1.0), size=(permutations, len(d)))
        stats += (signs * d).mean(axis=1)
    stats = np.abs(stats / len(kept))
    exceed = int(np.sum(stats >= observed - 1e-12))
    return PairedTest(interval, (exceed + 1) / (permutations + 1), permutations)


def images_per_group(
    half_width: float, groups: int, rate: float = 0.5, between_sd: float = 0.0, level: float = LEVEL
) -> int | None:
    """The sizing rule: how many images per group (pair) make the interval of a mean over ``groups``
    groups of per-image hit rates about ``± half_width``, when the rate is near ``rate`` and the groups'
    own rates spread with standard deviation ``between_sd``. From the variance of a mean of group means,
    ``between_sd² / G + rate (1 − rate) / (G n)``; ``None`` when the spread alone is wider than
    ``half_width`` (no number of images per group is enough: more groups are needed)."""
    above(0, half_width=half_width)
    at_least(1, groups=groups)
    within(0, 1, rate=rate)
    z = _z(level)
    budget = (half_width / z) ** 2 - between_sd**2 / groups  # variance left for the within-group part
    binomial = rate * (1 - rate) / groups
    if binomial == 0:
        return 1
    if budget <= 0:
        return None
    return max(1, math.ceil(binomial / budget))


def between_sd(rates: Sequence[float], units: Sequence[int]) -> float:
    """The spread between groups that ``images_per_group`` takes, from each group's observed hit rate
    ``rates[g]`` over ``units[g]`` units: the rates' variance (ddof 1) less the mean binomial variance
    a group's rate has from its own units (``r (1 − r) / (n − 1)``, unbiased; groups of one unit add
    none), at least 0 — its square root. 0 with fewer than two groups. The demo's probe launcher has
    a copy of it (``betweenSd`` in probes.js)."""
    if len(rates) != len(units):
        raise ValueError(f"rates and units must have one length, got {len(rates)} and {len(units)}")
    kept = [(float(r), int(n)) for r, n in zip(rates, units, strict=True) if math.isfinite(r) and n >= 1]
    if len(kept) < 2:
        return 0.0
    mean = sum(r for r, _ in kept) / len(kept)
    spread = sum((r - mean) ** 2 for r, _ in kept) / (len(kept) - 1)
    noisy = [r * (1 - r) / (n - 1) for r, n in kept if n > 1]
    binomial = sum(noisy) / len(noisy) if noisy else 0.0
    return math.sqrt(max(spread - binomial, 0.0))


def _z(level: float) -> float:
    if level == LEVEL:
        return Z95
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + level / 2)


def _joint_replicates(
    systems: Sequence[Sequence[Sequence[Sequence[float]]]], resamples: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, int, int]:
    """[S, resamples] replicates of each system's mean over strata of its mean of group means, the
    groups of each stratum drawn *jointly* (the same draw for every system), the units of each drawn
    group drawn independently per system; with the estimates [S], the groups kept and the first
    system's units. ``systems[s][t][g]``: the units of group ``g`` of stratum ``t`` for system ``s``."""
    if not systems or any(len(s) != len(systems[0]) for s in systems):
        raise ValueError("every system must have the same strata")
    strata: list[list[list[np.ndarray]]] = []  # [t][g][s]
    for t in range(len(systems[0])):
        sizes = {len(s[t]) for s in systems}
        if len(sizes) != 1:
            raise ValueError(f"stratum {t}: every system must have the same groups")
        groups = []
        for g in range(sizes.pop()):
            found = [_kept([s[t][g]]) for s in systems]
            if all(found):
                groups.append([k[0] for k in found])
        if groups:
            strata.append(groups)
    if not strata:
        raise ValueError("no group has units in every system")
    reps = np.zeros((len(systems), resamples))
    est = np.zeros(len(systems))
    for groups in strata:
        n_groups = len(groups)
        picks = rng.integers(0, n_groups, size=(resamples, n_groups))
        for s in range(len(systems)):
            totals = np.zeros((resamples, n_groups))
            for g, per_system in enumerate(groups):
                values = per_system[s]
                drawn = picks == g
                count = int(drawn.sum())
                if count:
                    totals[drawn] = values[rng.integers(0, len(values), size=(count, len(values)))].mean(1)
            reps[s] += totals.mean(axis=1) / len(strata)
            est[s] += np.mean([g[s].mean() for g in groups]) / len(strata)
    kept = sum(len(g) for g in strata)
    units = int(sum(len(g[0]) for groups in strata for g in groups))
    return reps, est, kept, units


def _percentile(estimate: float, reps: np.ndarray, level: float, groups: int, units: int) -> Interval:
    """The percentile interval of ``reps``; an infinite replicate (a ratio over 0) is kept, and the
    quantiles are then taken without interpolation (a bound may be inf); ``se`` is over the finite."""
    tail = (1 - level) / 2
    finite = reps[np.isfinite(reps)]
    if len(finite) == len(reps):
        low, high = np.quantile(reps, [tail, 1 - tail])
    else:
        low, high = np.quantile(reps, [tail, 1 - tail], method="inverted_cdf")
    return Interval(
        estimate,
        float(min(low, estimate)),
        float(max(high, estimate)),
        float(finite.std(ddof=1)) if len(finite) > 1 else math.inf,
        groups,
        units,
        level,
        len(reps),
    )


def stratified_interval(
    strata: Sequence[Sequence[Sequence[float]]],
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Interval | None:
    """A mean over strata of means of group means — e.g. a study's Recall@K, the mean over held-out
    groups (one trained model each) of each group's mean over its pairs — with its bootstrap interval:
    groups (pairs) are resampled within each stratum, units (images) within each drawn group.
    ``strata[t][g][u]``; None when no unit at all."""
    _check(level, resamples)
    if not any(_kept(g) for g in strata):
        return None
    reps, est, groups, units = _joint_replicates([strata], resamples, np.random.default_rng(seed))
    return _percentile(float(est[0]), reps[0], level, groups, units)


def ratio_interval(
    numerator: Sequence[Sequence[Sequence[float]]],
    denominator: Sequence[Sequence[Sequence[float]]],
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Interval | None:
    """The ratio of two systems' stratified means (``stratified_interval``) scored on the same groups,
    with its bootstrap interval: each resample draws the groups jointly for both systems (so a hard
    pair is hard for both) and the units within each group independently per system — right when the
    units' pairing is not known (only per-group counts); with per-unit pairing a paired test is
    sharper. A resample whose denominator is 0 counts as an infinite ratio (the upper bound may be
    inf). None when the denominator's estimate is 0 or there is no unit."""
    _check(level, resamples)
    if not any(_kept(g) for g in numerator) or not any(_kept(g) for g in denominator):
        return None
    reps, est, groups, units = _joint_replicates(
        [numerator, denominator], resamples, np.random.default_rng(seed)
    )
    if est[1] == 0:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(reps[1] > 0, reps[0] / np.where(reps[1] > 0, reps[1], 1.0), math.inf)
    return _percentile(float(est[0] / est[1]), ratios, level, groups, units)


def binary_units(hits: int, units: int) -> list[float]:
    """The per-unit values of ``hits`` binary hits among ``units`` units (order is irrelevant to every
    bootstrap here): how a per-pair count ``hits``/``images`` becomes a group's units."""
    if not 0 <= hits <= units:
        raise ValueError(f"hits must be in [0, units], got {hits} of {units}")
    return [1.0] * hits + [0.0] * (units - hits)


__all__ = [
    "LEVEL",
    "RESAMPLES",
    "Interval",
    "PairedTest",
    "between_sd",
    "binary_units",
    "bootstrap_interval",
    "bootstrap_sums",
    "images_per_group",
    "mean_of_means",
    "paired_test",
    "ratio_interval",
    "stratified_interval",
]
