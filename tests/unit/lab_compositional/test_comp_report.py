"""The compositional rankers' report (``compcap_lab.studies.compositional``) on small hand-made evaluations —
no zoo, no model: every paired test, pooled figure, Holm value and the beam ceiling in
``compositional.json`` come back from the per (pair, image) first ranks it stores, recomputed here
independently; a p-value at the permutation floor prints as a bound; the targets' verdicts flip where the
data cross their thresholds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from compcap_lab.cli import main as lab_main
from compcap_lab.studies.compositional import (
    analyse,
    markdown,
    reanalyse,
    reproduction_weight,
    table_rows,
    write,
)
from compcap_lab.studies.report.family import holm
from compcap_lab.studies.report.uncertainty import cluster_interval
from compcap_lab.studies.rerender import rerender
from service.evaluation.intervals import PairedTest, paired_test, stratified_interval

HELD = {1: ("red dog", "small cat", "blue car"), 2: ("green bird", "big horse", "white boat")}
SEEN = {1: ("green bird", "big horse"), 2: ("red dog", "small cat")}
IMAGES = 10
META = {
    "repo": "model_zoo.comp",
    "zoo": "model_zoo",
    "eval_data": "model_zoo.work/data/eval_7",
    "rerank_weight": 0.02,
    "rerank_weight_source": "reports/reproduction.json",
    "rerank_beam": 100,
    "seeds_group": 1,
}
COMP_VS_VSEPP = "BUTD+comp vs BUTD+VSE++"


def _ranks(hits: int, shift: int = 0, rank: int = 2) -> list[int | None]:
    """``IMAGES`` first ranks: images ``shift`` .. ``shift + hits - 1`` hit at ``rank``."""
    return [rank if shift <= i < shift + hits else None for i in range(IMAGES)]


def _result(cap: str, ranker: str | None, hits: list[int], pairs: tuple[str, ...], cider: float) -> dict:
    """An evaluation's run: pair ``k`` of ``pairs`` hit on its first ``hits[k]`` images."""
    per_pair = {}
    for label, n in zip(pairs, hits, strict=True):
        ranks = _ranks(n)
        per_pair[label] = {
            "category": "colour_animate",
            "images": IMAGES,
            "hits": {k: sum(1 for r in ranks if r is not None and r <= int(k)) for k in "12345"},
            "first_rank": {str(i): r for i, r in enumerate(ranks)},
        }
    recall = {k: sum(p["hits"][k] / IMAGES for p in per_pair.values()) / len(per_pair) for k in "12345"}
    return {
        "captioner": cap,
        "ranker": ranker,
        "recall_at_k": recall,
        "recall_at_5_mean": recall["5"],
        "bleu4": 0.3,
        "meteor": None,
        "rouge_l": 0.5,
        "cider_d": cider,
        "per_pair": per_pair,
    }


