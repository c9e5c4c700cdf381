"""Which caption words name something a region can show, and what: a word → class table built from the
concept inventory (``service.text.concepts``). Object nouns with their synonyms and plurals map to the
noun concept (``puppies`` → ``dog``); the words of the background phrases map to the background
(``field``, ``lawn`` → ``grass``); held props map to themselves (``umbrella``). Exact lemma/synonym-set
matching stands in for the GloVe similarity of Cornia et al. (2022): there are no word vectors offline.

A region's labels: an object's noun and its prop (a held prop is drawn with its holder and has no box
of its own), or the scene's background."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from service.text.concepts import ConceptInventory, load_concepts

ARTICLES = frozenset({"a", "an", "the"})


@dataclass(frozen=True)
class Lexicon:
    """``classes``: word → class (object noun concept, background name or prop word)."""

    classes: Mapping[str, str]

    def noun_class(self, word: str) -> str | None:
        """The class ``word`` names, or None when it names nothing a region can show."""
        return self.classes.get(word)

    def is_noun(self, word: str) -> bool:
        return word in self.classes

    def sim(self, word: str, labels: Iterable[str]) -> float:
        """1.0 when ``word`` names one of a region's ``labels``, else 0.0 (exact synonym-set match)."""
        cls = self.classes.get(word)
        return 1.0 if cls is not None and cls in set(labels) else 0.0

    def nouns(self, words: Iterable[str]) -> list[str]:
        """The classes named by ``words``, in order (one per noun word)."""
        return [c for c in (self.classes.get(w) for w in words) if c is not None]


def build_lexicon(concepts: ConceptInventory) -> Lexicon:
    classes: dict[str, str] = {}
    for name, phrases in ((n, b["phrases"]) for n, b in concepts.backgrounds.items()):
        classes[name] = name
        for phrase in phrases:
            classes[phrase.split()[-1]] = name
    for props in concepts.props.values():
        for prop in props:
            classes[prop] = prop
    for noun, entry in concepts.nouns.items():  # object nouns last: they win over a background word
        for word in entry["synonyms"]:
            classes[word] = noun
        for word in entry.get("plural", {}).values():
            classes[word] = noun
    return Lexicon(classes)


@lru_cache(maxsize=1)
def default_lexicon() -> Lexicon:
    return build_lexicon(load_concepts())


def object_labels(obj: Mapping[str, Any]) -> tuple[str, ...]:
    """A scene-graph object's labels: its noun, and its prop when it holds one."""
    prop = obj.get("prop")
    return (str(obj["noun"]), str(prop)) if prop else (str(obj["noun"]),)
