"""SceneWorld captions: five true captions per scene from a small grammar with synonym variation.

Human-like omission: every concept pair present in a scene (an object's colour or size with its noun,
an object's action with its noun) is mentioned by only a few of the five captions. The number of
mentions is drawn per pair (``MENTION_PROBS``) and spread over the captions that talk about the object,
so the mean mentions per present pair is about 1.5 (COCO: 1.57). Each caption records the pairs it
mentions as ``[kind, modifier, noun]`` with canonical names.

Grammar rules the later dependency parse relies on: adjectives stand right before their noun
("a big black cat"); a verb follows its subject noun phrase directly, or after "is/are/that is"
("a cat lying ...", "a woman is riding a horse", "a dog that is sitting").
Persons' colours are their clothes and are never used as adjectives of the person noun.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from service.text.concepts import load_concepts

CONCEPTS = load_concepts()
PERSONS = frozenset(n for n, v in CONCEPTS.nouns.items() if v["kind"] == "person")
Pair = tuple[str, str, str]

MENTION_PROBS = (0.06, 0.34, 0.34, 0.18, 0.08)  # P(a present pair is mentioned by 0, 1, 2, 3, 4 captions)
MIN_WORDS, MAX_WORDS = 5, 16
NUMBERS = {2: "two", 3: "three", 4: "four"}
SKY_PHRASES = ("in the sky", "high in the sky", "through the sky")
OVER = {
    "grass": ("over a field", "over the grass"),
    "street": ("over the street", "over a road"),
    "sand": ("over the beach", "over the sand"),
    "water": ("over the water", "over the lake"),
}
RELATION_WORDS = {
    "next to": ("next to", "near", "beside"),
    "left of": ("to the left of",),
    "right of": ("to the right of",),
    "above": ("above", "over"),
}
GROUP_VERBS = ("stand", "sit", "lie", "fly")  # verbs said of "two dogs" (no per-object prop)
PREFIXES = ("a photo of", "a picture of", "there is")
PREFIX_RATE = 0.15  # only reached by objects without a verb phrase form: ≈ 6% of all captions


def object_pairs(obj: dict[str, Any]) -> list[Pair]:
    """Concept pairs true of ``obj`` that captions can mention (persons' clothes colour excluded)."""
    noun = obj["noun"]
    pairs: list[Pair] = []
    if noun not in PERSONS:
        pairs.append(("adjective", obj["colour"], noun))
    pairs.append(("adjective", obj["size"], noun))
    if obj["action"]:
        pairs.append(("verb", obj["action"], noun))
    return pairs


def present_pairs(graph: dict[str, Any]) -> list[Pair]:
    """Distinct mentionable pairs of a scene, in object order."""
    out: list[Pair] = []
    for obj in graph["objects"]:
        for p in object_pairs(obj):
            if p not in out:
                out.append(p)
    return out


@dataclass
class Slot:
    """A noun phrase of a caption plan: one object, or a group of same-class objects ("two dogs")."""

    objs: list[dict[str, Any]]
    can_verb: bool
    size: bool = False
    colour: bool = False
    verb: bool = False

    def carries(self, pair: Pair) -> bool:
        kind, mod, noun = pair
        if any(o["noun"] != noun for o in self.objs):
            return False
        if kind == "verb":
            if len(self.objs) > 1 and mod not in GROUP_VERBS:
                return False
            return self.can_verb and all(o["action"] == mod for o in self.objs)
        if mod in CONCEPTS.sizes:
            return all(o["size"] == mod for o in self.objs)
        return noun not in PERSONS and all(o["colour"] == mod for o in self.objs)

    def mark(self, pair: Pair) -> None:
        if pair[0] == "verb":
            self.verb = True
        elif pair[1] in CONCEPTS.sizes:
            self.size = True
        else:
            self.colour = True

    def pairs(self) -> list[Pair]:
        o, noun = self.objs[0], self.objs[0]["noun"]
        out: list[Pair] = []
        if self.size:
            out.append(("adjective", o["size"], noun))
        if self.colour:
            out.append(("adjective", o["colour"], noun))
        if self.verb:
            out.append(("verb", o["action"], noun))
        return out


@dataclass
class Plan:
    kind: str  # single | pair | and | ride
    slots: list[Slot]
    relation: str | None = None
    extras: dict[str, Any] = field(default_factory=dict)


class Captioner:
    def __init__(self, graph: dict[str, Any], rng: np.random.Generator) -> None:
        self.g = graph
        self.rng = rng
        self.short = False  # set while re-realising a caption that came out too long
        self.objs: list[dict[str, Any]] = graph["objects"]
        self.bg: str = graph["background"]
        self.rel: dict[tuple[int, int], str] = {}
        self.rider_of: dict[int, int] = {}
        for r in graph["relations"]:
            if r["predicate"] == "on":
                self.rider_of[r["subject"]] = r["object"]
            elif isinstance(r["object"], int):
                self.rel[(r["subject"], r["object"])] = r["predicate"]

    # -------------------------------------------------------------------------------- helpers
    def choice(self, items: tuple[str, ...] | list[str]) -> str:
        return items[int(self.rng.integers(len(items)))]

    def noun_word(self, noun: str, plural: bool) -> str:
        syn = CONCEPTS.nouns[noun]["synonyms"]
        word = syn[0] if self.rng.random() < 0.55 or len(syn) == 1 else self.choice(syn[1:])
        return CONCEPTS.nouns[noun]["plural"][word] if plural else word

    def np(self, slot: Slot) -> str:
        o = slot.objs[0]
        words = [NUMBERS[len(slot.objs)] if len(slot.objs) > 1 else "a"]
        if slot.size:
            words.append(self.choice(CONCEPTS.sizes[o["size"]]["synonyms"]))
        if slot.colour:
            words.append(self.choice(CONCEPTS.colours[o["colour"]]["synonyms"]))
        words.append(self.noun_word(o["noun"], len(slot.objs) > 1))
        if o["noun"] in PERSONS and len(slot.objs) == 1 and not self.short and self.rng.random() < 0.08:
            words += ["in", "a", self.choice(CONCEPTS.colours[o["colour"]]["synonyms"]), "shirt"]
        return " ".join(words)

    def ing(self, verb: str) -> str:
        v = CONCEPTS.verbs[verb]
        word = v["synonyms"][0] if self.rng.random() < 0.7 else self.choice(v["synonyms"])
        return str(v["ing"][word])

    def place(self, slot: Slot) -> str:
        """Where the slot's objects are (true of all of them), or '' if they differ."""
        layers = {o["layer"] for o in slot.objs}
        if layers == {"sky"}:
            return self.choice(SKY_PHRASES + OVER.get(self.bg, ()))
        if "sky" in layers:
            return ""
        return self.choice(CONCEPTS.backgrounds[self.bg]["phrases"])

    def prop_np(self, prop: str) -> str:
        if self.short and prop in ("grass", "food"):
            return prop
        if prop == "grass":
            return self.choice(("grass", "some grass"))
        if prop == "food":
            return self.choice(("food", "some food", "food from a bowl"))
        return f"a {prop}"

    def vp(self, slot: Slot, with_place: bool = True) -> tuple[str, bool]:
        """Verb phrase (or a verb-less predicate) of the slot; returns (text, has_verb)."""
        o = slot.objs[0]
        place = self.place(slot) if with_place else ""
        if slot.verb:
            action = o["action"]
            word = self.ing(action)
            if action in ("hold", "eat") and o["prop"]:
                where = f" {place}" if place and o["prop"] != "grass" and self.rng.random() < 0.4 else ""
                return f"{word} {self.prop_np(o['prop'])}{where}", True
            if action == "lie" and not self.short and self.rng.random() < 0.3:
                word += " down"
            return (f"{word} {place}" if place else word), True
        single = len(slot.objs) == 1
        if (
            single
            and o["action"] in ("hold", "eat")
            and o["prop"]
            and o["noun"] in PERSONS
            and self.rng.random() < 0.5
        ):
            return f"with {self.prop_np(o['prop'])}", False
        if single and o["action"] is None and o["layer"] == "ground":
            if o["noun"] in ("bus", "truck", "car", "plane") and self.rng.random() < 0.4:
                return "parked " + place, False
            if o["noun"] == "boat" and self.bg == "water" and self.rng.random() < 0.4:
                return "floating " + place, False
        return place, False

    # -------------------------------------------------------------------------------- planning
    def plan(self) -> Plan:
        rng = self.rng
        main = int(self.g["main"])
        n = len(self.objs)
        subject = main if n == 1 or rng.random() < 0.85 else int(rng.integers(n))
        if subject in self.rider_of:
            horse = self.objs[self.rider_of[subject]]
            return Plan("ride", [Slot([self.objs[subject]], True), Slot([horse], False)])
        sobj = self.objs[subject]
        group = [
            o
            for j, o in enumerate(self.objs)
            if o["noun"] == sobj["noun"] and o["layer"] == sobj["layer"] and j not in self.rider_of
        ]
        if len(group) > 1 and rng.random() < 0.5:
            return Plan("single", [Slot(group, True)])
        others = [j for j in range(n) if j != subject and j not in self.rider_of]
        r = rng.random()
        if others and r < 0.5:
            second = others[int(rng.integers(len(others)))]
            pred = self.rel.get((subject, second))
            if pred in RELATION_WORDS:
                return Plan("pair", [Slot([sobj], True), Slot([self.objs[second]], True)], relation=pred)
        if others and r < 0.68:
            second = others[int(rng.integers(len(others)))]
            return Plan("and", [Slot([sobj], False), Slot([self.objs[second]], False)])
        return Plan("single", [Slot([sobj], True)])

    # -------------------------------------------------------------------------------- realisation
    def realise(self, plan: Plan, short: bool) -> str:
        rng = self.rng
        self.short = short
        s = plan.slots[0]
        subj = self.np(s)
        plural = len(s.objs) > 1
        be = "are" if plural else "is"
        if plan.kind == "ride":
            horse = self.np(plan.slots[1])
            place = "" if short or rng.random() < 0.4 else " " + self.place(plan.slots[1])
            if s.verb:
                form = self.choice(("{s} {v} {h}", "{s} {be} {v} {h}", "{s} that {be} {v} {h}"))
                text = form.format(s=subj, v=self.ing("ride"), h=horse, be=be)
            else:
                text = f"{subj} {self.choice(('on', 'on top of', 'on the back of'))} {horse}"
            return text + place
        if plan.kind == "and":
            o = plan.slots[1]
            both = Slot(s.objs + o.objs, False)
            place = "" if short else self.place(both)
            return f"{subj} and {self.np(o)} {place}".strip()
        if plan.kind == "pair":
            o = plan.slots[1]
            pred = plan.relation or "next to"
            rel = self.choice(RELATION_WORDS[pred])
            obj_np = self.np(o)
            tail = ""
            if o.verb:
                tail, _ = self.vp(o, with_place=False)
                tail = (" " if short else " that is ") + tail
            vp, _ = self.vp(s, with_place=not (short or tail) and pred != "above")
            if pred == "above" and not s.verb:
                vp = ""
            core = f"{subj} {vp}".strip()
            if s.verb and not short and rng.random() < 0.3:
                core = f"{subj} {be} {vp}"
            return f"{core} {rel} {obj_np}{tail}"
        # single
        vp, has_verb = self.vp(s, with_place=True)
        r = rng.random()
        if has_verb and r < 0.25:
            return f"{subj} {be} {vp}"
        if has_verb and r < 0.38:
            return f"{subj} that {be} {vp}"
        if (
            not short and r < PREFIX_RATE
        ):  # COCO-like: a filler prefix now and then, not in a third of captions
            prefix = self.choice(PREFIXES)
            if prefix == "there is" and plural:
                prefix = "there are"
            return f"{prefix} {subj} {vp}".strip()
        return f"{subj} {vp}".strip()


def fix_articles(text: str) -> str:
    words = text.split()
    for k in range(len(words) - 1):
        if words[k] in ("a", "an"):
            words[k] = "an" if words[k + 1][0] in "aeiou" else "a"
    return " ".join(words)


def caption_scene(graph: dict[str, Any], rng: np.random.Generator, count: int = 5) -> list[dict[str, Any]]:
    """``count`` captions of ``graph``: [{"text", "pairs"}], pairs as [kind, modifier, noun]."""
    cap = Captioner(graph, rng)
    plans = [cap.plan() for _ in range(count)]
    for pair in present_pairs(graph):
        feasible = [c for c in range(count) if any(sl.carries(pair) for sl in plans[c].slots)]
        want = int(rng.choice(len(MENTION_PROBS), p=MENTION_PROBS))
        if not feasible or want == 0:
            continue
        chosen = rng.choice(len(feasible), size=min(want, len(feasible)), replace=False)
        for k in sorted(int(x) for x in chosen):
            plan = plans[feasible[k]]
            next(sl for sl in plan.slots if sl.carries(pair)).mark(pair)
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for plan in plans:
        text = ""
        for attempt in range(8):
            text = fix_articles(cap.realise(plan, short=attempt >= 4))
            n = len(text.split())
            if MIN_WORDS <= n <= MAX_WORDS and text not in seen:
                break
        seen.add(text)
        pairs = [list(p) for sl in plan.slots for p in sl.pairs()]
        out.append({"text": text, "pairs": pairs})
    return out