def _data(
    comp: tuple[int, ...] = (5, 6, 4),
    vsepp: tuple[int, ...] = (1, 2, 1),
    rr: tuple[int, ...] = (3, 2, 3),
    seeds: tuple[tuple[int, ...], ...] = ((4, 5, 3), (6, 5, 5)),
    seen_comp: tuple[int, ...] = (6, 5),
    seen_vsepp: tuple[int, ...] = (6, 5),
    comp_cider: float = 0.95,
    in_beams: int = 8,
) -> dict[str, Any]:
    """Groups 1 and 2, three held-out pairs of ``IMAGES`` images each: per row the images hit per pair
    (the same on both groups), seen pairs likewise; the seeds rows on group 1; BUTD's 100 beams hold
    each pair on its first ``in_beams`` images (rank 40)."""
    rows: dict[str, list[list[Any]]] = {
        "BUTD": [[g, f"butd_g{g}", None] for g in HELD],
        "BUTD+VSE++": [[g, f"butd_g{g}", f"vsepp_g{g}"] for g in HELD],
        "BUTD+comp": [[g, f"butd_g{g}", f"comp_g{g}"] for g in HELD],
        "BUTR+RR": [[g, f"butr_g{g}", f"butr_g{g}"] for g in HELD],
    }
    for s in range(len(seeds)):
        rows[f"BUTD+comp seed {s + 1}"] = [[1, "butd_g1", f"comp_g1_seed{s + 1}"]]
    raw: dict[str, Any] = {}
    beams: dict[str, Any] = {}
    for g in HELD:
        runs = [  # (captioner, ranker, held-out hits, seen hits, CIDEr-D)
            (f"butd_g{g}", None, (0, 1, 0), (2, 2), 1.0),
            (f"butd_g{g}", f"vsepp_g{g}", vsepp, seen_vsepp, 0.97),
            (f"butd_g{g}", f"comp_g{g}", comp, seen_comp, comp_cider),
            (f"butr_g{g}", f"butr_g{g}", rr, (5, 5), 0.99),
        ]
        if g == 1:
            runs += [("butd_g1", f"comp_g1_seed{s + 1}", h, (5, 5), 0.96) for s, h in enumerate(seeds)]
        for set_name, pairs in (("test", HELD[g]), ("test_no_comb", SEEN[g])):
            results = [
                _result(cap, ranker, list(held if set_name == "test" else seen), pairs, cider)
                for cap, ranker, held, seen, cider in runs
            ]
            raw[f"group{g}/{set_name}"] = {"split": "systematicity", "group": g, "results": results}
        beams[f"group{g}"] = {
            label: {
                "category": "colour_animate",
                "images": IMAGES,
                "first_rank": {str(i): r for i, r in enumerate(_ranks(in_beams, rank=40))},
            }
            for label in HELD[g]
        }
    return {"rows": rows, "raw": raw, "beams": beams}


def _written(tmp_path: Path, data: dict[str, Any]) -> dict[str, Any]:
    write(tmp_path, analyse(data, META))
    return json.loads((tmp_path / "compositional.json").read_text(encoding="utf-8"))


def _hits(per_pair: dict[str, Any], k: int = 5) -> list[list[float]]:
    """[pair][image] hits at ``k`` from the stored first ranks, images in id order as the tests pair them."""
    return [
        [
            1.0 if p["first_rank"][i] is not None and p["first_rank"][i] <= k else 0.0
            for i in sorted(p["first_rank"])
        ]
        for p in per_pair.values()
    ]


def _run(
    report: dict[str, Any], group: int, captioner: str, ranker: str | None, set_name: str = "test"
) -> dict:
    results = report["data"]["raw"][f"group{group}/{set_name}"]["results"]
    return next(r["per_pair"] for r in results if r["captioner"] == captioner and r["ranker"] == ranker)


def _test(a: list[list[float]], b: list[list[float]]) -> dict[str, Any]:
    found = paired_test(a, b)
    assert found is not None
    return found.as_dict()


