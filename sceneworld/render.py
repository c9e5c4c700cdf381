"""SceneWorld rendering: a noisy numpy background and one PIL silhouette per object.

Every object is drawn inside its scene-graph ``bbox`` in local coordinates (u across, v down, both 0..1,
u = 1 at the side the object faces). The object's colour fills its main body; details (wheels, windows,
eyes, trousers) stay dark or neutral so the colour remains readable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from service.text.concepts import load_concepts

CONCEPTS = load_concepts()
RGB = tuple[int, int, int]

DARK: RGB = (30, 30, 34)
WINDOW: RGB = (196, 206, 212)
WHEEL: RGB = (28, 28, 30)
HUB: RGB = (150, 150, 150)
TROUSERS: RGB = (58, 60, 78)
HAIR: tuple[RGB, ...] = ((40, 30, 25), (70, 50, 30), (25, 22, 20))
SKIN: tuple[RGB, ...] = ((232, 196, 164), (196, 150, 110), (140, 96, 64))
PROP_COLOURS: tuple[RGB, ...] = ((245, 140, 20), (235, 100, 180), (150, 60, 185), (40, 200, 210))
SKY_TOP: RGB = (105, 155, 220)
SKY_LOW: RGB = (190, 214, 236)
WALL: RGB = (206, 194, 170)


def _jitter(rng: np.random.Generator, rgb: Sequence[float], sd: float) -> RGB:
    c = np.clip(np.asarray(rgb, dtype=np.float64) + rng.normal(0.0, sd, 3), 0, 255)
    return (int(c[0]), int(c[1]), int(c[2]))


def _shade(rgb: RGB, f: float) -> RGB:
    return (min(255, int(rgb[0] * f)), min(255, int(rgb[1] * f)), min(255, int(rgb[2] * f)))


def _mix(a: RGB, b: RGB, t: float) -> RGB:
    return (
        int(a[0] * (1 - t) + b[0] * t),
        int(a[1] * (1 - t) + b[1] * t),
        int(a[2] * (1 - t) + b[2] * t),
    )


# ---------------------------------------------------------------------------------------------- background


def background(rng: np.random.Generator, kind: str, size: int, horizon: int) -> np.ndarray:
    """Float32 [size, size, 3]: sky (a wall indoors) above ``horizon``, textured ground below."""
    ys = np.arange(size, dtype=np.float32)[:, None]
    img = np.empty((size, size, 3), dtype=np.float32)
    h = max(1, horizon)
    t = np.clip(ys[:h] / h, 0, 1)[:, :, None]
    if kind == "floor":
        wall = np.asarray(_jitter(rng, WALL, 18), dtype=np.float32)
        img[:h] = wall * (0.92 + 0.1 * t)
    else:
        top = np.asarray(_jitter(rng, SKY_TOP, 14), dtype=np.float32)
        low = np.asarray(_jitter(rng, SKY_LOW, 10), dtype=np.float32)
        img[:h] = top * (1 - t) + low * t
    base = np.asarray(_jitter(rng, CONCEPTS.backgrounds[kind]["rgb"], 12), dtype=np.float32)
    g = (ys[h:] - h) / max(1, size - h)
    lo, hi = rng.uniform(0.8, 0.95), rng.uniform(1.02, 1.18)
    if rng.random() < 0.3:
        lo, hi = hi, lo
    img[h:] = base * (lo + (hi - lo) * g)[:, :, None]
    sd = {"grass": 14.0, "street": 5.0, "sand": 8.0, "water": 6.0, "floor": 5.0}[kind]
    noise = rng.normal(0.0, sd, (size - h, size, 1)).astype(np.float32)
    img[h:] += noise
    if kind == "water":  # horizontal light streaks
        rows = rng.random(size - h) < 0.18
        img[h:][rows] += 28.0
    elif kind == "floor":  # planks
        step = max(3, size // int(rng.integers(8, 14)))
        img[h:, ::step] *= 0.8
    elif kind == "sand":
        img[h:] += 6.0 * np.sin(ys[h:, :, None] * rng.uniform(0.6, 1.2) + rng.uniform(0, 6)).astype(
            np.float32
        )
    return img


def _ground_details(
    rng: np.random.Generator, draw: ImageDraw.ImageDraw, kind: str, size: int, horizon: int
) -> None:
    base = CONCEPTS.backgrounds[kind]["rgb"]
    for _ in range(int(rng.integers(2, 7))):  # texture blobs
        cx, cy = rng.uniform(0, size), rng.uniform(horizon, size)
        rx, ry = rng.uniform(2, size / 7), rng.uniform(1, size / 18)
        draw.ellipse(
            [cx - rx, cy - ry, cx + rx, cy + ry],
            fill=_jitter(rng, _shade(tuple(base), rng.uniform(0.8, 1.15)), 8),
        )
    if kind == "street" and rng.random() < 0.75:  # dashed lane marking
        y = rng.uniform(horizon + 0.3 * (size - horizon), size - 3)
        dash = size / 10
        x = rng.uniform(-dash, 0)
        while x < size:
            draw.rectangle([x, y, x + dash, y + max(1, size / 64)], fill=(222, 222, 200))
            x += 2 * dash
    if kind != "floor":  # clouds
        for _ in range(int(rng.integers(0, 3))):
            cx, cy = rng.uniform(0, size), rng.uniform(2, max(3, horizon * 0.6))
            rx, ry = rng.uniform(size / 14, size / 6), rng.uniform(size / 40, size / 22)
            draw.ellipse([cx - rx, cy - ry, cx + rx, cy + ry], fill=_jitter(rng, (236, 240, 246), 6))
    else:  # a picture frame or window on the wall
        if rng.random() < 0.6 and horizon > size / 5:
            w, hh = rng.uniform(size / 8, size / 4), rng.uniform(size / 10, horizon * 0.6)
            x0, y0 = rng.uniform(0, size - w), rng.uniform(1, max(2, horizon - hh - 2))
            draw.rectangle(
                [x0, y0, x0 + w, y0 + hh], fill=_jitter(rng, (170, 200, 225), 20), outline=(90, 70, 50)
            )


# ---------------------------------------------------------------------------------------------- pen


class Pen:
    """Draws in an object's local box coordinates, mirrored when the object faces left."""

    def __init__(self, draw: ImageDraw.ImageDraw, box: Sequence[float], facing: str) -> None:
        self.draw = draw
        self.x0, self.y0 = float(box[0]), float(box[1])
        self.w = max(1.0, float(box[2]) - float(box[0]))
        self.h = max(1.0, float(box[3]) - float(box[1]))
        self.flip = facing == "left"

    def pt(self, u: float, v: float) -> tuple[float, float]:
        return (self.x0 + ((1.0 - u) if self.flip else u) * self.w, self.y0 + v * self.h)

    def poly(self, pts: Sequence[tuple[float, float]], fill: RGB) -> None:
        self.draw.polygon([self.pt(u, v) for u, v in pts], fill=fill)

    def rect(self, u0: float, v0: float, u1: float, v1: float, fill: RGB) -> None:
        self.poly([(u0, v0), (u1, v0), (u1, v1), (u0, v1)], fill)

    def ellipse(self, cu: float, cv: float, ru: float, rv: float, fill: RGB) -> None:
        xa, ya = self.pt(cu - ru, cv - rv)
        xb, yb = self.pt(cu + ru, cv + rv)
        self.draw.ellipse([min(xa, xb), ya, max(xa, xb), yb], fill=fill)

    def circle(self, cu: float, cv: float, r: float, fill: RGB) -> None:
        """A round circle of radius ``r`` x box height, whatever the box aspect."""
        x, y = self.pt(cu, cv)
        rp = max(0.6, r * self.h)
        self.draw.ellipse([x - rp, y - rp, x + rp, y + rp], fill=fill)

    def line(self, pts: Sequence[tuple[float, float]], width: float, fill: RGB) -> None:
        """Polyline with ``width`` x box height pixels, round joints."""
        wp = max(1, round(width * self.h))
        xy = [self.pt(u, v) for u, v in pts]
        self.draw.line(xy, fill=fill, width=wp, joint="curve")
        if wp >= 3:
            for x, y in (xy[0], xy[-1]):
                r = wp / 2 - 0.5
                self.draw.ellipse([x - r, y - r, x + r, y + r], fill=fill)


