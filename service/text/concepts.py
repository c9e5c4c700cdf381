"""The concept inventory (``concepts.json``): nouns, adjectives, verbs, their synonym sets and the
held-out concept pairs of Nikolaus et al. (2019), read by both ``export`` and ``service``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from service.checks import within

CONCEPTS_PATH = Path(__file__).with_name("concepts.json")


@dataclass(frozen=True)
class ConceptPair:
    """A held-out pair: ``kind`` is ``adjective`` (adjective, noun) or ``verb`` (verb, noun)."""

    kind: str
    modifier: str
    noun: str

    @property
    def label(self) -> str:
        """Human-readable name in the papers' word order: ``black cat``, ``eat man``."""
        return f"{self.modifier} {self.noun}"


@dataclass(frozen=True)
class ConceptInventory:
    raw: dict[str, Any]

    @property
    def nouns(self) -> dict[str, dict[str, Any]]:
        return dict(self.raw["nouns"])

    @property
    def colours(self) -> dict[str, dict[str, Any]]:
        return dict(self.raw["adjectives"]["colour"])

    @property
    def sizes(self) -> dict[str, dict[str, Any]]:
        return dict(self.raw["adjectives"]["size"])

    @property
    def verbs(self) -> dict[str, dict[str, Any]]:
        return dict(self.raw["verbs"])

    @property
    def props(self) -> dict[str, list[str]]:
        return dict(self.raw["props"])

    @property
    def backgrounds(self) -> dict[str, dict[str, Any]]:
        return dict(self.raw["backgrounds"])

    @property
    def pair_groups(self) -> list[list[ConceptPair]]:
        return [[ConceptPair(*p) for p in group] for group in self.raw["pair_groups"]]

    def group(self, number: int) -> list[ConceptPair]:
        """Pairs of held-out group ``number`` (1-based, as in the papers)."""
        groups = self.pair_groups
        within(1, len(groups), group=number)
        return groups[number - 1]

    def synonyms(self, concept: str) -> list[str]:
        """Synonym (lemma) set of a noun, adjective or verb concept."""
        for table in (self.nouns, self.colours, self.sizes, self.verbs):
            if concept in table:
                return list(table[concept]["synonyms"])
        raise KeyError(f"unknown concept {concept!r}")


@lru_cache(maxsize=1)
def load_concepts(path: str | None = None) -> ConceptInventory:
    """Load the inventory (cached); ``path`` overrides the packaged ``concepts.json``."""
    with open(path or CONCEPTS_PATH, encoding="utf-8") as handle:
        return ConceptInventory(json.load(handle))
