"""SceneWorld scene sampling: objects, attributes, layout and relations, as a JSON-ready scene graph.

Layout is decided in normalised image coordinates (0..1, y down) and only converted to pixels at the
end, so the same (seed, index) gives the same scene at every ``image_size``. Objects are listed in
drawing order (back to front): later objects cover earlier ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from service.checks import at_least
from service.text.concepts import load_concepts

CONCEPTS = load_concepts()
NOUNS: tuple[str, ...] = tuple(CONCEPTS.nouns)
COLOURS: tuple[str, ...] = tuple(CONCEPTS.colours)
SIZES: tuple[str, ...] = tuple(CONCEPTS.sizes)
VERBS: tuple[str, ...] = tuple(CONCEPTS.verbs)
BACKGROUNDS: tuple[str, ...] = tuple(CONCEPTS.backgrounds)
PERSONS = frozenset(n for n, v in CONCEPTS.nouns.items() if v["kind"] == "person")

# Unit extent of an object = typical_size x size scale x UNIT (fraction of the image side), jittered.
UNIT = 0.78
SIZE_JITTER = 0.05

# Bounding-box (width, height) per pose, in units of the object's unit extent.
_PERSON_BOX = {
    "stand": (0.42, 1.0),
    "sit": (0.55, 0.68),
    "lie": (1.0, 0.28),
    "ride": (0.45, 0.78),
    "hold": (0.72, 1.0),
    "eat": (0.5, 1.0),
}
POSE_BOX: dict[str, dict[str, tuple[float, float]]] = {
    "man": _PERSON_BOX,
    "woman": _PERSON_BOX,
    "child": _PERSON_BOX,
    "dog": {"stand": (1.0, 0.8), "sit": (0.68, 0.9), "lie": (1.0, 0.5), "eat": (1.0, 0.8)},
    "cat": {"stand": (1.0, 0.72), "sit": (0.6, 0.75), "lie": (1.0, 0.45), "eat": (1.0, 0.72)},
    "horse": {"stand": (1.0, 1.0), "lie": (1.0, 0.55), "eat": (1.0, 0.9), "none": (1.0, 1.0)},
    "bird": {"stand": (0.9, 1.0), "sit": (0.9, 0.7), "eat": (1.0, 0.8), "fly": (1.0, 0.55)},
    "bus": {"none": (1.0, 0.58)},
    "truck": {"none": (1.0, 0.62)},
    "car": {"none": (1.0, 0.55)},
    "plane": {"none": (1.0, 0.42), "fly": (1.0, 0.42)},
    "boat": {"none": (1.0, 0.85)},
    "table": {"none": (1.0, 0.6)},
}

# Where each class stands on the ground (background -> weight). Flying things go in any sky but a room's.
PLACES: dict[str, dict[str, float]] = {
    "man": {"grass": 1.0, "street": 1.0, "sand": 1.0, "floor": 0.8},
    "woman": {"grass": 1.0, "street": 1.0, "sand": 1.0, "floor": 0.8},
    "child": {"grass": 1.0, "street": 0.8, "sand": 1.0, "floor": 0.8},
    "dog": {"grass": 1.0, "street": 0.7, "sand": 0.8, "floor": 0.8},
    "cat": {"grass": 1.0, "street": 0.5, "sand": 0.4, "floor": 1.0},
    "horse": {"grass": 1.0, "street": 0.4, "sand": 0.6},
    "bird": {"grass": 1.0, "street": 0.6, "sand": 0.8},
    "bus": {"street": 1.0, "grass": 0.15},
    "truck": {"street": 1.0, "grass": 0.25, "sand": 0.2},
    "car": {"street": 1.0, "grass": 0.2, "sand": 0.1},
    "plane": {"street": 1.0, "grass": 0.5},
    "boat": {"water": 1.0, "sand": 0.25},
    "table": {"floor": 1.0, "grass": 0.4, "sand": 0.2},
}
SKY_PLACES = {"grass": 1.0, "street": 0.7, "sand": 0.8, "water": 1.0}

# Action weights per class ("none" = no action). Riding needs a horse and open ground.
ACTIONS: dict[str, dict[str, float]] = {
    "man": {"stand": 0.2, "sit": 0.15, "lie": 0.14, "ride": 0.15, "hold": 0.17, "eat": 0.19},
    "woman": {"stand": 0.2, "sit": 0.15, "lie": 0.16, "ride": 0.16, "hold": 0.17, "eat": 0.16},
    "child": {"stand": 0.2, "sit": 0.15, "lie": 0.14, "ride": 0.14, "hold": 0.19, "eat": 0.18},
    "dog": {"stand": 0.3, "sit": 0.25, "lie": 0.25, "eat": 0.2},
    "cat": {"stand": 0.3, "sit": 0.25, "lie": 0.25, "eat": 0.2},
    "horse": {"stand": 0.4, "lie": 0.22, "eat": 0.38},
    "bird": {"fly": 0.35, "stand": 0.27, "sit": 0.18, "eat": 0.2},
    "bus": {"none": 1.0},
    "truck": {"none": 1.0},
    "car": {"none": 1.0},
    "plane": {"fly": 0.55, "none": 0.45},
    "boat": {"none": 1.0},
    "table": {"none": 1.0},
}

OBJECT_COUNT_PROBS = (0.33, 0.35, 0.21, 0.11)  # 1, 2, 3, 4 objects
DUPLICATE_PROB = 0.3  # a secondary object repeats the main class ("two dogs")
MAX_OVERLAP = 0.2


def _pick(rng: np.random.Generator, weights: dict[str, float]) -> str:
    keys = list(weights)
    p = np.array([weights[k] for k in keys], dtype=np.float64)
    return keys[int(rng.choice(len(keys), p=p / p.sum()))]


def _unit(rng: np.random.Generator, noun: str, size: str) -> float:
    typical = float(CONCEPTS.nouns[noun]["typical_size"])
    scale = float(CONCEPTS.sizes[size]["scale"])
    return typical * scale * UNIT * float(rng.uniform(1 - SIZE_JITTER, 1 + SIZE_JITTER))


class _Obj:
    """Mutable object record during sampling (normalised box)."""

    def __init__(self, rng: np.random.Generator, noun: str, action: str, background: str) -> None:
        self.noun = noun
        self.action = action
        self.colour = COLOURS[int(rng.integers(len(COLOURS)))]
        self.size = SIZES[int(rng.integers(len(SIZES)))]
        self.facing = "left" if rng.random() < 0.5 else "right"
        self.prop: str | None = None
        props = CONCEPTS.props
        if action == "hold":
            self.prop = props["hold"][int(rng.integers(len(props["hold"])))]
        elif action == "eat":
            if noun in PERSONS:
                self.prop = props["eat_person"][int(rng.integers(len(props["eat_person"])))]
            else:
                self.prop = "grass" if background == "grass" and noun != "bird" else "food"
        self.layer = "sky" if action == "fly" else "ground"
        unit = _unit(rng, noun, self.size)
        self.unit = unit  # the jittered unit extent (an edit of size or action rescales from it)
        fw, fh = POSE_BOX[noun][action if action in POSE_BOX[noun] else "none"]
        self.w = min(unit * fw, 0.96)
        self.h = min(unit * fh, 0.96)
        self.x0 = 0.0
        self.y0 = 0.0
        self.rider_of: _Obj | None = None  # set on a rider: the horse it sits on
        self.headroom = 0.0  # set on a ridden horse: room needed above it for the rider
        self.depth = 0.0

    @property
    def box(self) -> tuple[float, float, float, float]:
        return (self.x0, self.y0, self.x0 + self.w, self.y0 + self.h)


def _overlap(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """Intersection area over the smaller box's area."""
    iw = min(a[2], b[2]) - max(a[0], b[0])
    ih = min(a[3], b[3]) - max(a[1], b[1])
    if iw <= 0 or ih <= 0:
        return 0.0
    small = min((a[2] - a[0]) * (a[3] - a[1]), (b[2] - b[0]) * (b[3] - b[1]))
    return iw * ih / max(small, 1e-9)


