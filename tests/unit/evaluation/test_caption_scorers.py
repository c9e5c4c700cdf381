"""Pure-Python BLEU-1..4 and ROUGE-L (``service.evaluation.bleu`` / ``rouge``) against pycocoevalcap's
``Bleu(4)`` and ``Rouge()`` (installed in the dev environment): the same scores to 1e-12, on edge cases
and on random corpora, and without pycocoevalcap on the gateway's path."""

from __future__ import annotations

import ast
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.rouge.rouge import Rouge

from service.evaluation import bleu as bleu_module
from service.evaluation import metrics as metrics_module
from service.evaluation import rouge as rouge_module
from service.evaluation.bleu import bleu_stats, closest_length, corpus_bleu, ngram_counts
from service.evaluation.metrics import caption_metrics, meteor_score, normalise
from service.evaluation.rouge import corpus_rouge_l, lcs_length, rouge_l

TOL = 1e-12

# Hand-written corpus: one edge case per image (captions already normalised: space-joined tokens).
EDGE_REFS: dict[Any, list[str]] = {
    "empty_hyp": ["a cat on a mat", "a cat"],
    "empty_hyp_empty_ref": [""],
    "empty_ref_among_others": ["", "a dog runs"],
    "longer_than_refs": ["a dog", "the dog runs"],
    "no_3_4_gram_match": ["a man rides a horse on the beach"],
    "single_word": ["dog", "a dog in the park"],
    "single_word_no_match": ["a red bus"],
    "identical": ["a man is riding a wave on a surfboard", "a surfer in the sea"],
    "tie_closest": ["a b", "a b c d", "x y z w v u"],  # hyp of 3 words: 2 and 4 are both 1 away
    "tie_closest_longer_hyp": ["one two three four five", "one two three", "uno"],
    "repeated_words": ["the the cat", "the cat the cat"],  # clipping by the max count in one reference
    "max_p_r_from_different_refs": ["a b c d e f g h", "b x"],
    7: ["integer ids work too", "ids work"],
}
EDGE_HYPS: dict[Any, str] = {
    "empty_hyp": "",
    "empty_hyp_empty_ref": "",
    "empty_ref_among_others": "a dog",
    "longer_than_refs": "a big brown dog runs across the green field",
    "no_3_4_gram_match": "a horse a man the beach on",
    "single_word": "dog",
    "single_word_no_match": "car",
    "identical": "a man is riding a wave on a surfboard",
    "tie_closest": "a b c",
    "tie_closest_longer_hyp": "one two three four",
    "repeated_words": "the the the the cat",
    "max_p_r_from_different_refs": "b",
    7: "ids work too",
}


def pycoco_bleu(
    refs: Mapping[Any, Sequence[str]], hyps: Mapping[Any, str]
) -> tuple[list[float], list[list[float]]]:
    gts = {i: list(r) for i, r in refs.items()}
    res = {i: [hyps[i]] for i in refs}
    score, per_image = Bleu(4).compute_score(gts, res, verbose=0)
    return [float(s) for s in score], [[float(s) for s in row] for row in per_image]


def pycoco_rouge(refs: Mapping[Any, Sequence[str]], hyps: Mapping[Any, str]) -> tuple[float, list[float]]:
    gts = {i: list(r) for i, r in refs.items()}
    res = {i: [hyps[i]] for i in refs}
    score, per_image = Rouge().compute_score(gts, res)
    return float(score), [float(s) for s in per_image]


def max_difference(refs: Mapping[Any, Sequence[str]], hyps: Mapping[Any, str]) -> float:
    """Largest |ours − pycocoevalcap| over corpus and per-image BLEU-1..4 and ROUGE-L (shapes checked)."""
    ours_bleu, ours_bleu_per = corpus_bleu(refs, hyps)
    ref_bleu, ref_bleu_per = pycoco_bleu(refs, hyps)
    ours_rouge, ours_rouge_per = corpus_rouge_l(refs, hyps)
    ref_rouge, ref_rouge_per = pycoco_rouge(refs, hyps)
    assert len(ours_bleu) == 4 and len(ours_bleu_per) == 4
    assert all(len(row) == len(refs) for row in ours_bleu_per)
    assert len(ours_rouge_per) == len(refs)
    ours = np.array([*ours_bleu, *np.ravel(ours_bleu_per), ours_rouge, *ours_rouge_per])
    expected = np.array([*ref_bleu, *np.ravel(ref_bleu_per), ref_rouge, *ref_rouge_per])
    assert ours.shape == expected.shape
    return float(np.max(np.abs(ours - expected)))


