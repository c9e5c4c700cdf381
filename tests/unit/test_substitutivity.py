"""The pure parts of the substitutivity test (seed 001 §4.3): which pairs are kept, and the sub-captions
after the substituted word."""

from __future__ import annotations

from export.studies.substitutivity import after_first, substitution_table


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


def test_sub_caption_after_the_first_target_word() -> None:
    assert after_first(["a", "ship", "on", "the", "lake"], {"ship"}) == ["on", "the", "lake"]
    assert after_first(["a", "boat"], {"ship"}) is None
    assert after_first(["a", "ship"], {"ship"}) == []
