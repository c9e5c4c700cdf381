"""Scene-graph tuple F1: a SPICE analogue scored against SceneWorld's *exact* scene graphs.

SPICE (Anderson et al. 2016) parses a caption into a scene graph, flattens both graphs into sets of
tuples and reports the F1 of exactly matching tuples. SceneWorld images come with their true scene
graph (``sceneworld.scene.scene_graph``), so the reference side needs no parser: ``graph_tuples``
reads it off, and only the caption side (``caption_tuples``) is parsed.

Tuples (``tuple[str, ...]``, canonical concept names of ``concepts.json``; the category is decided by
the shape, see ``tuple_category``):

* object, length 1: ``(noun,)`` for every inventory noun (``("dog",)``) and every prop
  (``("kite",)``, ``("pizza",)``, ``("grass",)`` when eaten);
* attribute, length 2: ``(noun, colour)``, ``(noun, size)``, ``(noun, action)`` with the canonical verb
  (``("dog", "lie")`` for "a puppy laying down");
* relation, length 3: ``(noun_a, predicate, noun_b)``;
* background, length 2: ``("background", name)`` (``("background", "grass")`` for "in a field").

Stated choices:

* Tuples are over noun *concepts*, not object instances (as SPICE, which matches on words): two dogs,
  one red, make ``("dog", "red")`` true; "two dogs" states only ``("dog",)`` (counts are not tuples).
* Synonyms, plurals, -ing and 3rd-person verb forms map to the canonical concept through the
  inventory (``kittens`` → cat, ``large`` → big, ``laying``/``lies`` → lie): exact matching on
  canonical tuples stands in for SPICE's WordNet synonym matching.
* A person's colour is the colour of their clothes (the renderer paints it so). The graph states
  ``(person, colour)``; a caption states it by "a man in a red shirt" (also jacket, coat, dress, ...;
  or "wearing a red shirt"), and by a colour adjective on the person noun.
* Converse relations are one fact, stored in one canonical form: ``right of`` → ``left of`` and
  ``below`` → ``above`` with the arguments swapped; ``next to`` is symmetric, its two nouns sorted.
  Canonical predicates: ``next to``, ``left of``, ``above``, ``on`` (a rider on its horse: "on",
  "on top of", "on the back of", "riding"), ``holding`` (a held prop: "holding"/"carrying a kite",
  "with a kite") and ``eating`` (an eaten prop: "eating a pizza", "eating some grass",
  "with a sandwich"). "with" + prop resolves to holding or eating by the prop (the two prop lists of
  ``concepts.json`` are disjoint); "with" + an object noun states no relation.
* ``graph_tuples`` states every object, prop, colour, size, action, relation and the background of the
  graph: all of them can be said by the caption grammar (``sceneworld.captions``). Not stated:
  boxes, facing, layer, depth, "parked"/"floating" (not inventory verbs), counts.
* Caption parsing is word-level on ``service.text.vocabulary.tokenize`` tokens:

  - objects: every word of a noun's synonym set or its plural; props by word (and their "-s" plural);
  - background: a background word (the bare names and the last words of the background phrases:
    ``field``, ``lawn`` → grass, ``road`` → street, ``beach`` → sand, ``lake`` → water, ``room`` →
    floor). "grass" is also an eaten prop: it is the background only after a place preposition
    (on/in/over/through/across/along/at, articles and adjectives skipped), else the prop;
  - attributes from ``pairs`` (the ``AttachmentChecker``'s attached ``ConceptPair``s of the caption,
    computed outside: this module never imports spaCy). Without pairs, a fallback: colour/size
    adjectives immediately before a noun, possibly chained with "and" ("a big white and blue car"),
    and a verb (-ing or 3rd-person form) right after a noun phrase, possibly after "is/are/that is"
    ("a dog sitting", "a dog that is sitting", "a man in a red shirt holding ..."). The fallback
    misses copula adjectives ("the car is white") and post-nominal modifiers further away; the
    clothes rule applies in both modes;
  - relations: a relation phrase (longest match first) whose object is the first noun after it,
    articles, numbers and adjectives skipped; the subject is the nearest object noun before the
    phrase (props and places skipped). Spatial predicates and ``on`` need an object noun after the
    phrase ("on the grass" is a place), ``holding``/``eating`` take a prop or an object noun, "with"
    only a prop. Phrases: the generator's ("next to", "near", "beside", "to the left of",
    "to the right of", "above", "over", "on", "on top of", "on the back of", "riding", "holding",
    "carrying", "eating", "with") plus "close to", "alongside", "left of", "right of",
    "on the left/right of", "below", "under", "beneath", "underneath", "atop".

* Scores (``tuple_f1``): precision = |C ∩ R| / |C|, recall = |C ∩ R| / |R|, F1 their harmonic mean.
  Both sets empty → precision = recall = F1 = 1.0; exactly one empty → all 0.0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from service.text.concepts import ConceptInventory, ConceptPair, load_concepts
from service.text.lexicon import build_lexicon
from service.text.vocabulary import tokenize

Tuple = tuple[str, ...]
"""One tuple: (noun,) | (noun, attribute) | (noun, predicate, noun) | ("background", name)."""
TupleSet = frozenset[tuple[str, ...]]

BACKGROUND = "background"
CATEGORIES: tuple[str, ...] = ("object", "attribute", "relation", "background")

NEXT_TO, LEFT_OF, ABOVE, ON, HOLDING, EATING = "next to", "left of", "above", "on", "holding", "eating"
WITH = "with"  # surface predicate only: resolved to holding / eating by its prop
CONVERSES: dict[str, tuple[str, bool]] = {
    "right of": (LEFT_OF, True),
    "below": (ABOVE, True),
}
"""Surface predicate → (canonical predicate, swap subject and object)."""
OBJECT_PREDICATES = frozenset({NEXT_TO, LEFT_OF, "right of", ABOVE, "below", ON})

RELATION_PHRASES: dict[tuple[str, ...], str] = {
    ("next", "to"): NEXT_TO,
    ("near",): NEXT_TO,
    ("beside",): NEXT_TO,
    ("close", "to"): NEXT_TO,
    ("alongside",): NEXT_TO,
    ("to", "the", "left", "of"): LEFT_OF,
    ("on", "the", "left", "of"): LEFT_OF,
    ("left", "of"): LEFT_OF,
    ("to", "the", "right", "of"): "right of",
    ("on", "the", "right", "of"): "right of",
    ("right", "of"): "right of",
    ("above",): ABOVE,
    ("over",): ABOVE,
    ("below",): "below",
    ("under",): "below",
    ("beneath",): "below",
    ("underneath",): "below",
    ("on", "top", "of"): ON,
    ("on", "the", "back", "of"): ON,
    ("on",): ON,
    ("atop",): ON,
    ("with",): WITH,
}
"""Relation phrases (token tuples) → surface predicate; verb phrases (riding, holding, eating, ...) are
added from the inventory's verb forms by ``_tables``."""
VERB_PREDICATES = {"ride": ON, "hold": HOLDING, "eat": EATING}
PROP_PREDICATES = {"hold": HOLDING, "eat_person": EATING, "eat_animal": EATING}
"""``concepts.json`` prop list → the predicate "with <prop>" means."""