def _place(rng: np.random.Generator, obj: _Obj, horizon: float) -> None:
    obj.x0 = float(rng.uniform(0.01, max(0.011, 0.99 - obj.w)))
    if obj.layer == "sky":
        lo = obj.h / 2 + 0.01
        hi = max(lo, horizon - obj.h / 2 - 0.02)
        cy = float(rng.uniform(lo, hi))
        obj.y0 = cy - obj.h / 2
        obj.depth = -1.0
    else:
        lo = max(horizon + 0.06, obj.h + obj.headroom + 0.01)
        bottom = float(rng.uniform(min(lo, 0.985), 0.985))
        obj.y0 = bottom - obj.h
        obj.depth = bottom


def _rider_box(rider: _Obj, horse: _Obj) -> None:
    rider.x0 = horse.x0 + 0.45 * horse.w - rider.w / 2
    rider.y0 = horse.y0 + 0.55 * horse.h - rider.h
    rider.depth = horse.depth + 1e-6


def sample_scene(rng: np.random.Generator) -> dict[str, Any]:
    """Sample background, objects (normalised boxes), relations; returns an intermediate scene."""
    noun = NOUNS[int(rng.integers(len(NOUNS)))]
    action = _pick(rng, ACTIONS[noun])
    if action == "fly":
        background = _pick(rng, SKY_PLACES)
    else:
        places = dict(PLACES[noun])
        if action == "ride":
            places.pop("floor", None)
        background = _pick(rng, places)
    horizon = float(rng.uniform(0.3, 0.45))
    main = _Obj(rng, noun, action, background)
    placed: list[_Obj] = []
    horse: _Obj | None = None
    if action == "ride":
        horse = _Obj(rng, "horse", "none", background)
        horse.facing = main.facing
        horse.headroom = max(0.0, main.h - 0.55 * horse.h)
        _place(rng, horse, horizon)
        _rider_box(main, horse)
        main.rider_of = horse
        placed += [horse, main]
    else:
        _place(rng, main, horizon)
        placed.append(main)

    total = 1 + int(rng.choice(len(OBJECT_COUNT_PROBS), p=OBJECT_COUNT_PROBS))
    for _ in range(12):
        if len(placed) >= total:
            break
        dup = rng.random() < DUPLICATE_PROB
        other = noun if dup else NOUNS[int(rng.integers(len(NOUNS)))]
        choices = {
            a: w
            for a, w in ACTIONS[other].items()
            if a != "ride"
            and (
                (a == "fly" and background != "floor")
                or (a != "fly" and background in PLACES[other] and background != "water")
                or (a != "fly" and other == "boat" and background == "water")
            )
        }
        if not choices:
            continue
        obj = _Obj(rng, other, _pick(rng, choices), background)
        for _ in range(12):
            _place(rng, obj, horizon)
            if all(_overlap(obj.box, p.box) <= MAX_OVERLAP for p in placed):
                placed.append(obj)
                break
        else:
            total -= 1

    order = sorted(range(len(placed)), key=lambda k: (placed[k].depth, k))
    return {
        "background": background,
        "horizon": horizon,
        "objects": [placed[k] for k in order],
        "main": order.index(placed.index(main)),
    }