class Limbs:
    """Draws in person units: (x, y) with the person's standing height = 1, mapped into the box."""

    def __init__(self, pen: Pen, fw: float, fh: float) -> None:
        self.pen = pen
        self.fw, self.fh = fw, fh

    def p(self, x: float, y: float) -> tuple[float, float]:
        return (x / self.fw, y / self.fh)

    def line(self, pts: Sequence[tuple[float, float]], width: float, fill: RGB) -> None:
        self.pen.line([self.p(x, y) for x, y in pts], width / self.fh, fill)

    def poly(self, pts: Sequence[tuple[float, float]], fill: RGB) -> None:
        self.pen.poly([self.p(x, y) for x, y in pts], fill)

    def circle(self, x: float, y: float, r: float, fill: RGB) -> None:
        u, v = self.p(x, y)
        self.pen.circle(u, v, r / self.fh, fill)

    def ellipse(self, x: float, y: float, rx: float, ry: float, fill: RGB) -> None:
        u, v = self.p(x, y)
        self.pen.ellipse(u, v, rx / self.fw, ry / self.fh, fill)


# ---------------------------------------------------------------------------------------------- people

# Skeletons in person units (standing height 1), x towards the facing side. Joints: head centre, neck,
# hip, near/far knee, near/far foot, near/far elbow, near/far hand.
_SKELETONS: dict[str, dict[str, Any]] = {
    "stand": {
        "head": (0.21, 0.1),
        "neck": (0.21, 0.2),
        "hip": (0.21, 0.55),
        "knee": ((0.24, 0.77), (0.18, 0.77)),
        "foot": ((0.27, 0.985), (0.15, 0.985)),
        "elbow": ((0.31, 0.38), (0.11, 0.38)),
        "hand": ((0.33, 0.55), (0.09, 0.55)),
    },
    "hold": {
        "head": (0.21, 0.1),
        "neck": (0.21, 0.2),
        "hip": (0.21, 0.55),
        "knee": ((0.24, 0.77), (0.18, 0.77)),
        "foot": ((0.27, 0.985), (0.15, 0.985)),
        "elbow": ((0.33, 0.36), (0.11, 0.38)),
        "hand": ((0.45, 0.31), (0.09, 0.55)),
    },
    "eat": {
        "head": (0.25, 0.1),
        "neck": (0.25, 0.2),
        "hip": (0.25, 0.55),
        "knee": ((0.28, 0.77), (0.22, 0.77)),
        "foot": ((0.31, 0.985), (0.19, 0.985)),
        "elbow": ((0.4, 0.36), (0.15, 0.38)),
        "hand": ((0.36, 0.17), (0.13, 0.55)),
    },
    "sit": {
        "head": (0.17, 0.1),
        "neck": (0.17, 0.2),
        "hip": (0.17, 0.585),
        "knee": ((0.43, 0.54), (0.4, 0.56)),
        "foot": ((0.5, 0.665), (0.46, 0.665)),
        "elbow": ((0.26, 0.4), (0.12, 0.4)),
        "hand": ((0.4, 0.5), (0.3, 0.5)),
    },
    "ride": {
        "head": (0.22, 0.1),
        "neck": (0.22, 0.2),
        "hip": (0.22, 0.52),
        "knee": ((0.33, 0.6), (0.3, 0.6)),
        "foot": ((0.29, 0.77), (0.27, 0.77)),
        "elbow": ((0.33, 0.36), (0.3, 0.36)),
        "hand": ((0.42, 0.42), (0.4, 0.42)),
    },
    "lie": {
        "head": (0.9, 0.18),
        "neck": (0.8, 0.19),
        "hip": (0.45, 0.2),
        "knee": ((0.25, 0.2), (0.25, 0.18)),
        "foot": ((0.03, 0.22), (0.03, 0.2)),
        "elbow": ((0.68, 0.24), (0.68, 0.15)),
        "hand": ((0.55, 0.245), (0.55, 0.14)),
    },
}