ARTICLES = frozenset({"a", "an", "the", "some", "another", "one", "two", "three", "four", "five", "several"})
COPULA = frozenset({"is", "are", "was", "were", "that", "who", "which", "being"})
PLACE_PREPOSITIONS = frozenset({"on", "in", "over", "through", "across", "along", "at"})
CLOTHES = frozenset(
    {"shirt", "jacket", "coat", "dress", "top", "sweater", "hoodie", "outfit", "jersey", "hat", "clothes"}
)
CLOTHES_INTRO = frozenset({"in", "wearing"})


@dataclass(frozen=True)
class _Tables:
    """Word → canonical concept tables of one inventory."""

    nouns: Mapping[str, str]  # object noun synonyms and plurals → noun
    persons: frozenset[str]  # person nouns (their colour is their clothes')
    colours: Mapping[str, str]  # colour synonyms → colour
    adjectives: Mapping[str, str]  # colour and size synonyms → colour / size
    verbs: Mapping[str, str]  # -ing and 3rd-person forms → verb
    props: Mapping[str, str]  # prop words (and -s plurals) → prop
    places: Mapping[str, str]  # background words → background
    prop_predicates: Mapping[str, str]  # prop → holding / eating
    phrases: tuple[tuple[tuple[str, ...], str], ...]  # relation phrases, longest first


def _plural(word: str) -> str:
    return word + "es" if word.endswith(("s", "x", "ch", "sh")) else word + "s"


def _third_person(verb: str) -> str:
    if verb.endswith("y") and verb[-2:-1] not in ("a", "e", "o", "u"):
        return verb[:-1] + "ies"
    return _plural(verb)