def test_every_figure_is_recomputed_from_the_stored_first_ranks(tmp_path: Path) -> None:
    report = _written(tmp_path, _data())
    expected: dict[str, Any] = {}
    pooled: dict[str, tuple[list[list[float]], list[list[float]]]] = {}
    for g in (1, 2):
        comp = _hits(_run(report, g, f"butd_g{g}", f"comp_g{g}"))
        for other, cap, ranker in (
            ("BUTD+VSE++", f"butd_g{g}", f"vsepp_g{g}"),
            ("BUTR+RR", f"butr_g{g}", f"butr_g{g}"),
        ):
            b = _hits(_run(report, g, cap, ranker))
            name = f"BUTD+comp vs {other}"
            expected[f"group {g}: {name}"] = _test(comp, b)
            assert report["paired"][f"group {g}"][name] == expected[f"group {g}: {name}"]
            units = pooled.setdefault(name, ([], []))
            units[0].extend(comp)
            units[1].extend(b)
    for name, (a, b) in pooled.items():  # pooled over the groups: every group's pairs at once
        expected[f"pooled: {name}"] = _test(a, b)
        assert report["paired"]["pooled"][name] == expected[f"pooled: {name}"]
        assert report["paired"]["pooled"][name]["difference"]["groups"] == 6
    vsepp = _hits(_run(report, 1, "butd_g1", "vsepp_g1"))
    per_seed = [_hits(_run(report, 1, "butd_g1", r)) for r in ("comp_g1", "comp_g1_seed1", "comp_g1_seed2")]
    for s, seed in enumerate(per_seed[1:], 1):
        expected[f"seed {s}: {COMP_VS_VSEPP}"] = _test(seed, vsepp)
        assert report["seeds"]["tests"][str(s)] == expected[f"seed {s}: {COMP_VS_VSEPP}"]
    assert report["seeds"]["tests"]["zoo"] == expected[f"group 1: {COMP_VS_VSEPP}"]
    # the seeds pooled: pairs as clusters, seeds as members; p over every (seed, pair, image) case
    clusters = [
        [[x - y for x, y in zip(seed[k], vsepp[k], strict=True)] for seed in per_seed] for k in range(3)
    ]
    flips = _test([p for seed in per_seed for p in seed], [p for _ in per_seed for p in vsepp])
    interval = cluster_interval(clusters)
    assert interval is not None
    seeds_pooled = PairedTest(interval, flips["p_value"], flips["permutations"]).as_dict()
    assert report["seeds"]["pooled"] == seeds_pooled
    expected[f"pooled over seeds: {COMP_VS_VSEPP}"] = seeds_pooled
    # Holm over exactly that family, in that order
    assert report["family"]["tests"] == list(expected)
    adjusted = holm([t["p_value"] for t in expected.values()])
    assert report["family"]["p_holm"] == dict(zip(expected, adjusted, strict=True))
    # Recall@5 of a row: pairs within each group, images within a pair, hits as the stored first ranks give
    strata = [
        [sorted(h, reverse=True) for h in _hits(_run(report, g, f"butd_g{g}", f"comp_g{g}"))] for g in (1, 2)
    ]
    recall = stratified_interval(strata)
    assert recall is not None and report["held_out"]["BUTD+comp"]["recall_at_5"] == recall.as_dict()
    assert recall.estimate == pytest.approx(0.5)
    seen = stratified_interval(
        [
            [
                sorted(h, reverse=True)
                for h in _hits(_run(report, g, f"butd_g{g}", f"comp_g{g}", "test_no_comb"))
            ]
            for g in (1, 2)
        ]
    )
    assert seen is not None and report["seen"]["BUTD+comp"]["recall_at_5"] == seen.as_dict()
    assert report["quality"]["BUTD+comp"]["cider_d_vs_butd"] == pytest.approx(0.95)
    # the JSON alone gives the same report, Markdown included
    before = (tmp_path / "compositional.md").read_text(encoding="utf-8")
    assert reanalyse(tmp_path) == report
    assert (tmp_path / "compositional.md").read_text(encoding="utf-8") == before == markdown(report)
    assert (tmp_path / "compositional.png").stat().st_size > 0


def test_a_p_value_at_the_permutation_floor_prints_as_a_bound(tmp_path: Path) -> None:
    report = _written(tmp_path, _data())
    pooled = report["paired"]["pooled"][COMP_VS_VSEPP]
    assert pooled["p_value"] == pytest.approx(1 / 10_001, abs=1e-6)  # stored to 6 decimals
    text = markdown(report)
    assert "p < 0.0002, 10 000 permutations" in text and "p = 9.999e-05" not in text
    assert "| BUTD+comp vs BUTD+VSE++ |" in text and "## The beam ceiling" in text


def _verdicts(tmp_path: Path, **changes: Any) -> dict[str, str]:
    return {t["target"]: t["verdict"] for t in _written(tmp_path, _data(**changes))["targets"]}


def test_the_targets_flip_where_the_data_cross_their_thresholds(tmp_path: Path) -> None:
    assert _verdicts(tmp_path) == dict.fromkeys(("recall", "paired", "seeds", "cider", "seen"), "met")
    # Recall@5 of BUTD+comp: 10% is short of 16.5; 20% reaches it but its interval does not clear it
    missed = _written(tmp_path, _data(comp=(1, 1, 1), vsepp=(0, 0, 0)))
    recall = next(t for t in missed["targets"] if t["target"] == "recall")
    assert recall["verdict"] == "not met" and recall["gap"] == pytest.approx(0.1 - 0.165)
    assert "6.5 points short of 16.5" in markdown(missed) and "the beam ceiling" in markdown(missed)
    assert _verdicts(tmp_path, comp=(2, 2, 2), vsepp=(0, 0, 0))["recall"] == "met by the point estimate only"
    # the paired difference: none left when BUTD+comp hits what BUTD+VSE++ hits
    assert _verdicts(tmp_path, vsepp=(5, 6, 4))["paired"] == "not met"
    # one seed below BUTD+VSE++, or fewer than three seeds
    assert _verdicts(tmp_path, seeds=((4, 5, 3), (0, 0, 0)))["seeds"] == "not met"
    assert _verdicts(tmp_path, seeds=((4, 5, 3),))["seeds"] == "not met"
    # CIDEr-D: 9% below BUTD's is within 10%, 11% is not
    assert _verdicts(tmp_path, comp_cider=0.91)["cider"] == "met"
    assert _verdicts(tmp_path, comp_cider=0.89)["cider"] == "not met"
    # seen pairs: a lower seen-pair Recall@5 whose interval stays below 0 misses
    assert _verdicts(tmp_path, seen_comp=(6, 4))["seen"] == "met"  # lower, but the interval reaches 0
    assert _verdicts(tmp_path, seen_comp=(0, 0))["seen"] == "not met"