def _draw_prop(lim: Limbs, prop: str | None, hand: tuple[float, float], colour: RGB) -> None:
    hx, hy = hand
    if prop == "umbrella":
        lim.line([(hx, hy), (hx, 0.06)], 0.025, DARK)
        lim.poly([(hx - 0.3, 0.1), (hx - 0.22, 0.03), (hx, 0.0), (hx + 0.22, 0.03), (hx + 0.3, 0.1)], colour)
    elif prop == "ball":
        lim.circle(hx + 0.05, hy - 0.04, 0.07, colour)
    elif prop == "frisbee":
        lim.ellipse(hx + 0.08, hy - 0.02, 0.12, 0.03, colour)
    elif prop == "kite":
        kx, ky = min(hx + 0.14, 0.62), 0.1
        lim.line([(hx, hy), (kx, ky + 0.08)], 0.012, DARK)
        lim.poly([(kx, ky - 0.09), (kx + 0.08, ky), (kx, ky + 0.09), (kx - 0.08, ky)], colour)
    elif prop == "pizza":
        lim.poly([(hx - 0.02, hy - 0.06), (hx + 0.1, hy - 0.03), (hx - 0.01, hy + 0.05)], (238, 170, 60))
        lim.circle(hx + 0.02, hy - 0.02, 0.015, (190, 40, 30))
    elif prop == "banana":
        lim.line(
            [(hx - 0.02, hy - 0.07), (hx + 0.04, hy - 0.05), (hx + 0.06, hy + 0.01)], 0.035, (240, 215, 60)
        )
    elif prop == "sandwich":
        lim.poly(
            [(hx - 0.03, hy - 0.05), (hx + 0.08, hy - 0.05), (hx + 0.08, hy + 0.02), (hx - 0.03, hy + 0.02)],
            (215, 170, 110),
        )
        lim.line([(hx - 0.03, hy - 0.015), (hx + 0.08, hy - 0.015)], 0.015, (60, 150, 50))