def _build_tables(concepts: ConceptInventory) -> _Tables:
    lexicon = build_lexicon(concepts)
    nouns = {w: c for w, c in lexicon.classes.items() if c in concepts.nouns}
    backgrounds = concepts.backgrounds
    places = {w: c for w, c in lexicon.classes.items() if c in backgrounds}
    places.update({name: name for name in backgrounds})
    props: dict[str, str] = {}
    prop_predicates: dict[str, str] = {}
    for key, names in concepts.props.items():
        for prop in names:
            props[prop] = props[_plural(prop)] = prop
            if key in PROP_PREDICATES:
                prop_predicates[prop] = PROP_PREDICATES[key]
    colours = {w: c for c, e in concepts.colours.items() for w in e["synonyms"]}
    sizes = {w: c for c, e in concepts.sizes.items() for w in e["synonyms"]}
    verbs: dict[str, str] = {}
    phrases = dict(RELATION_PHRASES)
    for verb, entry in concepts.verbs.items():
        for word in entry["synonyms"]:
            forms = [_third_person(word)] + ([entry["ing"][word]] if word in entry.get("ing", {}) else [])
            for form in forms:
                verbs[form] = verb
                if verb in VERB_PREDICATES:
                    phrases[(form,)] = VERB_PREDICATES[verb]
    persons = frozenset(n for n, e in concepts.nouns.items() if e.get("kind") == "person")
    return _Tables(
        nouns=nouns,
        persons=persons,
        colours=colours,
        adjectives={**colours, **sizes},
        verbs=verbs,
        props=props,
        places=places,
        prop_predicates=prop_predicates,
        phrases=tuple(sorted(phrases.items(), key=lambda kv: -len(kv[0]))),
    )


@lru_cache(maxsize=1)
def _default_tables() -> _Tables:
    return _build_tables(load_concepts())


def _tables(concepts: ConceptInventory | None) -> _Tables:
    return _default_tables() if concepts is None else _build_tables(concepts)


# ------------------------------------------------------------------------------------------ tuples
def relation_tuple(subject: str, predicate: str, obj: str) -> tuple[str, str, str]:
    """Canonical relation tuple: converses folded (``right of`` → ``left of``, ``below`` → ``above``,
    arguments swapped) and ``next to`` with its two nouns sorted."""
    canonical, swap = CONVERSES.get(predicate, (predicate, False))
    a, b = (obj, subject) if swap else (subject, obj)
    if canonical == NEXT_TO and b < a:
        a, b = b, a
    return (a, canonical, b)


def tuple_category(t: Tuple) -> str:
    """``object`` (length 1), ``relation`` (length 3), ``background`` (``("background", name)``) or
    ``attribute`` (any other length-2 tuple)."""
    if len(t) == 1:
        return "object"
    if len(t) == 3:
        return "relation"
    if len(t) == 2 and t[0] == BACKGROUND:
        return "background"
    if len(t) == 2:
        return "attribute"
    raise ValueError(f"not a tuple of length 1..3: {t!r}")


def graph_tuples(graph: Mapping[str, Any]) -> TupleSet:
    """All tuples a SceneWorld scene graph makes true.

    ``graph``: ``{"background": str, "objects": [{"noun", "colour", "size", "action" (str | None),
    "prop" (str | None), ...}], "relations": [{"subject": int, "predicate": str, "object": int | str}]}``
    (``sceneworld.scene.scene_graph``). Returns objects ``(noun,)`` and ``(prop,)``, attributes
    ``(noun, colour)``, ``(noun, size)``, ``(noun, action)``, relations in canonical form (plus
    ``(noun, "eating", prop)`` for an eating object with a prop) and ``("background", name)``."""
    objects = list(graph.get("objects", []))
    out: set[Tuple] = set()
    if graph.get("background"):
        out.add((BACKGROUND, str(graph["background"])))
    for obj in objects:
        noun = str(obj["noun"])
        out.add((noun,))
        for key in ("colour", "size", "action"):
            if obj.get(key):
                out.add((noun, str(obj[key])))
        prop = obj.get("prop")
        if prop:
            out.add((str(prop),))
            if obj.get("action") == "eat":
                out.add(relation_tuple(noun, EATING, str(prop)))
    for rel in graph.get("relations", []):
        subject = str(objects[int(rel["subject"])]["noun"])
        target = rel["object"]
        other = target if isinstance(target, str) else str(objects[int(target)]["noun"])
        out.add(relation_tuple(subject, str(rel["predicate"]), other))
        if isinstance(target, str):
            out.add((target,))
    return frozenset(out)


# ------------------------------------------------------------------------------------------ parsing
def _skip_back(words: Sequence[str], k: int, skip: frozenset[str], table: Mapping[str, str]) -> int:
    """Index of the first word at or before ``k`` that is not in ``skip`` and not an adjective of
    ``table`` (-1 if none)."""
    while k >= 0 and (words[k] in skip or words[k] in table):
        k -= 1
    return k


