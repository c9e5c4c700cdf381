"""The pure parts of the substitutivity test (Pantazopoulos et al., 2022, §4.3): which pairs are kept, and the
sub-captions after the substituted word."""

from __future__ import annotations

import pytest

from compcap_lab.studies.substitutivity import agreement, follows_up_to_the_word, markdown, substitution_table
from service.probes.scoring.substitutivity import substituted_tails, substitutivity_result


def test_pairs_need_both_words_often_enough_in_training_and_in_the_vocabulary() -> None:
    captions = (
        ["a puppy on the grass"] * 200 + ["a dog on the grass"] * 200 + ["a kitten"] * 5 + ["a cat"] * 300
    )
    vocab = {"a", "on", "the", "grass", "puppy", "dog", "puppies", "dogs", "kitten", "cat"}
    pairs, counts = substitution_table(captions, vocab, min_train=200)
    assert ("puppy", "dog") in pairs and ("puppies", "dogs") in pairs  # singular and plural
    assert all(fine != "kitten" for fine, _ in pairs)  # kitten occurs 5 times only
    by_pair = {(c["category"], c["fine"]): c for c in counts}
    assert by_pair[("dog", "puppy")]["fine_count"] == 200 and by_pair[("cat", "kitten")]["fine_count"] == 5
    pairs, _ = substitution_table(captions, vocab - {"dogs"}, min_train=200)
    assert ("puppies", "dogs") not in pairs and ("puppy", "dog") in pairs


def test_sub_captions_after_the_substituted_word() -> None:
    o, s = ["a", "ship", "on", "the", "lake"], ["a", "boat", "on", "the", "lake"]
    tails = substituted_tails(o, s, {"ship": "boat"})
    assert tails == (["on", "the", "lake"], ["on", "the", "lake"])
    assert substituted_tails(["a", "boat"], ["a", "boat"], {"ship": "boat"}) is None  # no S1 word in O
    assert substituted_tails(["a", "ship"], ["a", "cat"], {"ship": "boat"}) is None  # no substitute in S
    assert substituted_tails(["a", "ship"], ["a", "boat"], {"ship": "boat"}) == ([], [])


def test_st_starts_after_the_substitute_not_after_a_category_word_the_model_wrote_itself() -> None:
    """O holds the category word before its S1 word; S's first "dog" is the model's own."""
    o, s = "a dog and a puppy on the grass", "a dog and a dog on the grass"
    assert substituted_tails(o.split(), s.split(), {"puppy": "dog"}) == (
        ["on", "the", "grass"],
        ["on", "the", "grass"],
    )
    # a perfect substitution scores Ot vs St at 1: one image of the reproduction, one with a longer tail
    original = {1: o, 2: "a puppy lying on the green grass near a house"}
    substituted = {1: s, 2: "a dog lying on the green grass near a house"}
    result = substitutivity_result(
        original, substituted, {"puppy": "dog"}, {1: [o], 2: [original[2]]}, None, meteor=False
    )
    assert result["images_with_tails"] == 2 and result["exact_replacements"] == 2
    assert result["rows"]["Ot vs St"]["bleu4"] == pytest.approx(1.0)
    assert result["rows"]["O vs S"]["bleu4"] < 1.0


def test_s_follows_o_up_to_the_word_only_when_every_earlier_word_and_the_substitute_match() -> None:
    """The premise of Ot vs St, checked per image."""
    m = {"puppy": "dog", "ship": "boat"}
    assert follows_up_to_the_word(["a", "puppy", "on", "grass"], ["a", "dog", "in", "a", "field"], m) is True
    assert follows_up_to_the_word(["a", "brown", "puppy"], ["a", "small", "dog"], m) is False  # left earlier
    assert follows_up_to_the_word(["a", "puppy"], ["a", "puppy"], m) is False  # not substituted
    assert follows_up_to_the_word(["a", "cat"], ["a", "cat"], m) is None  # no S1 word in O


def test_agreement_scores_ot_vs_st_on_the_agreeing_images_only() -> None:
    o = {
        1: "a puppy lying on the green grass near a house",
        2: "a brown puppy on the grass",
        3: "a puppy sitting next to a red car on the road",
    }
    s = {
        1: "a dog lying on the green grass near a house",
        2: "a small dog on the grass",
        3: "a dog sitting next to a red car on the road",
    }
    found = agreement(o, s, {"puppy": "dog"}, None, meteor=False)
    assert (found["images"], found["follows"], found["tails"]) == (3, 2, 2)
    assert found["share"]["estimate"] == pytest.approx(2 / 3)
    assert found["share"]["low"] <= 2 / 3 <= found["share"]["high"]
    assert found["row"]["bleu4"] == pytest.approx(1.0) and found["row"]["images"] == 2


def test_the_committed_default_study_reports_its_agreement() -> None:
    """The committed default run holds every image's O and S: its agreement is recomputed from them."""
    import json
    from pathlib import Path

    from service.text.vocabulary import tokenize

    path = Path(__file__).resolve().parents[3] / "reports/substitutivity_default/substitutivity.json"
    report = json.loads(path.read_text(encoding="utf-8"))
    flags = [
        follows_up_to_the_word(tokenize(c["O"]), tokenize(c["S"]), report["mapping"])
        for c in report["captions"]
    ]
    assert len(flags) == report["images"] and None not in flags
    assert sum(bool(f) for f in flags) == report["agreement"]["follows"]
    assert "S follows O word for word" in markdown(report)
