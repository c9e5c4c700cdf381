"""Compositional rankers on a zoo (``compcap_lab.pipeline.compositional_rankers``): on a tiny zoo built as
``compcap-lab models`` builds one (group 1 only: BUTR, BUTD, VSE++), the rankers are trained from the zoo's
own world, split, encoder and vocabulary, written with the zoo's models into a new repository, listed
there, and used by the product's engine for ``rerank=comp_g1``; ``compcap-lab compositional`` finds
them trained and writes the same repository; the evaluation compares them as the reproduction's controls."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from compcap_lab.cli import main as lab_main
from compcap_lab.pipeline.compositional_rankers import (
    Options,
    ZooTraining,
    add_rankers,
    default_out,
    evaluate_rankers,
    load_zoo,
    train_rankers,
)
from compcap_lab.pipeline.zoo import build_zoo
from compcap_lab.studies.compositional import reanalyse
from compcap_lab.training.compositional import ARCHITECTURE, attached_modifiers
from export.packaging.decoding import decode, open_engine
from export.packaging.package import TrainedRanker
from service.backends.triton.addresses import file_sha256
from service.manifest import load_manifest
from service.text.concepts import ConceptPair, load_concepts
from service.text.vocabulary import tokenize

OPTIONS = Options(per_image=2)
NAMES = ("comp_g1", "comp_g1_seed1")


@dataclass(frozen=True)
class Built:
    zoo: ZooTraining
    out: Path
    rankers: list[TrainedRanker]
    made: dict[str, Any]
    zoo_manifest: str  # the zoo's manifest.json before


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    folder = tmp_path_factory.mktemp("comp") / "zoo"
    build_zoo(folder, preset="tiny", groups=(1,), plan=[("butr", 1), ("butd", 1)], probe_sets=False)
    before = (folder / "manifest.json").read_text(encoding="utf-8")
    zoo = load_zoo(folder)
    out = default_out(folder)
    checkpoints = out.with_name(out.name + ".work") / "checkpoints"  # where the command looks for them
    rankers, _, made = train_rankers(zoo, [1], [1], 1, OPTIONS, checkpoints)
    add_rankers(zoo, rankers, out, {"made": made})
    return Built(zoo, out, rankers, made, before)


def test_the_new_repository_holds_the_zoo_and_lists_the_rankers(built: Built) -> None:
    zoo, out = built.zoo.zoo, built.out
    manifest, zoo_manifest = load_manifest(out), load_manifest(zoo)
    assert (zoo / "manifest.json").read_text(encoding="utf-8") == built.zoo_manifest  # the zoo is untouched
    assert [r.name for r in manifest.rankers] == [*(r.name for r in zoo_manifest.rankers), *NAMES]
    for model in zoo_manifest.models:  # the zoo's models, as they were
        assert file_sha256(model.path(out)) == file_sha256(model.path(zoo))
    assert (out / "vocab.json").read_bytes() == (zoo / "vocab.json").read_bytes()
    assert not (out / "staging_only_init").exists()
    group = [ConceptPair(p.kind, p.modifier, p.noun) for p in manifest.rankers[-1].training.held_out_pairs]
    assert group == load_concepts().group(1)
    for name in NAMES:
        entry = next(r for r in manifest.rankers if r.name == name)
        assert entry.architecture == ARCHITECTURE and entry.training.split == "systematicity/1"
        assert {m.name for m in manifest.models if m.owner == name} == {f"{name}_image", f"{name}_text"}
        assert (out / f"{name}_text" / "config.pbtxt").is_file() and (
            out / "torch" / f"{name}_image.pt2"
        ).is_file()
    # comp_g1 starts where vsepp_g1 started (its seed); the other seed as `compcap-lab seeds` seeds VSE++
    assert built.made["ranker_seeds"] == {"comp_g1": built.zoo.vsepp_seed(1), "comp_g1_seed1": 1 + 3}
    negatives = built.made["negatives"]["group1"]
    assert negatives["image_negatives"] > 0 and negatives["caption_negatives"] > 0
    assert negatives["pairs"] == sum(len(built.zoo.captions[r]) for r in built.zoo.rows(built.zoo.split(1)))


async def _caption(repo: Path, images: np.ndarray, ranker: str) -> list[list[Any]]:
    async with await open_engine(repo) as engine:
        params = engine.resolve(model="butd_g1", rerank=ranker, beam_size=6, n_best=6)
        assert params.ranker == ranker
        return await decode(engine, images, params, ranker)


def test_the_engine_reranks_beams_by_the_new_ranker(built: Built) -> None:
    """Each caption's ranker score is the trained ranker's cosine (torch, on the zoo's encoder), and
    the captions come in its order."""
    zoo, images = built.zoo, built.zoo.test_images[:3]
    ranker = built.rankers[0].model
    with torch.no_grad():
        embedded = ranker.image_embedding(zoo.encoder(torch.from_numpy(images)))  # type: ignore[operator]
    captions = asyncio.run(_caption(built.out, images, "comp_g1"))
    for k, per_image in enumerate(captions):
        scores = [c.ranker_score for c in per_image]
        assert len(per_image) == 6 and scores == sorted(scores, reverse=True)
        for caption in per_image:
            tokens = torch.tensor([[zoo.vocab.bos_id, *zoo.vocab.encode(caption.text)]])
            with torch.no_grad():
                text = ranker.text_embedding(tokens, torch.tensor([tokens.size(1)]))  # type: ignore[operator]
            assert caption.ranker_score == pytest.approx(float(embedded[k] @ text[0]), abs=1e-4)
    other = asyncio.run(_caption(built.out, images, "vsepp_g1"))
    assert [[c.ranker_score for c in per] for per in other] != [
        [c.ranker_score for c in per] for per in captions
    ]


def test_the_command_finds_the_trained_rankers_and_writes_the_repository(built: Built) -> None:
    argv = ["compositional", "--repo", str(built.zoo.zoo), "--groups", "1", "--seeds", "1"]
    assert lab_main([*argv, "--image-negatives", str(OPTIONS.per_image)]) == 0
    report = json.loads((built.out / "compositional_report.json").read_text(encoding="utf-8"))
    assert report["negatives"] == {}  # every ranker came from its checkpoint: none was trained again
    assert report["ranker_seeds"] == built.made["ranker_seeds"] and set(report["training"]) == set(NAMES)
    assert [r.name for r in load_manifest(built.out).rankers][-2:] == list(NAMES)


def test_a_folder_that_is_no_zoo_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert lab_main(["compositional", "--repo", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("compcap-lab compositional: ") and "build_report.json is missing" in err
    assert err.count("\n") == 1


def _pairs(texts: list[str] | Any) -> list[frozenset[ConceptPair]]:
    """What each caption attaches, by SceneWorld's grammar (no parser)."""
    return [frozenset(m.pair for m in attached_modifiers(tokenize(t))) for t in texts]


def test_the_evaluation_compares_the_rankers_as_the_controls(built: Built, tmp_path: Path) -> None:
    """BUTD's beams re-ranked by VSE++ and by the compositional rankers beside BUTD and BUTR+RR, as the
    reproduction's controls: every row's first ranks stored, its paired tests, the seen pairs (the other
    groups') on Test no Comb, and the ceiling from the very beams the rankers re-ordered."""
    report = evaluate_rankers(built.out, built.zoo.zoo, [1], tmp_path, 0.0, pairs_fn=_pairs, meteor=False)
    assert list(report["held_out"]) == ["BUTD", "BUTD+VSE++", "BUTD+comp", "BUTR+RR", "BUTD+comp seed 1"]
    assert report["data"]["rows"]["BUTD+comp"] == [[1, "butd_g1", "comp_g1"]]
    for label, row in report["held_out"].items():
        assert row["recall_at_5"] is not None and report["quality"][label]["cider_d"] is not None
    assert set(report["paired"]["pooled"]) == {"BUTD+comp vs BUTD+VSE++", "BUTD+comp vs BUTR+RR"}
    assert set(report["seeds"]["tests"]) == {"zoo", "1"} and report["seeds"]["pooled"] is not None
    seen = report["data"]["raw"]["group1/test_no_comb"]["results"][0]["per_pair"]
    others = [p for g in (2, 3, 4) for p in load_concepts().group(g)]
    assert list(seen) == [p.label for p in others]
    cases = report["data"]["raw"]["group1/test"]["results"][0]["per_pair"]
    assert report["ceiling"]["pooled"]["cases"] == sum(len(p["first_rank"]) for p in cases.values())
    assert report["ceiling"]["hits_outside_beams"] == dict.fromkeys(
        ["BUTD+VSE++", "BUTD+comp", "BUTD+comp seed 1"], 0
    )
    assert {t["target"] for t in report["targets"]} == {"recall", "paired", "seeds", "cider", "seen"}
    table = (tmp_path / "compositional.md").read_text(encoding="utf-8")
    assert "| BUTD+comp |" in table and (tmp_path / "compositional.png").is_file()
    assert reanalyse(tmp_path) == json.loads(json.dumps(report))