def _relations(objs: list[_Obj]) -> list[dict[str, Any]]:
    rel: list[dict[str, Any]] = []
    for i, a in enumerate(objs):
        if a.prop is not None and a.action == "hold":
            rel.append({"subject": i, "predicate": "holding", "object": a.prop})
        if a.rider_of is not None:
            rel.append({"subject": i, "predicate": "on", "object": objs.index(a.rider_of)})
    for i, a in enumerate(objs):
        for j, b in enumerate(objs):
            if i == j or a.rider_of is b or b.rider_of is a:
                continue
            if a.layer == "sky" and b.layer != "sky":
                pred = "above"
            elif b.layer == "sky" and a.layer != "sky":
                pred = "below"
            else:
                gap = max(b.x0 - (a.x0 + a.w), a.x0 - (b.x0 + b.w))
                ca, cb = a.x0 + a.w / 2, b.x0 + b.w / 2
                if gap < 0.12 and a.layer == b.layer == "ground":
                    pred = "next to"
                else:
                    pred = "left of" if ca < cb else "right of"
            rel.append({"subject": i, "predicate": pred, "object": j})
    return rel


def scene_graph(
    rng: np.random.Generator, image_id: int, image_size: int, edit: Edit | None = None
) -> dict[str, Any]:
    """A scene graph: background, objects (pixel boxes, drawing order) and relations; no captions yet.
    ``edit``: the same scene with one object's colour, size or action changed (``edit_scene``; raises
    ``EditError`` where the change does not fit the scene)."""
    scene = sample_scene(rng)
    if edit is not None:
        edit_scene(scene, edit)
    objs: list[_Obj] = scene["objects"]
    out = []
    for i, o in enumerate(objs):
        x0, y0, x1, y1 = o.box
        box = [
            int(np.clip(round(x0 * image_size), 0, image_size - 1)),
            int(np.clip(round(y0 * image_size), 0, image_size - 1)),
            int(np.clip(round(x1 * image_size), 1, image_size)),
            int(np.clip(round(y1 * image_size), 1, image_size)),
        ]
        out.append(
            {
                "id": i,
                "noun": o.noun,
                "colour": o.colour,
                "size": o.size,
                "action": None if o.action == "none" else o.action,
                "bbox": box,
                "prop": o.prop,
                "facing": o.facing,
                "layer": "rider" if o.rider_of is not None else o.layer,
            }
        )
    return {
        "image_id": image_id,
        "background": scene["background"],
        "horizon": round(scene["horizon"] * image_size),
        "main": scene["main"],
        "objects": out,
        "relations": _relations(objs),
        "captions": [],
    }


