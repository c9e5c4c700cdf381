"""The live probes' intervals, from the per-image data their results keep: a systematicity result
with hits that vary carries an interval beside every figure, one recomputed from the stored first hits
is the answer's exactly with the same seed and agrees within the bootstrap's Monte-Carlo error with
another; the paired test of a result against itself is 0 with p-value 1 and sees a real difference;
productivity and substitutivity keep their per-image values; bounded gauges and the table show them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from service.evaluation.bleu import corpus_bleu
from service.evaluation.intervals import bootstrap_interval
from service.probes.kinds import systematicity_kind as kind
from service.probes.kinds.bounds import BoundedGauge
from service.probes.scoring.productivity import productivity_result
from service.probes.scoring.substitutivity import bleu4_of_sums, bleu4_units, substitutivity_result
from service.probes.scoring.substitutivity import compare as compare_substitutivity
from service.probes.scoring.systematicity import compare, systematicity_result, with_intervals
from service.text.concepts import ConceptPair

PAIRS = [
    ConceptPair("adjective", "black", "cat"),
    ConceptPair("adjective", "white", "dog"),
    ConceptPair("adjective", "red", "car"),
    ConceptPair("adjective", "big", "bus"),
]


def pairs_fn(captions: Sequence[str]) -> list[frozenset[ConceptPair]]:
    """A caption names the pairs whose labels it holds, joined by ';'."""
    return [frozenset(p for p in PAIRS if p.label in c.split(";")) for c in captions]


def scored(rates: Sequence[float], images: int, seed: int) -> dict[str, Any]:
    """A systematicity result on two groups of two pairs, each pair with ``images`` Test-Comb images
    whose top-5 captions hold it at a random rank with its probability ``rates[p]``, and as many
    Test-no-Comb images; pairs 0 and 2 held out."""
    rng = np.random.default_rng(seed)
    comb: dict[int, list[int]] = {0: [], 1: []}
    no_comb: dict[str, list[int]] = {}
    generated: dict[int, list[str]] = {}
    references: dict[int, list[str]] = {}
    image = 0
    for n, (pair, rate) in enumerate(zip(PAIRS, rates, strict=True)):
        for own in (True, False):
            for _ in range(images):
                image += 1
                caps = ["nothing"] * 5
                if rng.random() < (rate if own else rate / 4):
                    caps[int(rng.integers(5))] = pair.label
                generated[image] = caps
                if own:
                    comb[n // 2].append(image)
                    references[image] = [pair.label, "a scene"]
                else:
                    no_comb.setdefault(pair.label, []).append(image)
    return systematicity_result(
        {0: PAIRS[:2], 1: PAIRS[2:]},
        comb,
        no_comb,
        PAIRS,
        [PAIRS[0], PAIRS[2]],
        generated,
        references,
        pairs_fn,
    )


def test_every_figure_has_an_interval_recomputed_exactly_from_the_stored_hits() -> None:
    result = json.loads(json.dumps(with_intervals(scored([0.3, 0.6, 0.5, 0.2], 40, 1))))  # as stored
    for row in result["pairs"]:
        assert len(row["first_hit"]) == row["images"] == 40 and len(row["no_comb_first_hit"]) == 40
        for k, found in row["recall_interval"].items():
            assert found["estimate"] == pytest.approx(row["recall"][k], abs=1e-6) and found["groups"] == 1
            assert found["low"] <= found["estimate"] <= found["high"]
    for part in ("held_out", "seen", "all"):
        assert set(result[part]["recall_interval"]) == {"1", "2", "3", "4", "5"}
        assert set(result[part]["per_category_interval"]) == set(result[part]["per_category"])
    assert set(result["false_composition_interval"]) == {"1", "5"}
    held = [r for r in result["pairs"] if r["held_out"]]
    groups = [
        [
            1.0 if (rank := r["first_hit"][i]) is not None and rank <= 5 else 0.0
            for i in sorted(r["first_hit"], key=int)
        ]
        for r in held
    ]
    answered = result["held_out"]["recall_interval"]["5"]
    same = bootstrap_interval(groups, seed=result["intervals"]["seed"])
    assert same is not None and {k: same.as_dict()[k] for k in answered} == answered
    assert answered["groups"] == 2 and answered["units"] == 80 and answered["se"] > 0
    # another seed: the same figure within the Monte-Carlo error of R = 2000 resamples — se to 6%
    # (relative MC error 1/sqrt(2R) = 1.6%), bounds to 0.2 se (a 2.5% quantile's MC error ~0.06 se)
    # plus one lattice step of a mean of two pairs' shares of 40 images
    other = bootstrap_interval(groups, seed=result["intervals"]["seed"] + 1)
    assert other is not None and abs(other.se - answered["se"]) <= 0.06 * answered["se"]
    for bound in ("low", "high"):
        assert abs(getattr(other, bound) - answered[bound]) <= 0.2 * answered["se"] + 1 / 80 + 1e-9


def test_the_paired_test_of_two_results() -> None:
    a = with_intervals(scored([0.3, 0.6, 0.5, 0.2], 40, 1))
    itself = compare(a, a)
    assert itself["figures"]["held_out.recall_at_5"]["p_value"] == 1.0
    assert all(t is None or t["difference"]["estimate"] == 0.0 for t in itself["figures"].values())
    worse = scored([0.0, 0.0, 0.0, 0.0], 40, 2)  # the same images, never a hit
    found = compare(a, worse)["figures"]["held_out.recall_at_5"]
    assert found["p_value"] < 0.01 and found["difference"]["low"] > 0
    assert found["difference"]["estimate"] == pytest.approx(a["held_out"]["recall"]["5"], abs=1e-6)
    fewer = scored([0.3, 0.6, 0.5, 0.2], 40, 1) | {"pairs": []}
    with pytest.raises(ValueError, match="share no pair"):
        compare(a, fewer)
    old = {**a, "pairs": [{k: v for k, v in r.items() if k != "first_hit"} for r in a["pairs"]]}
    with pytest.raises(ValueError, match="predates intervals"):
        compare(a, old)


def test_productivity_and_substitutivity_keep_their_per_image_values() -> None:
    top1 = {1: "a black cat", 2: "a cat on a mat", 3: "a dog", 4: "two dogs and a cat"}
    refs = {i: ["a black cat on a mat", "a dog and a cat"] for i in top1}
    objects = {i: ["cat", "dog"] for i in top1}
    prod = productivity_result({"density": {"2": [1, 2, 3, 4]}}, top1, refs, objects, None)
    bucket = prod["by"]["density"]["2"]
    assert bucket["length_interval"]["estimate"] == pytest.approx(bucket["length"], abs=1e-6)
    assert bucket["coverage_interval"]["units"] == 4 and bucket["cider_d_interval"] is None  # no DF: no CIDEr
    assert prod["per_image"]["length"] == {"1": 3.0, "2": 5.0, "3": 2.0, "4": 5.0}
    o = {1: "a kitten on a mat", 2: "a puppy and a kitten", 3: "a dog"}
    s = {1: "a cat on a mat", 2: "a dog and a cat"}
    sub = substitutivity_result(o, s, {"kitten": "cat", "puppy": "dog"}, refs, None, meteor=False, seed=0)
    assert sub["exact_replacement"] == 1.0 and sub["exact_replacement_interval"]["units"] == 2
    row = sub["rows"]["O vs S"]
    assert row["bleu4_interval"]["estimate"] == pytest.approx(row["bleu4"], abs=1e-6)
    assert row["bleu4_interval"]["low"] <= row["bleu4"] <= row["bleu4_interval"]["high"]
    assert substitutivity_result(o, s, {"kitten": "cat"}, refs, None, meteor=False).get("per_image") is None
    itself = compare_substitutivity(sub, sub)["figures"]
    assert itself["exact_replacement"]["p_value"] == 1.0


def test_bleu4_of_summed_statistics_is_corpus_bleu4() -> None:
    refs = {1: ["a black cat on a mat"], 2: ["a dog and a cat", "two dogs"], 3: ["a red car"]}
    hyps = {1: "a black cat", 2: "a dog and a cat on grass", 3: "a car"}
    rows = np.array(list(bleu4_units(refs, hyps).values()), dtype=float)
    assert bleu4_of_sums(rows.sum(axis=0, keepdims=True))[0] == pytest.approx(corpus_bleu(refs, hyps)[0][3])


def test_bounded_gauges_and_the_table_show_the_interval() -> None:
    registry = CollectorRegistry()
    gauge = BoundedGauge("compcap_test_figure", "a figure", ["model"], registry)
    gauge.set(("butr",), 0.25, {"estimate": 0.25, "low": 0.1, "high": 0.4})
    gauge.set(("butd",), 0.5, None)  # an old result: no interval, no bounds
    text = generate_latest(registry).decode()
    assert (
        'compcap_test_figure_low{model="butr"} 0.1' in text
        and 'compcap_test_figure_high{model="butr"} 0.4' in text
    )
    assert (
        'compcap_test_figure_low{model="butd"}' not in text
        and 'compcap_test_figure{model="butd"} 0.5' in text
    )
    result = with_intervals(scored([0.3, 0.6, 0.5, 0.2], 40, 1))
    held = result["held_out"]
    low, high = held["recall_interval"]["5"]["low"], held["recall_interval"]["5"]["high"]
    table = "\n".join(kind.lines(result))
    assert f"{held['recall']['5']:.3f} [{low:.3f}, {high:.3f}]" in table and "R@5 CI" in table