def check_ranges(refs: Mapping[Any, Sequence[str]], hyps: Mapping[Any, str]) -> None:
    scores, per_image = corpus_bleu(refs, hyps)
    rouge, rouge_per = corpus_rouge_l(refs, hyps)
    for s in [*scores, *np.ravel(per_image), rouge, *rouge_per]:
        assert 0.0 <= s <= 1.0


def test_edge_cases_equal_pycocoevalcap() -> None:
    assert max_difference(EDGE_REFS, EDGE_HYPS) <= TOL
    check_ranges(EDGE_REFS, EDGE_HYPS)
    # each edge case alone, too (the corpus score is not a mean of the per-image ones)
    for i in EDGE_REFS:
        assert max_difference({i: EDGE_REFS[i]}, {i: EDGE_HYPS[i]}) <= TOL, i


def test_edge_case_values() -> None:
    _, per = corpus_bleu(EDGE_REFS, EDGE_HYPS)
    _, rouge_per = corpus_rouge_l(EDGE_REFS, EDGE_HYPS)
    bleu_of = {i: [per[k][j] for k in range(4)] for j, i in enumerate(EDGE_REFS)}
    rouge_of = dict(zip(EDGE_REFS, rouge_per, strict=True))
    # empty hypothesis: BLEU 0 (brevity penalty exp(-1e15)), ROUGE 0 ...
    assert bleu_of["empty_hyp"] == [0.0] * 4 and rouge_of["empty_hyp"] == 0.0
    # ... except that ROUGE splits on " ": "" is one empty token, matching an empty reference
    assert bleu_of["empty_hyp_empty_ref"] == [0.0] * 4 and rouge_of["empty_hyp_empty_ref"] == 1.0
    # identical hypothesis and reference: BLEU 1 − O(1e-9), ROUGE-L exactly 1
    assert bleu_of["identical"] == pytest.approx([1.0] * 4, abs=1e-8)
    assert rouge_of["identical"] == 1.0
    # no 3-/4-gram matches: BLEU-3/4 tiny but not 0 (tiny / small = 1e-6 per order)
    assert 0 < bleu_of["no_3_4_gram_match"][3] < 1e-3 < bleu_of["no_3_4_gram_match"][1]
    # a single matching word: BLEU-1 ≈ 1, BLEU-4 ≈ (1e-6)^(3/4)
    assert bleu_of["single_word"][0] == pytest.approx(1.0, abs=1e-8)
    assert bleu_of["single_word"][3] == pytest.approx(1e-6 ** (3 / 4), rel=1e-6)
    assert rouge_of["single_word_no_match"] == 0.0
    # the tie goes to the shorter reference (length 2 ≤ 3 words: no brevity penalty)
    assert closest_length([4, 2, 6], 3) == 2 and closest_length([2, 4], 3) == 2
    assert bleu_stats("a b c", EDGE_REFS["tie_closest"]).ref_length == 2
    assert bleu_stats("one two three four", EDGE_REFS["tie_closest_longer_hyp"]).ref_length == 3
    # clipping takes the largest count in any one reference ("the" ×2), not the sum over references
    stats = bleu_stats(EDGE_HYPS["repeated_words"], EDGE_REFS["repeated_words"])
    assert stats.guess == (5, 4, 3, 2) and stats.correct[0] == 3
    # precision and recall maxima may come from different references
    assert rouge_l("b", EDGE_REFS["max_p_r_from_different_refs"]) == pytest.approx(
        (1 + 1.44) * 1.0 * 0.5 / (0.5 + 1.44 * 1.0)
    )


def random_corpus(rng: np.random.Generator) -> tuple[dict[int, list[str]], dict[int, str]]:
    vocab = ["a", "the", "cat", "dog", "on", "sits", "red", "mat"]  # small: long n-grams do match

    def caption() -> str:
        return " ".join(rng.choice(vocab, size=int(rng.integers(0, 16))).tolist())

    images = int(rng.integers(1, 9))
    refs = {i: [caption() for _ in range(int(rng.integers(1, 6)))] for i in range(images)}
    hyps = {i: caption() for i in range(images)}
    return refs, hyps


def test_random_corpora_equal_pycocoevalcap() -> None:
    rng = np.random.default_rng(20240611)
    worst = 0.0
    for _ in range(200):
        refs, hyps = random_corpus(rng)
        worst = max(worst, max_difference(refs, hyps))
        check_ranges(refs, hyps)
        # identical hypotheses (the first reference) have BLEU-4 ≈ 1 once every one has ≥ 4 words
        same = {i: r[0] for i, r in refs.items()}
        if all(len(h.split()) >= 4 for h in same.values()):
            assert corpus_bleu(refs, same)[0][3] == pytest.approx(1.0, abs=1e-6)
        if all(h for h in same.values()):
            assert corpus_rouge_l(refs, same)[0] == 1.0
    assert worst <= TOL