def draw_person(rng: np.random.Generator, pen: Pen, obj: dict[str, Any], colour: RGB) -> None:
    pose = obj["action"] if obj["action"] in _SKELETONS else "stand"
    from sceneworld.scene import POSE_BOX

    fw, fh = POSE_BOX[obj["noun"]][pose]
    lim = Limbs(pen, fw, fh)
    sk = _SKELETONS[pose]
    noun = obj["noun"]
    skin = SKIN[int(rng.integers(len(SKIN)))]
    hair = HAIR[int(rng.integers(len(HAIR)))]
    head_r = {"man": 0.085, "woman": 0.082, "child": 0.115}[noun]
    limb = {"man": 0.085, "woman": 0.07, "child": 0.09}[noun]
    legs = TROUSERS if noun != "woman" else skin
    far_sleeve = _shade(colour, 0.8)
    hx, hy = sk["head"]
    nx, ny = sk["neck"]
    px, py = sk["hip"]
    # far limbs
    lim.line([(px, py), sk["knee"][1], sk["foot"][1]], limb, _shade(legs, 0.8))
    lim.line([(nx, ny + 0.03), sk["elbow"][1], sk["hand"][1]], limb * 0.8, far_sleeve)
    # torso
    sh = {"man": 0.12, "woman": 0.09, "child": 0.1}[noun]
    if pose == "lie":
        lim.poly([(nx, ny - 0.07), (nx, ny + 0.07), (px, py + 0.06), (px, py - 0.06)], colour)
    else:
        waist = 0.08 if noun != "woman" else 0.07
        lim.poly([(nx - sh, ny + 0.01), (nx + sh, ny + 0.01), (px + waist, py), (px - waist, py)], colour)
        if noun == "woman" and pose in ("stand", "hold", "eat"):  # dress
            lim.poly(
                [
                    (px - 0.07, py - 0.12),
                    (px + 0.07, py - 0.12),
                    (px + 0.15, py + 0.2),
                    (px - 0.15, py + 0.2),
                ],
                colour,
            )
    # near limbs
    lim.line([(px, py), sk["knee"][0], sk["foot"][0]], limb, legs)
    if noun == "woman" and pose in ("sit", "ride", "lie"):  # skirt over the thighs
        lim.line([(px, py), sk["knee"][0]], limb * 1.5, colour)
    lim.line([(nx, ny + 0.03), sk["elbow"][0], sk["hand"][0]], limb * 0.8, colour)
    hand_x, hand_y = sk["hand"][0]
    lim.circle(hand_x, hand_y, limb * 0.5, skin)
    # shoes
    for f in sk["foot"]:
        lim.circle(f[0], f[1] - 0.015, limb * 0.45, DARK)
    # head
    lim.line([(nx, ny), (hx, hy)], limb * 0.8, skin)
    if noun == "woman":  # long hair behind the head
        dx = 0.05 if pose != "lie" else 0.0
        lim.ellipse(
            hx - dx,
            hy + 0.05 if pose != "lie" else hy,
            head_r * 1.15,
            head_r * 1.5 if pose != "lie" else head_r * 1.1,
            hair,
        )
    lim.circle(hx, hy, head_r, skin)
    if noun != "woman":  # short hair / cap
        if pose == "lie":
            lim.ellipse(hx + head_r * 0.5, hy, head_r * 0.55, head_r, hair)
        else:
            lim.ellipse(hx - 0.01, hy - head_r * 0.55, head_r * 1.02, head_r * 0.5, hair)
    eye = (hx + head_r * 0.5, hy - head_r * 0.1) if pose != "lie" else (hx, hy - head_r * 0.5)
    lim.circle(eye[0], eye[1], max(0.012, head_r * 0.14), DARK)
    if obj["prop"] is not None:
        prop_colour = PROP_COLOURS[int(rng.integers(len(PROP_COLOURS)))]
        _draw_prop(lim, obj["prop"], sk["hand"][0], prop_colour)


# ---------------------------------------------------------------------------------------------- animals

_QUAD: dict[str, dict[str, Any]] = {
    # body centre/radii, leg top/width, head centre/radius, neck width, tail
    "dog": {"body": (0.46, 0.42, 0.34, 0.17), "leg": 0.085, "head": (0.84, 0.22, 0.13), "snout": 0.07},
    "cat": {"body": (0.46, 0.5, 0.32, 0.14), "leg": 0.065, "head": (0.85, 0.33, 0.14), "snout": 0.0},
    "horse": {"body": (0.42, 0.42, 0.31, 0.15), "leg": 0.055, "head": (0.9, 0.1, 0.09), "snout": 0.0},
}