def _roles(words: Sequence[str], t: _Tables) -> tuple[dict[int, str], dict[int, str], dict[int, str]]:
    """Per token index: object nouns, props and places (background words)."""
    nouns = {i: t.nouns[w] for i, w in enumerate(words) if w in t.nouns}
    props: dict[int, str] = {}
    places: dict[int, str] = {}
    for i, w in enumerate(words):
        if i in nouns:
            continue
        if w in t.places and w in t.props:  # "grass": a place after a preposition, else the eaten prop
            before = _skip_back(words, i - 1, ARTICLES, t.adjectives)
            if before >= 0 and words[before] in PLACE_PREPOSITIONS:
                places[i] = t.places[w]
            else:
                props[i] = t.props[w]
        elif w in t.places:
            places[i] = t.places[w]
        elif w in t.props:
            props[i] = t.props[w]
    return nouns, props, places


def _clothes(
    words: Sequence[str], nouns: Mapping[int, str], t: _Tables
) -> tuple[set[Tuple], list[tuple[int, int]]]:
    """Person colour tuples from "<person> in a <colour> shirt" / "<person> (is) wearing a red shirt",
    and the (start, end) index spans of those clothes phrases (end inclusive)."""
    found: set[Tuple] = set()
    spans: list[tuple[int, int]] = []
    for i, w in enumerate(words):
        if w not in CLOTHES_INTRO:
            continue
        before = _skip_back(words, i - 1, COPULA, {})
        if before < 0 or nouns.get(before) not in t.persons:
            continue
        j = i + 1
        colours: list[str] = []
        while j < len(words) and (words[j] in ARTICLES or words[j] in t.adjectives or words[j] == "and"):
            if words[j] in t.colours:
                colours.append(t.colours[words[j]])
            j += 1
        if j < len(words) and words[j] in CLOTHES:
            found |= {(nouns[before], c) for c in colours}
            spans.append((i, j))
    return found, spans


def _fallback_attributes(
    words: Sequence[str], nouns: Mapping[int, str], spans: Sequence[tuple[int, int]], t: _Tables
) -> set[Tuple]:
    """Adjectives right before a noun (chained with "and"); verbs right after a noun phrase (after
    "is/are/that is" and a clothes phrase)."""
    found: set[Tuple] = set()
    for i, noun in nouns.items():
        k = i - 1
        while k >= 0 and (
            words[k] in t.adjectives or (words[k] == "and" and k > 0 and words[k - 1] in t.adjectives)
        ):
            if words[k] in t.adjectives:
                found.add((noun, t.adjectives[words[k]]))
            k -= 1
    span_at_end = {end: start for start, end in spans}
    for i, w in enumerate(words):
        if w not in t.verbs:
            continue
        k = i - 1
        while k >= 0 and (words[k] in COPULA or k in span_at_end):
            k = span_at_end[k] - 1 if k in span_at_end else k - 1
        if k >= 0 and k in nouns:
            found.add((nouns[k], t.verbs[w]))
    return found


def _relations(
    words: Sequence[str], nouns: Mapping[int, str], props: Mapping[int, str], t: _Tables
) -> set[Tuple]:
    found: set[Tuple] = set()
    k = 0
    while k < len(words):
        matched = 0
        for phrase, predicate in t.phrases:
            n = len(phrase)
            if tuple(words[k : k + n]) != phrase:
                continue
            j = k + n
            while j < len(words) and (words[j] in ARTICLES or words[j] in t.adjectives):
                j += 1
            subject = next((nouns[s] for s in range(k - 1, -1, -1) if s in nouns), None)
            if subject is None or j >= len(words):
                continue
            if predicate in OBJECT_PREDICATES:
                target = nouns.get(j)
            elif predicate == WITH:
                target = props.get(j)
                predicate = t.prop_predicates.get(target or "", "")
            else:  # holding / eating: a prop, or (falsely, but stated) an object noun
                target = props.get(j) or nouns.get(j)
            if target is None or not predicate:
                continue
            found.add(relation_tuple(subject, predicate, target))
            matched = n
            break
        k += max(matched, 1)
    return found


