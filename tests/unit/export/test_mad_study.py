"""The MAD study (Wan et al., 2022; ``compcap-lab mad``): selection, refereeing and ranking on constructed
captions, Algorithm 2 (``--add``) against all at once, the ties at S = 0 and the ranking's sensitivity to the
tie-break, the resumable caption checkpoints, the CLI's input errors, and one end-to-end run on the tiny
repository."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from PIL import Image

from compcap_lab.cli import main
from compcap_lab.studies.mad.pool import MadError, Pool, caption_pool, image_dir_pool
from compcap_lab.studies.mad.report import render_markdown, tie_statement
from compcap_lab.studies.mad.scoring import Referee, pair_profiles
from compcap_lab.studies.mad.study import add_configuration, k_grid, run_mad, run_study
from compcap_lab.studies.mad.ties import (
    alternative_selection,
    compare_ranking,
    selection_ties,
    sensitivity_summary,
    tie_break_labels,
    tie_break_study,
    tie_counts,
    ties_from_selection,
)
from sceneworld.dataset import generate_graphs
from service.compare.configs import Configuration
from service.compare.ngsm import ngsm_profile

N, K = 40, 12
GARBAGE = "a cat cat cat cat on a boat"


def _pool(n: int = N) -> Pool:
    graphs = generate_graphs(n, seed=123)
    refs = [[c["text"] for c in g["captions"]] for g in graphs]
    return Pool("sceneworld", Path("."), list(range(n)), [""] * n, refs, graphs, seed=123)


def _captions(pool: Pool) -> dict[str, list[str]]:
    """GOOD says a reference; HALF says one on even images, garbage on odd; BAD always garbage; ALT
    another reference on images 0 mod 3, garbage elsewhere."""
    refs = pool.references
    assert refs is not None
    return {
        "GOOD": [r[0] for r in refs],
        "HALF": [r[1] if i % 2 == 0 else GARBAGE for i, r in enumerate(refs)],
        "BAD": [GARBAGE for _ in refs],
        "ALT": [r[2] if i % 3 == 0 else "two dogs" for i, r in enumerate(refs)],
    }


def test_selection_is_the_k_least_similar_and_the_wrong_model_ranks_last() -> None:
    pool = _pool()
    caps = _captions(pool)
    names = ["BAD", "GOOD", "HALF"]
    core = run_study(names, caps, pool.ids, K, Referee(pool))
    assert core["ks"] == [10, K] and len(core["pairs"]) == 3
    for pair in core["pairs"]:
        s = [ngsm_profile(x, y)[0] for x, y in zip(caps[pair["a"]], caps[pair["b"]], strict=True)]
        assert len(pair["indices"]) == K and pair["similarity"] == [s[i] for i in pair["indices"]]
        assert max(pair["similarity"]) <= min(v for i, v in enumerate(s) if i not in pair["indices"])
    assert set(core["results"]) == {"cider_d", "tuple_f1"}
    for metric, r in core["results"].items():
        assert r["ranking"] == ["GOOD", "HALF", "BAD"], metric
        assert r["perron_check"]["residual"] <= 1e-9 and r["residual_ok"]
        assert abs(sum(r["q"].values()) - 1) < 1e-12
        p = np.asarray(core["p"][metric][str(K)])
        i, j = names.index("GOOD"), names.index("BAD")
        assert p[i, j] > p[j, i]  # GOOD beats BAD on their own discrepant set
        assert set(r["stability"]) == {"10", str(K)} and r["stability"][str(K)] == pytest.approx(1.0)


def _by_pair(core: dict[str, Any]) -> dict[tuple[str, str], Any]:
    return {(p["a"], p["b"]): p for p in core["pairs"]}


def test_add_equals_all_at_once() -> None:
    pool = _pool()
    caps = _captions(pool)
    referee = Referee(pool)
    once = run_study(["GOOD", "HALF", "BAD", "ALT"], caps, pool.ids, K, referee)
    added = add_configuration(
        run_study(["GOOD", "HALF", "BAD"], caps, pool.ids, K, referee), "ALT", caps, pool.ids, referee
    )
    assert added["names"] == once["names"] and _by_pair(added) == _by_pair(once)
    for metric in once["p"]:
        for k in once["ks"]:
            assert np.array_equal(
                np.asarray(added["p"][metric][str(k)]), np.asarray(once["p"][metric][str(k)])
            )
        assert added["results"][metric]["ranking"] == once["results"][metric]["ranking"]
        assert added["results"][metric]["q"] == pytest.approx(once["results"][metric]["q"], abs=1e-12)
    with pytest.raises(MadError, match="already"):
        add_configuration(once, "ALT", caps, pool.ids, referee)


def test_k_bounds_references_and_selection_only() -> None:
    pool = _pool(8)
    caps = _captions(pool)
    with pytest.raises(MadError, match="pool size = 8"):
        run_study(["GOOD", "BAD"], caps, pool.ids, 9, Referee(pool))
    bare = Pool("images", Path("."), pool.ids, pool.file_names)
    with pytest.raises(MadError, match="no references"):
        Referee(bare)
    core = run_study(["GOOD", "BAD"], caps, pool.ids, 8, None)  # --no-referee: selection only
    assert core["p"] == {} and core["results"] == {} and len(core["pairs"][0]["indices"]) == 8
    assert k_grid(70)[:2] == [10, 15] and k_grid(70)[-1] == 70 and k_grid(4) == [4] and k_grid(12) == [10, 12]


def test_tie_counts_say_when_the_tie_break_decides() -> None:
    # six images, four at S = 0; D takes three of them: the tie-break picks which
    ties = tie_counts([0.0, 0.0, 0.0, 0.5, 0.2, 0.0], [0, 5, 1])
    assert ties == {
        "pool": 6,
        "k": 3,
        "zero": 4,
        "zero_share": pytest.approx(4 / 6),
        "selected_zero": 3,
        "boundary_s": 0.0,
        "boundary_tied": 4,
        "boundary_selected": 3,
        "by_tie_break": True,
    }
    alone = tie_counts([0.0, 0.1, 0.2, 0.3], [0, 1])  # distinct S: S alone decides
    assert alone["zero"] == 1 and alone["boundary_tied"] == 1 and not alone["by_tie_break"]
    assert not tie_counts([0.0, 0.0, 0.3], [0, 1])["by_tie_break"]  # every tied image is taken
    assert tie_counts([0.1, 0.2, 0.2], [0, 2])["by_tie_break"]  # a tie at S > 0 counts too
    with pytest.raises(ValueError, match="selected"):
        tie_counts([0.0, 0.1], [])
    stored = selection_ties([0.0, 0.0, 0.1], [0.0, 0.05, 0.1])
    assert stored == {
        "k": 3,
        "selected_zero": 2,
        "selected_zero_share": pytest.approx(2 / 3),
        "shared_nothing": 1,
        "boundary_tie": 0.1,
    }
    with pytest.raises(ValueError, match="equal length"):
        selection_ties([0.0], [0.0, 0.1])


def test_alternative_tie_breaks_reorder_only_the_tied_images() -> None:
    profiles = [(0.0, 0.1), (0.0, 0.0), (0.0, 0.3), (0.2, 0.5), (0.0, 0.2)]
    keys = [10, 11, 12, 13, 14]
    assert alternative_selection(profiles, keys, 2, "reported") == [1, 0]
    assert alternative_selection(profiles, keys, 2, "reverse") == [2, 4]
    drawn = alternative_selection(profiles, keys, 4, "random:3", pair_index=1)
    assert sorted(drawn) == [0, 1, 2, 4]  # every S = 0 image before the one at S = 0.2
    assert drawn == alternative_selection(profiles, keys, 4, "random:3", pair_index=1)  # seeded
    orders = {tuple(alternative_selection(profiles, keys, 4, f"random:{s}")) for s in range(20)}
    assert len(orders) > 1  # the seeds do draw other orders
    assert alternative_selection(profiles, keys, 5, "random:0")[-1] == 3
    assert tie_break_labels([0, 1]) == ["reverse", "random:0", "random:1"]
    for label in ("random", "random:x", "shuffle:1"):
        with pytest.raises(ValueError, match="tie-break"):
            alternative_selection(profiles, keys, 2, label)
    with pytest.raises(ValueError, match=r"k must be in \[1, 5\], got 6"):
        alternative_selection(profiles, keys, 6, "reverse")


def test_compare_ranking_and_its_summary() -> None:
    names = ["A", "B", "C"]
    p = np.array([[0.0, 0.9, 0.8], [0.5, 0.0, 0.7], [0.2, 0.3, 0.0]])  # A beats B beats C
    q = [0.5, 0.3, 0.2]
    same = compare_ranking(names, q, p)
    assert same["ranking"] == ["A", "B", "C"] and same["spearman"] == pytest.approx(1.0)
    assert same["same"] and same["top_same"] and same["bottom_same"]
    assert abs(sum(same["q"].values()) - 1) < 1e-12
    flipped = compare_ranking(names, q, p.T)  # every pairwise result reversed
    assert flipped["ranking"] == ["C", "B", "A"] and flipped["spearman"] == pytest.approx(-1.0)
    assert not (flipped["same"] or flipped["top_same"] or flipped["bottom_same"])
    flat = compare_ranking(names, [1 / 3] * 3, p)  # a constant reported q: ρ undefined
    assert flat["spearman"] is None
    summary = sensitivity_summary({"x": same, "y": flipped, "z": flat})
    assert summary == {
        "alternatives": 3,
        "min_spearman": pytest.approx(-1.0),
        "median_spearman": pytest.approx(0.0),
        "identical": 2,
        "top_changed": 1,
        "bottom_changed": 1,
    }
    assert sensitivity_summary({"z": flat})["min_spearman"] is None


def test_tie_break_study_on_constructed_captions() -> None:
    pool = _pool()
    caps = _captions(pool)
    names = ["GOOD", "HALF", "BAD"]
    core = run_study(names, caps, pool.ids, K, Referee(pool))
    ties = tie_break_study(core, caps, pool.ids, Referee(pool), seeds=(0, 1))
    assert ties["labels"] == ["reverse", "random:0", "random:1"] and len(ties["pairs"]) == 3
    for n, (row, pair) in enumerate(zip(ties["pairs"], core["pairs"], strict=True)):
        profiles = pair_profiles(caps[pair["a"]], caps[pair["b"]])
        s = [x for x, _ in profiles]
        assert row["zero"] == sum(v == 0.0 for v in s) and row["pool"] == N and row["k"] == K
        assert row["selected_zero"] == sum(v == 0.0 for v in pair["similarity"])
        assert alternative_selection(profiles, pool.ids, K, "reported") == pair["indices"]
        for label in ties["labels"]:
            other = alternative_selection(profiles, pool.ids, K, label, n)
            assert sorted(s[i] for i in other) == sorted(pair["similarity"])  # only ties reordered
            assert row["overlap"][label] == len(set(other) & set(pair["indices"]))
    # GOOD vs BAD: the garbage caption shares no 4-gram with a reference, so S = 0 on every image
    good_bad = next(p for p in ties["pairs"] if (p["a"], p["b"]) == ("GOOD", "BAD"))
    assert good_bad["zero"] == N and good_bad["by_tie_break"]
    assert ties["by_tie_break"] == sum(p["by_tie_break"] for p in ties["pairs"]) >= 1
    assert set(ties["rankings"]) == {"cider_d", "tuple_f1"}
    for metric, by_label in ties["rankings"].items():
        assert set(by_label) == set(ties["labels"])
        assert ties["summary"][metric]["alternatives"] == 3
        for r in by_label.values():
            assert r["ranking"][-1] == "BAD"  # garbage loses whichever tied images are taken
    report = {**core, "tie_break": ties}
    assert "decided by the tie-break in" in tie_statement(report)
    bare = tie_break_study(core, caps, pool.ids, None, seeds=(0,))
    assert bare["rankings"] == {} and bare["pairs"] == [
        {**row, "overlap": {k: v for k, v in row["overlap"].items() if k in bare["labels"]}}
        for row in ties["pairs"]
    ]
    stored = ties_from_selection(core, "no captions")
    assert stored["by_tie_break"] is None and stored["not_recomputed"] == "no captions"
    assert [p["selected_zero"] for p in stored["pairs"]] == [p["selected_zero"] for p in ties["pairs"]]
    assert "cannot be told" in tie_statement({**core, "tie_break": stored})


class FakeEngine:
    """Captions that depend only on the options and the pixels (a hash picks the words)."""

    WORDS = ("a", "dog", "cat", "red", "blue", "on", "the", "grass", "next", "to", "car", "big")

    def __init__(self) -> None:
        self.calls = 0

    def resolve(self, **options: Any) -> dict[str, Any]:
        return dict(options)

    async def caption_many(self, images: np.ndarray, params: Any, progress: Any = None) -> list[list[Any]]:
        self.calls += 1
        key = json.dumps(params, sort_keys=True).encode()
        out = []
        for image in images:
            digest = hashlib.sha256(key + image.tobytes()).digest()
            text = " ".join(self.WORDS[b % len(self.WORDS)] for b in digest[: 3 + digest[0] % 5])
            out.append([SimpleNamespace(text=text)])
        if progress is not None:
            progress(len(images))
        return out

    async def close(self) -> None:
        pass


def _image_dir(folder: Path, n: int) -> Path:
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(n):
        Image.fromarray(rng.integers(0, 255, (20, 20, 3), dtype=np.uint8)).save(folder / f"{i:03d}.png")
    return folder


def test_checkpoints_resume_and_refuse_another_header(tmp_path: Path) -> None:
    pool = image_dir_pool(_image_dir(tmp_path / "imgs", 10))
    configs = [Configuration("A", {"model": "butd"}), Configuration("B", {"model": "butr"})]
    engine = FakeEngine()
    folder = tmp_path / "captions"

    def run(configs: list[Configuration], chunk: int = 4) -> tuple[dict[str, list[str]], dict[str, float]]:
        return asyncio.run(caption_pool(engine, pool, configs, folder, (16, 16), chunk=chunk))  # type: ignore[arg-type]

    first, _ = run(configs)
    assert engine.calls == 6 and [len(v) for v in first.values()] == [10, 10]
    again, seconds = run(configs)
    assert engine.calls == 6 and again == first and set(seconds) == {"A", "B"}
    path = folder / "A.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines[:-1], lines[-1][:20]]) + "\n")  # a torn last chunk
    resumed, _ = run(configs)
    assert engine.calls == 7 and resumed == first
    other = [Configuration("A", {"model": "butd", "beam_size": 2}), configs[1]]
    with pytest.raises(MadError, match=r"checkpoint .*A\.jsonl"):
        run(other)
    with pytest.raises(MadError, match="checkpoint"):  # another chunk size is another header too
        run(configs, chunk=5)
    assert engine.calls == 7


def test_the_command_adds_a_configuration_as_if_all_ran_at_once(
    tiny_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = FakeEngine()

    async def fake_open(repo: Path, **settings: Any) -> FakeEngine:
        return engine

    monkeypatch.setattr("export.packaging.decoding.open_engine", fake_open)
    three = ["A=butd", "B=butr", "C=butd?beam_size=2"]
    common: dict[str, Any] = {"images": 30, "k": 6, "iid_images": 4}
    once = run_mad(tiny_repo, tmp_path / "once", configs=three, **common)
    run_mad(tiny_repo, tmp_path / "inc", configs=three[:2], **common)
    calls = engine.calls
    added = run_mad(tiny_repo, tmp_path / "inc", add=three[2])
    assert engine.calls - calls <= 2  # the new configuration only: pool and i.i.d. set, one chunk each
    assert added["names"] == once["names"] == ["A", "B", "C"] and added["timing"]["added"] == "C"
    assert added["p"] == once["p"] and _by_pair(added) == _by_pair(once)
    for metric in once["results"]:
        assert added["results"][metric]["ranking"] == once["results"][metric]["ranking"]
    assert added["iid"]["cider_d"] == once["iid"]["cider_d"]
    assert added["tie_break"] == once["tie_break"] and len(added["tie_break"]["pairs"]) == 3
    assert len(added["timing"]["runs_seconds"]) == 2 and len(once["timing"]["runs_seconds"]) == 1
    assert len(added["commands"]) == 2 and len(once["commands"]) == 1
    state = tmp_path / "inc" / "mad_work" / "state.json"
    with pytest.raises(MadError, match="already in the state"):
        run_mad(tiny_repo, tmp_path / "inc", add="C=butr")
    with pytest.raises(MadError, match="another pool"):
        run_mad(tiny_repo, tmp_path / "inc", add="D=butr", images=31)
    with pytest.raises(MadError, match="unknown model"):
        run_mad(tiny_repo, tmp_path / "inc", add="D=nosuch")
    assert json.loads(state.read_text())["names"] == ["A", "B", "C"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--configs", "butd"], "two or more"),
        (["--configs", "butd", "butd"], "repeated"),
        (["--configs", "butd", "nosuch"], "unknown model"),
        (["--configs", "butd", "butr", "--images", "5", "--k", "6"], "pool size = 5"),
        (["--configs", "butd", "butr", "--image-dir", "IMGS", "--k", "2"], "no references"),
    ],
)
def test_bad_input_is_a_clean_error_that_writes_nothing(
    tiny_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    _image_dir(tmp_path / "imgs", 3)
    argv = [str(tmp_path / "imgs") if a == "IMGS" else a for a in argv]
    out = tmp_path / "out"
    assert main(["mad", "--repo", str(tiny_repo), "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("compcap-lab mad: ") and message in err
    assert not out.exists()


def test_end_to_end_on_the_tiny_repository(tiny_repo: Path, tmp_path: Path) -> None:
    out = tmp_path / "reports"
    argv = ["mad", "--repo", str(tiny_repo), "--configs", "butd", "butr", "--images", "24", "--k", "4"]
    assert main([*argv, "--iid-images", "6", "--out", str(out)]) == 0
    for name in ("mad.md", "mad.json", "mad_discrepant.png", "mad_stability.png", "mad_work/state.json"):
        assert (out / name).stat().st_size > 0, name
    report = json.loads((out / "mad.json").read_text())
    assert (
        report["names"] == ["butd", "butr"]
        and report["k"] == 4
        and report["metrics"] == ["cider_d", "tuple_f1"]
    )
    assert len(report["pairs"]) == 1 and len(report["pairs"][0]["indices"]) == 4
    for metric in report["metrics"]:
        assert report["results"][metric]["residual_ok"] and len(report["p"][metric]["4"]) == 2
    assert set(report["duplicated"]) == {"butd", "butr"} and set(report["timing"]["pool_seconds"]) == {
        "butd",
        "butr",
    }
    assert report["iid"] is None or set(report["iid"]["cider_d"]) == {"butd", "butr"}
    assert 1 <= len(report["examples"]) <= 12
    ties = report["tie_break"]
    assert len(ties["pairs"]) == 1 and set(ties["summary"]) == {"cider_d", "tuple_f1"}
    assert set(ties["rankings"]["cider_d"]) == set(ties["labels"])
    text = (out / "mad.md").read_text()
    assert "MAD ranking" in text and "Ties at S = 0" in text and "ρ (CIDEr-D)" in text
    assert text == render_markdown(report)
