"""Caption metrics: CIDEr-D with a fixed DF table against pycocoevalcap, BLEU / ROUGE-L sanity, METEOR
(needs Java: skipped with a reason otherwise)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pycocoevalcap.cider.cider import Cider

from service.evaluation.cider import CiderD
from service.evaluation.metrics import caption_metrics, java_available, meteor_score, normalise

REFS = {
    0: ["A black cat sits on a table.", "a cat on a table", "the black kitten is sitting on the desk"],
    1: ["a red bus on the street", "a bus driving down a road", "a big red bus in the city"],
    2: ["a man eating a banana", "a guy is eating some fruit", "the man eats a banana on the beach"],
    3: ["a bird flying over the sea", "a white bird flying", "a bird in the sky above water"],
    4: ["two dogs playing in the grass", "a brown dog and a white dog", "dogs on a lawn"],
}
HYPS = {
    0: "a black cat sitting on a table",
    1: "a red bus driving down the street",
    2: "a man eating a banana",
    3: "a bird on the beach",
    4: "a dog",
}


def test_cider_d_equals_pycocoevalcap_with_df_from_scored_refs() -> None:
    gts = {i: [normalise(r) for r in refs] for i, refs in REFS.items()}
    res = {i: [normalise(h)] for i, h in HYPS.items()}
    expected, expected_per = Cider().compute_score(gts, res)
    mean, per = CiderD.from_references(REFS).corpus_score(REFS, HYPS)
    assert mean == pytest.approx(float(expected), abs=1e-6)
    for n, i in enumerate(sorted(REFS)):
        assert per[i] == pytest.approx(float(expected_per[n]), abs=1e-6)
    assert mean > 0


def test_single_image_scores_nonzero_with_fixed_df(tmp_path: Path) -> None:
    one = {2: REFS[2]}
    # pycocoevalcap takes DF from the single image: every n-gram has df = 1 = N, IDF 0, score 0
    alone, _ = Cider().compute_score({2: [normalise(r) for r in REFS[2]]}, {2: [normalise(HYPS[2])]})
    assert float(alone) == 0.0
    train = {i: r for i, r in REFS.items() if i != 2}
    cider = CiderD.from_references(train)
    score = cider.score(HYPS[2], REFS[2])
    assert score > 0.5
    assert cider.corpus_score(one, {2: HYPS[2]})[0] == pytest.approx(score)
    assert cider.score_many([HYPS[2], "a dog"], REFS[2])[0] == pytest.approx(score)
    assert cider.score("a dog", REFS[2]) < score
    # save / load keeps every score
    path = tmp_path / "cider_df.json"
    cider.save(path)
    again = CiderD.load(path)
    assert again.ref_count == len(train)
    assert again.score(HYPS[2], REFS[2]) == pytest.approx(score, abs=1e-12)


def test_cider_df_counts_images_not_captions() -> None:
    cider = CiderD.from_references({0: ["a cat", "a cat a cat"], 1: ["a dog"]})
    assert cider.ref_count == 2
    assert cider.document_frequency[("a",)] == 2
    assert cider.document_frequency[("cat",)] == 1
    assert cider.document_frequency[("a", "cat")] == 1
    with pytest.raises(ValueError):
        CiderD.from_json({"format": "other"})


def test_bleu_rouge_sanity() -> None:
    refs = {i: r for i, r in REFS.items()}
    perfect = caption_metrics(refs, {i: r[0] for i, r in refs.items()}, meteor=False)
    assert perfect.bleu1 == pytest.approx(1.0, abs=1e-6)
    assert perfect.bleu4 == pytest.approx(1.0, abs=1e-6)
    assert perfect.rouge_l == pytest.approx(1.0, abs=1e-6)
    assert perfect.meteor is None and perfect.meteor_status == "disabled"
    ok = caption_metrics(refs, HYPS, meteor=False)
    bad = caption_metrics(refs, dict.fromkeys(refs, "purple elephants juggle quietly"), meteor=False)
    assert 0 < ok.bleu4 < 1 and 0 < ok.rouge_l < 1
    assert bad.bleu1 < 0.01 and bad.rouge_l == 0.0 and bad.cider_d == 0.0
    assert ok.bleu1 >= ok.bleu2 >= ok.bleu3 >= ok.bleu4
    assert ok.cider_d > bad.cider_d
    with pytest.raises(ValueError):
        caption_metrics(refs, {0: "a cat"})


@pytest.mark.skipif(not java_available(), reason="METEOR needs Java (java not on PATH)")
def test_meteor_runs_with_java() -> None:
    # one Java start (~6 s: METEOR loads its paraphrase tables)
    score, status = meteor_score(REFS, HYPS)
    assert status == "ok"
    assert score is not None and 0.2 < score < 1.0


def test_meteor_without_java_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("service.evaluation.metrics.shutil.which", lambda name: None)
    score, status = meteor_score(REFS, HYPS)
    assert score is None and "java" in status
