"""``compcap calibrate``: each captioner's ``in_domain`` test (``service.engine.domain``), fitted on
validation images and written to ``<repo>/domain/<name>.npz`` with its manifest entry; then measured
on held-out images: the share of SceneWorld test images kept in domain, of uniform-noise images and of
natural photos (scikit-image's bundled samples, random square crops) flagged.

Validation images: for the built-in captioners (the shared encoder's regions), SceneWorld images of a
world of their own (seed + ``VALIDATION_SEED_OFFSET``: not the training, test, probe or zoo worlds),
like their validation images; for an imported captioner, the images of ``--data DIR`` (its own
validation images: CompCap cannot know them). Half fit each test, the other half set its threshold."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from export.progress import stages
from sceneworld.dataset import TEST_SEED_OFFSET
from service.engine.domain import calibrate
from service.engine.engine import CaptionEngine
from service.manifest import MANIFEST_NAME, DomainSpec, load_manifest

VALIDATION_SEED_OFFSET = 31337
PHOTOS = (
    "astronaut", "camera", "cat", "coffee", "rocket", "hubble_deep_field", "immunohistochemistry", "moon",
    "page", "horse", "coins", "clock", "text", "retina", "brick", "grass", "gravel", "logo", "colorwheel",
)  # fmt: skip


def folder_images(folder: Path, size: int) -> np.ndarray:
    """uint8 [N, size, size, 3]: every image file of ``folder``, centre-cropped square and resized."""
    out = []
    for path in sorted(
        p for p in folder.rglob("*") if p.suffix.lower() in (".png", ".jpg", ".jpeg", ".webp")
    ):
        with Image.open(path) as im:
            rgb = im.convert("RGB")
            s = min(rgb.size)
            left, top = (rgb.width - s) // 2, (rgb.height - s) // 2
            out.append(
                np.asarray(
                    rgb.crop((left, top, left + s, top + s)).resize((size, size), Image.Resampling.BILINEAR)
                )
            )
    if len(out) < 4:
        raise ValueError(f"--data {folder}: {len(out)} images; calibration needs at least 4")
    return np.stack(out)


def photos(size: int, crops: int = 5, seed: int = 1) -> np.ndarray | None:
    """Natural photos: scikit-image's bundled samples, ``crops`` random square crops each (None when
    scikit-image is not installed)."""
    try:
        import skimage.data as data
    except ImportError:
        return None
    rng = np.random.default_rng(seed)
    out = []
    for name in PHOTOS:
        im = np.asarray(getattr(data, name)())
        im = (im.astype(np.uint8) * 255) if im.dtype == bool else im
        im = np.stack([im] * 3, -1) if im.ndim == 2 else im[..., :3].astype(np.uint8)
        h, w = im.shape[:2]
        for _ in range(crops):
            s = int(min(h, w) * rng.uniform(0.5, 1.0))
            y, x = int(rng.integers(0, h - s + 1)), int(rng.integers(0, w - s + 1))
            out.append(
                np.asarray(
                    Image.fromarray(im[y : y + s, x : x + s]).resize((size, size), Image.Resampling.BILINEAR)
                )
            )
    return np.stack(out)


async def _features(engine: CaptionEngine, captioner: str, images: np.ndarray) -> np.ndarray:
    enc = await engine.runner.encode(captioner, images)
    return enc.regions if enc.regions.size else enc.memory


def calibrate_repo(
    repo: Path,
    captioners: list[str] | None = None,
    data: Path | None = None,
    images: int = 1500,
    seed: int = 0,
    quantile: float = 0.025,
) -> dict[str, Any]:
    """Calibrate ``captioners`` (default: every captioner: the built-in ones on SceneWorld, the imported
    ones only with ``data``) and measure; returns the figures per captioner."""
    from sceneworld.dataset import generate

    manifest = load_manifest(repo)
    size = manifest.image.height
    names = captioners or [c.name for c in manifest.captioners if c.image is None or data is not None]
    if data is not None:
        validation, source = folder_images(data, size), str(data)
    else:
        validation = generate(images, seed + VALIDATION_SEED_OFFSET, size)[0]
        source = f"sceneworld(seed={seed + VALIDATION_SEED_OFFSET}, images={images})"
    test = generate(500, seed + TEST_SEED_OFFSET, size)[0]
    noise = np.random.default_rng(seed).integers(0, 256, (200, size, size, 3), dtype=np.uint8)
    natural = photos(size)
    half = len(validation) // 2
    figures: dict[str, Any] = {}

    async def run(stage: Callable[[str], None]) -> None:
        async with await CaptionEngine.from_repo(repo) as engine:
            for name in names:
                stage(f"calibrating {name}")
                feats = await _features(engine, name, validation)
                model = calibrate(validation[:half], feats[:half], validation[half:], feats[half:], quantile)
                model.save(repo / "domain" / f"{name}.npz")
                out: dict[str, Any] = {"validation": source, "quantile": quantile}
                for label, imgs in (("sceneworld_test", test), ("uniform_noise", noise), ("photos", natural)):
                    if imgs is None:
                        continue
                    _, inside = model.judge(imgs, await _features(engine, name, imgs))
                    key = "in_domain" if label == "sceneworld_test" else "flagged"
                    share = float(inside.mean()) if key == "in_domain" else float(1 - inside.mean())
                    out[label] = {"images": len(imgs), key: round(share, 4)}
                figures[name] = out

    with stages(len(names)) as stage:
        asyncio.run(run(stage))
    raw = json.loads((repo / MANIFEST_NAME).read_text(encoding="utf-8"))
    for entry in raw["captioners"]:
        if entry["name"] in names:
            spec = DomainSpec(
                file=f"domain/{entry['name']}.npz", quantile=quantile, fit_images=half,
                held_images=len(validation) - half, source=source,
            )  # fmt: skip
            entry["domain"] = spec.model_dump()
    text = json.dumps(raw, indent=2)
    type(manifest).model_validate_json(text)  # still a valid manifest
    (repo / MANIFEST_NAME).write_text(text, encoding="utf-8")
    return figures


__all__ = ["calibrate_repo", "folder_images", "photos"]