def _grass_tuft(pen: Pen, u: float, v: float) -> None:
    for du in (-0.05, -0.02, 0.01, 0.04):
        pen.line([(u + du, v), (u + du * 1.6, v - 0.14)], 0.03, (60, 150, 45))


def _bowl(pen: Pen, u: float, v: float) -> None:
    pen.poly([(u - 0.08, v - 0.08), (u + 0.08, v - 0.08), (u + 0.06, v), (u - 0.06, v)], (150, 155, 165))
    pen.ellipse(u, v - 0.085, 0.07, 0.025, (150, 95, 50))


def draw_quadruped(rng: np.random.Generator, pen: Pen, obj: dict[str, Any], colour: RGB) -> None:
    noun, pose = obj["noun"], obj["action"] or "stand"
    spec = _QUAD[noun]
    dark = _shade(colour, 0.62) if sum(colour) > 120 else _mix(colour, (90, 90, 90), 0.35)
    far = _shade(colour, 0.82) if sum(colour) > 120 else _mix(colour, (60, 60, 60), 0.3)
    eye = DARK if sum(colour) > 150 else (200, 200, 120)
    lw = spec["leg"]
    if pose == "sit" and noun != "horse":
        # haunches on the ground, front legs straight, chest and head up
        pen.line([(0.2, 0.92), (0.02, 0.96), (0.0, 0.86)], 0.07, colour)  # tail on the ground
        pen.ellipse(0.36, 0.74, 0.3, 0.24, colour)
        pen.poly([(0.3, 0.6), (0.55, 0.3), (0.78, 0.35), (0.7, 0.75)], colour)
        pen.rect(0.6, 0.55, 0.6 + lw * 1.4, 1.0, far)
        pen.rect(0.68, 0.55, 0.68 + lw * 1.4, 1.0, colour)
        hu, hv, hr = 0.72, 0.22, 0.2
    elif pose == "lie":
        bu, bv = 0.45, 0.66
        if noun == "horse":
            pen.poly([(0.12, 0.55), (0.0, 0.9), (0.1, 0.92), (0.2, 0.6)], dark)
        else:
            pen.line([(0.15, 0.85), (0.02, 0.95)], 0.1, colour)
        pen.ellipse(bu, bv, 0.36, 0.28, colour)
        pen.rect(0.55, 0.86, 0.95, 0.98, far)  # front legs stretched forward
        if noun == "horse":
            pen.poly([(0.62, 0.55), (0.72, 0.1), (0.84, 0.12), (0.8, 0.6)], colour)
            pen.line([(0.68, 0.15), (0.62, 0.5)], 0.06, dark)  # mane
            hu, hv, hr = 0.86, 0.14, 0.13
        else:
            hu, hv, hr = 0.8, 0.34, 0.26
    else:
        cu, cv, ru, rv = spec["body"]
        top = cv + rv * 0.3
        # tail
        if noun == "dog":
            pen.line([(cu - ru + 0.04, cv - 0.05), (0.05, cv - 0.28)], 0.07, colour)
        elif noun == "cat":
            pen.line(
                [(cu - ru + 0.04, cv), (0.04, cv - 0.12), (0.03, cv - 0.35), (0.08, cv - 0.48)], 0.06, colour
            )
        else:
            pen.poly(
                [(cu - ru + 0.03, cv - 0.1), (0.03, cv + 0.3), (0.1, cv + 0.32), (cu - ru + 0.1, cv)], dark
            )
        # legs: far pair darker, then body, then near pair
        xs = (cu - ru + 0.06, cu - ru + 0.16, cu + ru - 0.2, cu + ru - 0.1)
        for x in (xs[1], xs[3]):
            pen.rect(x, top, x + lw, 1.0, far)
        pen.ellipse(cu, cv, ru, rv, colour)
        for x in (xs[0], xs[2]):
            pen.rect(x, top, x + lw, 1.0, colour)
            if noun == "horse":
                pen.rect(x - 0.005, 0.94, x + lw + 0.005, 1.0, DARK)
        hu, hv, hr = spec["head"]
        if pose == "eat":
            hv = 0.78 if noun != "horse" else 0.8
            hu = cu + ru + 0.05
        if noun == "horse":
            # long neck rising (or lowered to graze) to the head
            if pose == "eat":
                pen.poly(
                    [
                        (cu + ru - 0.15, cv - rv),
                        (cu + ru + 0.02, cv - rv * 0.5),
                        (hu + 0.02, hv - 0.06),
                        (hu - 0.08, hv),
                        (cu + ru - 0.08, cv + rv),
                    ],
                    colour,
                )
            else:
                pen.poly(
                    [
                        (cu + ru - 0.14, cv - rv * 0.6),
                        (0.76, 0.06),
                        (0.86, 0.04),
                        (cu + ru + 0.04, cv + 0.02),
                        (cu + ru - 0.08, cv + rv * 0.6),
                    ],
                    colour,
                )
                pen.line([(0.74, 0.07), (cu + ru - 0.13, cv - rv * 0.6)], 0.05, dark)  # mane
        else:
            pen.poly(
                [
                    (cu + ru - 0.2, cv - rv * 0.8),
                    (hu - 0.04, hv - hr * 0.5),
                    (hu, hv + hr * 0.6),
                    (cu + ru - 0.05, cv + rv * 0.4),
                ],
                colour,
            )
    # head
    if noun == "horse":
        down = pose == "eat"
        if down:
            pen.poly(
                [
                    (hu - 0.08, hv - 0.08),
                    (hu + 0.02, hv - 0.1),
                    (hu + 0.1, hv + 0.12),
                    (hu + 0.03, hv + 0.14),
                ],
                colour,
            )
        else:
            pen.poly(
                [
                    (hu - 0.12, hv - 0.04),
                    (hu - 0.02, hv - 0.09),
                    (hu + 0.1, hv + 0.1),
                    (hu + 0.06, hv + 0.15),
                    (hu - 0.08, hv + 0.07),
                ],
                colour,
            )
            pen.poly([(hu - 0.1, hv - 0.05), (hu - 0.08, hv - 0.14), (hu - 0.05, hv - 0.06)], dark)  # ear
        pen.circle(hu, hv + (0.02 if down else 0.0), 0.018, eye)
    else:
        if noun == "cat":
            ear = 1.25 if pose == "sit" else 1.6
            pen.poly(
                [
                    (hu - hr * 0.8, hv - hr * 0.3),
                    (hu - hr * 0.55, hv - hr * ear),
                    (hu - hr * 0.05, hv - hr * 0.6),
                ],
                colour,
            )
            pen.poly(
                [
                    (hu + hr * 0.05, hv - hr * 0.6),
                    (hu + hr * 0.55, hv - hr * ear),
                    (hu + hr * 0.85, hv - hr * 0.3),
                ],
                colour,
            )
        pen.circle(hu, hv, hr * (0.8 if noun == "dog" else 0.7), colour)
        if noun == "dog":
            pen.ellipse(hu + hr * 0.7, hv + hr * 0.25, hr * 0.55, hr * 0.4, colour)  # snout
            pen.circle(hu + hr * 1.2, hv + hr * 0.1, 0.035, DARK)  # nose
            pen.ellipse(hu - hr * 0.35, hv + hr * 0.2, hr * 0.25, hr * 0.7, dark)  # floppy ear
        pen.circle(hu + hr * 0.3, hv - hr * 0.15, 0.03, eye)
    if pose == "eat":
        if obj["prop"] == "grass":
            _grass_tuft(pen, min(0.97, hu + 0.06), 1.0)
        else:
            _bowl(pen, min(0.92, hu + 0.05), 1.0)