def test_the_beam_ceiling_comes_from_the_first_ranks_in_100_beams(tmp_path: Path) -> None:
    data = _data(comp=(5, 6, 4), in_beams=5)
    data["beams"]["group2"]["white boat"]["first_rank"]["9"] = 100  # the last of the 100 beams counts
    report = _written(tmp_path, data)
    ceiling = report["ceiling"]
    assert ceiling["by_group"]["1"]["cases"] == 30 and ceiling["by_group"]["1"]["in_beams"] == 15
    assert ceiling["by_group"]["2"]["in_beams"] == 16 and ceiling["pooled"]["in_beams"] == 31
    assert ceiling["pooled"]["share"] == pytest.approx(31 / 60)
    assert ceiling["pooled"]["recall"]["estimate"] == pytest.approx((0.5 + (0.5 + 0.5 + 0.6) / 3) / 2)
    # BUTD+comp hits the 6th image of "small cat", which its beams do not hold
    assert ceiling["hits_outside_beams"]["BUTD+comp"] == 2  # once per group
    assert ceiling["hits_outside_beams"]["BUTD+VSE++"] == 0
    assert "cases these beams lack" in markdown(report)


def test_the_rows_are_the_repository_s_models() -> None:
    captioners = {"butd_g1", "butr_g1", "butd_g2"}
    rankers = {"vsepp_g1", "comp_g1", "comp_g1_seed2", "comp_g1_seed10", "comp_g2", "butr_g1"}
    rows = table_rows(captioners, rankers, [1, 2])
    assert list(rows) == [
        "BUTD",
        "BUTD+VSE++",
        "BUTD+comp",
        "BUTR+RR",
        "BUTD+comp seed 2",
        "BUTD+comp seed 10",
    ]
    assert rows["BUTD+comp"] == [(1, "butd_g1", "comp_g1"), (2, "butd_g2", "comp_g2")]
    assert rows["BUTD+VSE++"] == [(1, "butd_g1", "vsepp_g1")]
    assert rows["BUTD+comp seed 10"] == [(1, "butd_g1", "comp_g1_seed10")]


def test_the_weight_is_the_reproduction_s(tmp_path: Path) -> None:
    assert reproduction_weight(tmp_path / "compositional") is None
    (tmp_path / "reproduction.json").write_text(json.dumps({"rerank": {"weight": 0.02}}), encoding="utf-8")
    assert reproduction_weight(tmp_path / "compositional") == (0.02, str(tmp_path / "reproduction.json"))
    assert reproduction_weight(tmp_path) == (0.02, str(tmp_path / "reproduction.json"))


def test_the_command_wants_a_weight_before_it_trains(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["compositional", "--repo", str(tmp_path), "--evaluate", "--report", str(tmp_path / "reports")]
    assert lab_main(argv) == 2
    err = capsys.readouterr().err
    assert "pass --rerank-weight" in err and "build_report.json" not in err


def test_render_reports_rerenders_the_compositional_report(tmp_path: Path) -> None:
    report = _written(tmp_path / "compositional", _data())
    (tmp_path / "compositional" / "compositional.md").unlink()
    assert tmp_path / "compositional" / "compositional.md" in rerender(tmp_path)
    assert (tmp_path / "compositional" / "compositional.md").read_text(encoding="utf-8") == markdown(report)