# ---------------------------------------------------------------------------------------------- edits

EDIT_FIELDS = ("colour", "size", "action")
EDIT_ACTIONS_EXCLUDED = frozenset({"ride", "fly", "none"})  # they change the layout (a horse, the sky)


class EditError(ValueError):
    """An edit that does not fit its scene (the message says why)."""


@dataclass(frozen=True)
class Edit:
    """Change object ``index`` (drawing order) so that its ``field`` (colour, size or action) is
    ``value``. What follows from the change follows: a new size rescales the object's box, a new action
    gives it that pose's box and, for eating or holding, a prop drawn from ``prop_seed``; the box keeps
    its bottom centre (its centre in the sky), so the drawing order, the other objects and the
    background stay as they are."""

    index: int
    field: str
    value: str
    prop_seed: tuple[int, ...] = (0,)

    def __post_init__(self) -> None:
        if self.field not in EDIT_FIELDS:
            raise ValueError(f"field must be one of {EDIT_FIELDS}, got {self.field!r}")
        at_least(0, index=self.index)


def edit_scene(scene: dict[str, Any], edit: Edit) -> None:
    """Apply ``edit`` to a sampled scene (``sample_scene``) in place; ``EditError`` where the edited
    object would leave the image, overlap another object more than the sampler allows, or ride/fly."""
    objs: list[_Obj] = scene["objects"]
    if edit.index >= len(objs):
        raise EditError(f"the scene has {len(objs)} objects, no object {edit.index}")
    obj = objs[edit.index]
    if edit.field == "colour":
        if edit.value not in COLOURS:
            raise ValueError(f"value must be a colour of {COLOURS}, got {edit.value!r}")
        obj.colour = edit.value
        return
    if obj.rider_of is not None or any(o.rider_of is obj for o in objs):
        raise EditError("a rider or a ridden horse keeps its size and pose")
    if edit.field == "size":
        if edit.value not in SIZES:
            raise ValueError(f"value must be a size of {SIZES}, got {edit.value!r}")
        old, new = (float(CONCEPTS.sizes[s]["scale"]) for s in (obj.size, edit.value))
        obj.size = edit.value
        obj.unit *= new / old
    else:
        if edit.value not in ACTIONS[obj.noun] or edit.value in EDIT_ACTIONS_EXCLUDED:
            raise EditError(f"a {obj.noun} cannot be edited to {edit.value!r}")
        if obj.action in EDIT_ACTIONS_EXCLUDED:
            raise EditError(f"a {obj.noun} that does {obj.action!r} keeps its action")
        obj.action = edit.value
        prng = np.random.default_rng(list(edit.prop_seed))
        props = CONCEPTS.props
        obj.prop = None
        if edit.value == "hold":
            obj.prop = props["hold"][int(prng.integers(len(props["hold"])))]
        elif edit.value == "eat":
            if obj.noun in PERSONS:
                obj.prop = props["eat_person"][int(prng.integers(len(props["eat_person"])))]
            else:
                obj.prop = "grass" if scene["background"] == "grass" and obj.noun != "bird" else "food"
    fw, fh = POSE_BOX[obj.noun][obj.action if obj.action in POSE_BOX[obj.noun] else "none"]
    cx, bottom, cy = obj.x0 + obj.w / 2, obj.y0 + obj.h, obj.y0 + obj.h / 2
    obj.w, obj.h = min(obj.unit * fw, 0.96), min(obj.unit * fh, 0.96)
    obj.x0 = cx - obj.w / 2
    obj.y0 = cy - obj.h / 2 if obj.layer == "sky" else bottom - obj.h
    if obj.x0 < 0.0 or obj.x0 + obj.w > 1.0 or obj.y0 < 0.0:
        raise EditError("the edited object would leave the image")
    for other in objs:
        if other is not obj and _overlap(obj.box, other.box) > MAX_OVERLAP:
            raise EditError("the edited object would cover another one")