def draw_bird(rng: np.random.Generator, pen: Pen, obj: dict[str, Any], colour: RGB) -> None:
    pose = obj["action"] or "stand"
    beak = (235, 150, 35)
    wing = _shade(colour, 0.72) if sum(colour) > 120 else _mix(colour, (100, 100, 100), 0.35)
    eye = DARK if sum(colour) > 150 else (230, 230, 230)
    if pose == "fly":
        flap = rng.random() < 0.5
        tip = 0.0 if flap else 1.0
        pen.poly([(0.38, 0.55), (0.3 if flap else 0.35, tip), (0.6, 0.5)], wing)  # far wing
        pen.poly([(0.28, 0.55), (0.02, 0.42), (0.04, 0.7)], colour)  # tail
        pen.ellipse(0.5, 0.56, 0.26, 0.13, colour)
        pen.circle(0.8, 0.5, 0.14, colour)
        pen.poly([(0.88, 0.44), (1.0, 0.52), (0.88, 0.56)], beak)
        pen.circle(0.83, 0.46, 0.04, eye)
        pen.poly([(0.42, 0.55), (0.5 if flap else 0.45, tip), (0.66, 0.55)], colour)  # near wing
        return
    if pose == "eat":
        body, head, legs_top = (0.4, 0.45, 0.3, 0.22), (0.78, 0.72, 0.14), 0.62
    elif pose == "sit":
        body, head, legs_top = (0.45, 0.66, 0.34, 0.32), (0.76, 0.3, 0.2), None
    else:
        body, head, legs_top = (0.43, 0.5, 0.3, 0.22), (0.74, 0.24, 0.16), 0.68
    bu, bv, ru, rv = body
    hu, hv, hr = head
    pen.poly([(bu - ru + 0.05, bv - 0.05), (0.0, bv - 0.18), (0.0, bv + 0.05)], wing)  # tail
    if legs_top is not None:
        for du in (-0.05, 0.05):
            pen.line([(bu + du, legs_top), (bu + du - 0.02, 0.99)], 0.035, (200, 130, 40))
    pen.ellipse(bu, bv, ru, rv, colour)
    pen.line([(bu + ru * 0.5, bv - rv * 0.5), (hu, hv)], hr * 1.2, colour)
    pen.circle(hu, hv, hr * 0.72, colour)
    pen.ellipse(bu - 0.03, bv, ru * 0.65, rv * 0.55, wing)
    if pose == "eat":
        pen.poly([(hu + 0.05, hv), (hu + 0.12, hv + 0.2), (hu + 0.1, hv - 0.02)], beak)
        for k in range(3):
            pen.circle(min(0.97, hu + 0.08 + 0.05 * k), 0.97, 0.03, (120, 80, 40))
    else:
        pen.poly([(hu + 0.08, hv - 0.06), (hu + 0.26, hv + 0.02), (hu + 0.08, hv + 0.06)], beak)
    pen.circle(hu + 0.03, hv - 0.04, 0.035, eye)


