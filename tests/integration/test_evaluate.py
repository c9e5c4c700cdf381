"""``compcap-lab splits`` and ``compcap-lab evaluate`` end to end on the real tiny repository, a SceneWorld
dataset written by the test, the real spaCy attachment checker and onnxruntime."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from compcap_lab.cli import main
from compcap_lab.pipeline.zoo import ensure_eval_world
from compcap_lab.studies.evaluate import evaluate
from compcap_lab.studies.rerank_select import Entry, weight_sweep
from export.data.splits import load_split, split_path_for
from export.presets import get_preset
from sceneworld.dataset import write_dataset
from service.manifest import load_manifest


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("eval") / "world"
    write_dataset(folder, images=400, seed=424242, progress=False)
    return folder


def test_splits_cli_then_evaluate_json_shape(world: Path, tiny_repo: Path, tmp_path: Path) -> None:
    out = world / "splits" / "systematicity_1"
    assert (
        main(["splits", "--data", str(world), "--kind", "systematicity", "--group", "1", "--out", str(out)])
        == 0
    )
    split = load_split(out / "split.json")
    assert [p.label for p in split.pairs] == [
        "black cat",
        "big bird",
        "red bus",
        "small plane",
        "eat man",
        "lie woman",
    ]
    assert split.sets["test"] and not set(split.sets["test"]) & set(split.sets["train"])

    json_out = tmp_path / "eval.json"
    result = evaluate(tiny_repo, world, None, "systematicity", 1, json_out, meteor=False)
    assert json.loads(json_out.read_text()) == result
    assert result["split"] == "systematicity" and result["group"] == 1
    assert result["images"] == len(split.sets["test"])
    manifest = load_manifest(tiny_repo)
    expected = [(c.name, None) for c in manifest.captioners] + [
        (c.name, c.ranker or "vsepp") for c in manifest.captioners
    ]
    assert sorted((r["captioner"], str(r["ranker"])) for r in result["results"]) == sorted(
        (c, str(r)) for c, r in expected
    )
    for row in result["results"]:
        assert row["trained_on"] == "systematicity/1"
        assert set(row["recall_at_k"]) == {"1", "2", "3", "4", "5"}
        values = [row["recall_at_k"][k] for k in "12345"]
        assert all(0.0 <= v <= 1.0 for v in values) and values == sorted(values)  # recall never drops with K
        assert row["recall_at_5_mean"] == row["recall_at_k"]["5"]
        assert set(row["per_pair"]) == {p.label for p in split.pairs}
        for metric in ("bleu1", "bleu4", "rouge_l", "cider_d", "asl", "ttr1", "novel"):
            assert row[metric] is not None and row[metric] >= 0.0
        assert row["meteor"] is None  # skipped on request


def test_splits_then_evaluate_compose_without_a_split_file(
    world: Path, tiny_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``compcap-lab splits`` without ``--out`` writes where ``compcap-lab evaluate`` looks: the README's two
    commands compose with no ``--split-file``."""
    data = tmp_path / "world"
    shutil.copytree(world, data, ignore=shutil.ignore_patterns("splits"))  # no split yet
    where = ["--data", str(data), "--group", "1"]
    assert main(["splits", *where, "--kind", "systematicity"]) == 0
    printed = capsys.readouterr()
    assert json.loads(printed.out)["path"] == str(split_path_for(data, "systematicity", 1))
    assert "--split-file" not in printed.err  # nothing more to tell: evaluate finds it

    json_out = tmp_path / "eval.json"
    fast = ["--limit", "4", "--no-meteor", "--rerank-beam-size", "8", "--json", str(json_out)]
    assert main(["evaluate", "--repo", str(tiny_repo), *where, "--split", "systematicity", *fast]) == 0
    result = json.loads(json_out.read_text())
    assert (result["split"], result["group"], result["images"]) == ("systematicity", 1, 4)
    assert result["rerank_beam_size"] == 8 and all(r["meteor"] is None for r in result["results"])