def caption_tuples(
    caption: str,
    pairs: Iterable[ConceptPair] | None = None,
    concepts: ConceptInventory | None = None,
) -> TupleSet:
    """The tuples ``caption`` states (canonical names; see the module docstring for the rules).

    ``pairs``: the caption's attached concept pairs (``AttachmentChecker.pairs`` / ``pairs_batch``
    element); they give the colour/size/verb attributes. ``None`` → the word-order fallback.
    ``concepts``: the inventory (default ``load_concepts()``)."""
    t = _tables(concepts)
    words = tokenize(caption)
    nouns, props, places = _roles(words, t)
    out: set[Tuple] = {(n,) for n in nouns.values()} | {(p,) for p in props.values()}
    out |= {(BACKGROUND, b) for b in places.values()}
    clothes, spans = _clothes(words, nouns, t)
    out |= clothes
    if pairs is None:
        out |= _fallback_attributes(words, nouns, spans, t)
    else:
        for pair in pairs:
            out |= {(pair.noun,), (pair.noun, pair.modifier)}
    out |= _relations(words, nouns, props, t)
    return frozenset(out)


# ------------------------------------------------------------------------------------------ scores
def _prf(matches: int, candidates: int, references: int) -> tuple[float, float, float]:
    if candidates == 0 and references == 0:
        return 1.0, 1.0, 1.0
    precision = matches / candidates if candidates else 0.0
    recall = matches / references if references else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def tuple_f1(candidate: Iterable[Tuple], reference: Iterable[Tuple]) -> dict[str, float]:
    """SPICE-style exact-match scores of ``candidate`` tuples against ``reference`` tuples.

    Returns ``precision``, ``recall``, ``f1`` in [0, 1] and the counts ``matches`` = |C ∩ R|,
    ``candidates`` = |C|, ``references`` = |R| (as floats). Both empty → 1.0; one empty → 0.0."""
    cand, ref = frozenset(candidate), frozenset(reference)
    matches = len(cand & ref)
    precision, recall, f1 = _prf(matches, len(cand), len(ref))
    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "matches": float(matches),
        "candidates": float(len(cand)),
        "references": float(len(ref)),
    }


def caption_tuple_f1(
    caption: str,
    graph: Mapping[str, Any],
    pairs: Iterable[ConceptPair] | None = None,
    concepts: ConceptInventory | None = None,
) -> dict[str, float]:
    """``tuple_f1(caption_tuples(caption, pairs), graph_tuples(graph))``."""
    return tuple_f1(caption_tuples(caption, pairs, concepts), graph_tuples(graph))


def corpus_tuple_f1(
    captions: Sequence[str],
    graphs: Sequence[Mapping[str, Any]],
    pairs: Sequence[Iterable[ConceptPair] | None] | None = None,
    concepts: ConceptInventory | None = None,
) -> dict[str, float]:
    """Tuple F1 of one caption per image (``captions[i]`` describes ``graphs[i]``; ``pairs[i]`` its
    attached pairs, or ``pairs=None`` for the fallback everywhere).

    Returns ``precision``, ``recall``, ``f1``: means of the per-image scores; ``micro_precision``,
    ``micro_recall``, ``micro_f1``: from the counts summed over images; per category c in
    ``CATEGORIES``: ``{c}_precision``, ``{c}_recall``, ``{c}_f1`` (micro, from the category's summed
    counts); ``images``. An empty corpus raises ``ValueError``."""
    if len(captions) != len(graphs):
        raise ValueError(f"captions ({len(captions)}) and graphs ({len(graphs)}) differ in length")
    if pairs is not None and len(pairs) != len(captions):
        raise ValueError(f"pairs ({len(pairs)}) and captions ({len(captions)}) differ in length")
    if not captions:
        raise ValueError("empty corpus")
    sums = {"precision": 0.0, "recall": 0.0, "f1": 0.0}
    counts = {c: [0, 0, 0] for c in ("all", *CATEGORIES)}  # matches, candidates, references
    for k, (caption, graph) in enumerate(zip(captions, graphs, strict=True)):
        cand = caption_tuples(caption, None if pairs is None else pairs[k], concepts)
        ref = graph_tuples(graph)
        score = tuple_f1(cand, ref)
        for key in sums:
            sums[key] += score[key]
        for category in ("all", *CATEGORIES):
            got = cand if category == "all" else {x for x in cand if tuple_category(x) == category}
            want = ref if category == "all" else {x for x in ref if tuple_category(x) == category}
            counts[category][0] += len(got & want)
            counts[category][1] += len(got)
            counts[category][2] += len(want)
    n = len(captions)
    out: dict[str, float] = {key: value / n for key, value in sums.items()}
    for category, (matches, cands, refs) in counts.items():
        precision, recall, f1 = _prf(matches, cands, refs)
        prefix = "micro" if category == "all" else category
        out.update({f"{prefix}_precision": precision, f"{prefix}_recall": recall, f"{prefix}_f1": f1})
    out["images"] = float(n)
    return out