# ---------------------------------------------------------------------------------------------- things


def _wheels(pen: Pen, us: Sequence[float], v: float, r: float) -> None:
    for u in us:
        pen.circle(u, v, r, WHEEL)
        pen.circle(u, v, r * 0.4, HUB)


def draw_bus(rng: np.random.Generator, pen: Pen, obj: dict[str, Any], colour: RGB) -> None:
    x0, y0 = pen.pt(0.0, 0.04)
    x1, y1 = pen.pt(1.0, 0.84)
    pen.draw.rounded_rectangle([min(x0, x1), y0, max(x0, x1), y1], radius=max(1, pen.h * 0.1), fill=colour)
    n = 6
    for k in range(n):
        u = 0.05 + k * 0.78 / n
        pen.rect(u, 0.14, u + 0.78 / n - 0.03, 0.42, WINDOW)
    pen.rect(0.9, 0.14, 0.985, 0.5, WINDOW)  # windscreen
    pen.rect(0.84, 0.2, 0.885, 0.8, _shade(colour, 0.7))  # door
    pen.rect(0.0, 0.5, 1.0, 0.54, _shade(colour, 0.8))
    _wheels(pen, (0.18, 0.75), 0.84, 0.16)


def draw_truck(rng: np.random.Generator, pen: Pen, obj: dict[str, Any], colour: RGB) -> None:
    pen.rect(0.0, 0.72, 1.0, 0.84, DARK)  # chassis
    pen.rect(0.0, 0.0, 0.66, 0.76, colour)  # cargo box
    pen.rect(0.02, 0.04, 0.64, 0.08, _shade(colour, 0.85))
    pen.poly([(0.69, 0.24), (0.9, 0.24), (1.0, 0.5), (1.0, 0.8), (0.69, 0.8)], colour)  # cab
    pen.poly([(0.74, 0.3), (0.88, 0.3), (0.95, 0.5), (0.74, 0.5)], WINDOW)
    _wheels(pen, (0.14, 0.42, 0.84), 0.84, 0.15)


def draw_car(rng: np.random.Generator, pen: Pen, obj: dict[str, Any], colour: RGB) -> None:
    pen.poly([(0.22, 0.42), (0.34, 0.04), (0.68, 0.04), (0.82, 0.42)], colour)  # roof
    pen.poly([(0.3, 0.4), (0.38, 0.12), (0.49, 0.12), (0.49, 0.4)], WINDOW)
    pen.poly([(0.53, 0.4), (0.53, 0.12), (0.65, 0.12), (0.74, 0.4)], WINDOW)
    x0, y0 = pen.pt(0.0, 0.38)
    x1, y1 = pen.pt(1.0, 0.8)
    pen.draw.rounded_rectangle([min(x0, x1), y0, max(x0, x1), y1], radius=max(1, pen.h * 0.12), fill=colour)
    pen.rect(0.95, 0.46, 1.0, 0.56, (240, 230, 170))  # headlight
    _wheels(pen, (0.2, 0.79), 0.8, 0.2)