def test_per_image_order_follows_references_and_ids_are_checked() -> None:
    refs = {"b": ["a dog"], "a": ["a cat on a mat"]}
    hyps = {"a": "a cat", "b": "a dog"}  # other order than refs
    _, per = corpus_bleu(refs, hyps)
    _, rouge_per = corpus_rouge_l(refs, hyps)
    assert per[0][0] == pytest.approx(1.0) and per[0][1] < 1  # "b" first, as pycocoevalcap's gts order
    assert rouge_per[0] == 1.0 and rouge_per[1] < 1
    assert max_difference(refs, hyps) <= TOL
    for scorer in (corpus_bleu, corpus_rouge_l):
        with pytest.raises(ValueError):
            scorer({"a": ["x"]}, {"b": "x"})
        with pytest.raises(ValueError):
            scorer({}, {})
        with pytest.raises(ValueError):
            scorer({"a": []}, {"a": "x"})


def test_helpers() -> None:
    assert lcs_length(["a", "b", "c", "d"], ["b", "d"]) == 2
    assert lcs_length([], ["a"]) == 0
    assert lcs_length(["x", "a", "y", "b"], ["a", "b", "x"]) == 2
    counts = ngram_counts(["a", "b", "a", "b"], 4)
    assert counts[("a", "b")] == 2 and counts[("a", "b", "a", "b")] == 1 and sum(counts.values()) == 10


def test_caption_metrics_equals_pycocoevalcap() -> None:
    refs = {
        0: ["A black cat sits on a table.", "a cat on a table", "the black kitten is sitting on the desk"],
        1: ["a red bus on the street", "a bus driving down a road"],
        2: ["a man eating a banana", "the man eats a banana on the beach"],
    }
    hyps = {0: "A black cat, sitting on a table!", 1: "a red bus", 2: "bananas"}
    scores = caption_metrics(refs, hyps, meteor=False)
    gts = {i: [normalise(r) for r in refs[i]] for i in refs}
    res = {i: normalise(h) for i, h in hyps.items()}
    expected_bleu, _ = pycoco_bleu(gts, res)
    expected_rouge, _ = pycoco_rouge(gts, res)
    ours = [scores.bleu1, scores.bleu2, scores.bleu3, scores.bleu4, scores.rouge_l]
    assert ours == pytest.approx([*expected_bleu, expected_rouge], abs=TOL)


def pycocoevalcap_imports(path: Path) -> list[str]:
    """The function holding each pycocoevalcap import of the file at ``path`` ("<module>": top level)."""
    found: list[str] = []

    def visit(node: ast.AST, owner: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                visit(child, child.name)
                continue
            if isinstance(child, ast.ImportFrom):
                names = [child.module or ""]
            elif isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            else:
                names = []
            if any(name.split(".")[0] == "pycocoevalcap" for name in names):
                found.append(owner)
            visit(child, owner)

    visit(ast.parse(path.read_text()), "<module>")
    return found


def test_no_pycocoevalcap_needed_except_for_meteor(monkeypatch: pytest.MonkeyPatch) -> None:
    # statically: the only pycocoevalcap import of these modules is the lazy one in meteor_score
    assert pycocoevalcap_imports(Path(str(bleu_module.__file__))) == []
    assert pycocoevalcap_imports(Path(str(rouge_module.__file__))) == []
    assert pycocoevalcap_imports(Path(str(metrics_module.__file__))) == ["meteor_score"]
    # at run time: with pycocoevalcap unimportable (the serve-only install) everything but METEOR works
    for name in [m for m in sys.modules if m == "pycocoevalcap" or m.startswith("pycocoevalcap.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "pycocoevalcap", None)
    monkeypatch.setattr("service.evaluation.metrics.java_available", lambda: True)
    refs = {0: ["a cat on a mat"], 1: ["a dog"]}
    hyps = {0: "a cat on the mat", 1: "a dog"}
    scores = caption_metrics(refs, hyps, meteor=True)
    assert 0 < scores.bleu4 < 1 and 0 < scores.rouge_l < 1
    assert scores.meteor is None and "pycocoevalcap is not installed" in scores.meteor_status
    score, status = meteor_score(refs, hyps)
    assert score is None and "pycocoevalcap is not installed" in status