def test_splits_written_elsewhere_name_the_split_file_evaluate_needs(
    world: Path, tiny_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "elsewhere"
    assert main(["splits", "--data", str(world), "--kind", "full", "--out", str(out)]) == 0
    assert f"--split-file {out / 'split.json'}" in capsys.readouterr().err
    args = ["evaluate", "--repo", str(tiny_repo), "--data", str(world), "--split", "full", "--limit", "2"]
    assert main([*args, "--no-meteor", "--split-file", str(out / "split.json")]) == 0


def test_evaluate_restricts_to_named_captioners(world: Path, tiny_repo: Path) -> None:
    result = evaluate(
        tiny_repo, world, None, "systematicity", 1, None, meteor=False, captioners=["butd"], limit=5
    )
    assert {r["captioner"] for r in result["results"]} == {"butd"} and result["images"] == 5
    with pytest.raises(ValueError, match="none of"):
        evaluate(tiny_repo, world, None, "systematicity", 1, None, meteor=False, captioners=["nope"])


def test_rerank_weight_sweep_matches_evaluate(world: Path, tiny_repo: Path) -> None:
    """The sweep's re-ordering of decoded candidates gives the same Recall@5 and CIDEr-D as evaluating
    BUTR+RR with that weight through the engine, and its baseline is BUTD's beam-5 row."""
    if not (world / "splits" / "systematicity_1" / "split.json").is_file():
        main(["splits", "--data", str(world), "--kind", "systematicity", "--group", "1", "--out",
              str(world / "splits" / "systematicity_1")])  # fmt: skip
    for set_name in ("test_no_comb",):
        if set_name not in load_split(world / "splits" / "systematicity_1" / "split.json").sets:
            pytest.skip("the split has no Test no Comb set")
    sweep = weight_sweep(tiny_repo, world, [Entry(1, "butr", "butr", "butd")], weights=(0.0, 0.3), beam=8)
    assert set(sweep["rows"]) == {"baseline", "likelihood", "0", "0.3"}

    def row(captioner: str, set_name: str, weight: float = 0.0) -> dict:
        result = evaluate(tiny_repo, world, None, "systematicity", 1, None, set_name=set_name, meteor=False,
                          captioners=[captioner], fallback_ranker=False, rerank_beam_size=8,
                          rerank_weight=weight)  # fmt: skip
        return next(r for r in result["results"] if r["ranker"] == (None if captioner == "butd" else "butr"))

    for weight, key in ((0.0, "0"), (0.3, "0.3")):
        recall = row("butr", "test", weight)["recall_at_5_mean"]
        assert sweep["rows"][key]["recall_at_5"] == pytest.approx(recall, abs=1e-6)
        cider = row("butr", "test_no_comb", weight)["cider_d"]
        assert sweep["rows"][key]["cider_d_no_comb"] == pytest.approx(cider, abs=1e-6)
    baseline = row("butd", "test_no_comb")["cider_d"]
    assert sweep["rows"]["baseline"]["cider_d_no_comb"] == pytest.approx(baseline, abs=1e-6)


def test_ensure_eval_world_renders_and_splits_once(tmp_path: Path) -> None:
    """A zoo meets a new evaluation world without retraining: rendered and split where missing, kept after."""
    preset = get_preset("tiny")
    folder = ensure_eval_world(tmp_path, preset, eval_seed=99, groups=(1,))
    assert folder == tmp_path / "data" / "eval_99"
    split_file = folder / "splits" / "systematicity_1" / "split.json"
    assert (folder / "captions.json").is_file() and (folder / "splits" / "full" / "split.json").is_file()
    sets = load_split(split_file).sets
    assert sets["test"] and not set(sets["test"]) & set(sets["train"])
    stamp = split_file.stat().st_mtime_ns, (folder / "captions.json").stat().st_mtime_ns
    assert ensure_eval_world(tmp_path, preset, eval_seed=99, groups=(1,)) == folder
    assert (split_file.stat().st_mtime_ns, (folder / "captions.json").stat().st_mtime_ns) == stamp


def test_evaluate_cli_names_a_bad_rerank_weight(
    world: Path, tiny_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    split_dir = world / "splits" / "systematicity_1"
    if not (split_dir / "split.json").is_file():
        main(
            [
                "splits",
                "--data",
                str(world),
                "--kind",
                "systematicity",
                "--group",
                "1",
                "--out",
                str(split_dir),
            ]
        )
    args = [
        "evaluate",
        "--repo",
        str(tiny_repo),
        "--data",
        str(world),
        "--split",
        "systematicity",
        "--group",
        "1",
    ]
    assert main([*args, "--rerank-weight", "20"]) == 2
    assert "rerank_weight" in capsys.readouterr().err