def draw_plane(rng: np.random.Generator, pen: Pen, obj: dict[str, Any], colour: RGB) -> None:
    wing = _shade(colour, 0.78) if sum(colour) > 120 else _mix(colour, (110, 110, 110), 0.3)
    if obj["action"] != "fly":
        for u in (0.3, 0.8):
            pen.line([(u, 0.7), (u, 0.93)], 0.05, DARK)
            pen.circle(u, 0.93, 0.07, WHEEL)
    pen.poly([(0.04, 0.5), (0.0, 0.0), (0.1, 0.0), (0.24, 0.45)], colour)  # tail fin
    pen.poly([(0.42, 0.5), (0.6, 0.5), (0.36, 0.12), (0.3, 0.12)], wing)  # far wing
    pen.poly([(0.02, 0.45), (0.86, 0.42), (0.97, 0.5), (1.0, 0.6), (0.93, 0.7), (0.08, 0.7)], colour)
    for k in range(9):
        pen.circle(0.22 + 0.07 * k, 0.52, 0.035, DARK)
    pen.poly([(0.9, 0.46), (0.97, 0.5), (0.9, 0.53)], DARK)  # cockpit
    pen.poly([(0.38, 0.62), (0.6, 0.62), (0.4, 1.0), (0.3, 1.0)], wing)  # near wing
    pen.poly([(0.04, 0.55), (0.2, 0.55), (0.1, 0.72), (0.02, 0.72)], wing)  # stabiliser


def draw_boat(rng: np.random.Generator, pen: Pen, obj: dict[str, Any], colour: RGB) -> None:
    light = _mix(colour, (245, 245, 240), 0.3)
    if rng.random() < 0.55:  # sailing boat
        pen.line([(0.47, 0.0), (0.47, 0.62)], 0.03, DARK)
        pen.poly([(0.5, 0.02), (0.5, 0.56), (0.88, 0.56)], light)
        pen.poly([(0.44, 0.08), (0.44, 0.56), (0.16, 0.56)], _shade(light, 0.9))
    else:  # motor boat with a cabin
        pen.rect(0.28, 0.34, 0.68, 0.62, light)
        for u in (0.33, 0.46, 0.57):
            pen.rect(u, 0.41, u + 0.07, 0.5, DARK)
    pen.poly([(0.0, 0.6), (1.0, 0.6), (0.86, 1.0), (0.12, 1.0)], colour)
    pen.rect(0.01, 0.6, 0.99, 0.66, _shade(colour, 0.75))


def draw_table(rng: np.random.Generator, pen: Pen, obj: dict[str, Any], colour: RGB) -> None:
    far = _shade(colour, 0.7)
    for u in (0.2, 0.74):
        pen.rect(u, 0.15, u + 0.06, 0.86, far)
    pen.rect(0.05, 0.15, 0.95, 0.26, _shade(colour, 0.88))
    for u in (0.05, 0.87):
        pen.rect(u, 0.15, u + 0.08, 1.0, colour)
    pen.rect(0.0, 0.0, 1.0, 0.16, colour)


DRAWERS: dict[str, Callable[[np.random.Generator, Pen, dict[str, Any], RGB], None]] = {
    "man": draw_person,
    "woman": draw_person,
    "child": draw_person,
    "dog": draw_quadruped,
    "cat": draw_quadruped,
    "horse": draw_quadruped,
    "bird": draw_bird,
    "bus": draw_bus,
    "truck": draw_truck,
    "car": draw_car,
    "plane": draw_plane,
    "boat": draw_boat,
    "table": draw_table,
}


def render(
    graph: dict[str, Any],
    rng: np.random.Generator,
    image_size: int,
    object_rng: Callable[[int], np.random.Generator] | None = None,
) -> np.ndarray:
    """Render ``graph`` (objects in drawing order) into a uint8 [S, S, 3] image. ``object_rng(id)``:
    each object draws from a generator of its own instead of ``rng`` (which then draws only the
    background and the pixel noise), so that two graphs differing in one object render every other
    object, the background and the noise identically (the counterfactual probe set's minimal pairs)."""
    size = image_size
    horizon = int(graph["horizon"])
    bg = background(rng, graph["background"], size, horizon)
    image = Image.fromarray(np.clip(bg, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    _ground_details(rng, draw, graph["background"], size, horizon)
    for obj in graph["objects"]:
        own = rng if object_rng is None else object_rng(int(obj["id"]))
        colour = _jitter(own, CONCEPTS.colours[obj["colour"]]["rgb"], 7)
        pen = Pen(draw, obj["bbox"], obj["facing"])
        DRAWERS[obj["noun"]](own, pen, obj, colour)
    out = np.asarray(image, dtype=np.int16)
    out = out + rng.integers(-5, 6, size=out.shape, dtype=np.int16)
    return np.clip(out, 0, 255).astype(np.uint8)
