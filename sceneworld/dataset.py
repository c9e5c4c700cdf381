"""SceneWorld datasets: generate in memory, write/read a COCO-caption-format folder.

Image ``i`` of seed ``s`` depends only on ``(s, i)``: its scene, rendering and captions use the
independent generators ``default_rng([s, i, 0|1|2])``, so datasets of different sizes share prefixes
and the scene and captions do not depend on ``image_size``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from sceneworld.captions import caption_scene, present_pairs
from sceneworld.render import render
from sceneworld.scene import scene_graph
from service.checks import at_least

TEST_SEED_OFFSET = 7919  # a test world is drawn from seed + this (the 1000th prime), never a training seed

GENERATOR = "compcap.sceneworld/2"  # bump when the generated data change
CAPTIONS_PER_IMAGE = 5


def generate_one(index: int, seed: int, image_size: int = 96) -> tuple[np.ndarray, list[str], dict[str, Any]]:
    """Image, captions and scene graph of image ``index`` of ``seed``."""
    graph = scene_graph(np.random.default_rng([seed, index, 0]), index, image_size)
    image = render(graph, np.random.default_rng([seed, index, 1]), image_size)
    graph["captions"] = caption_scene(graph, np.random.default_rng([seed, index, 2]), CAPTIONS_PER_IMAGE)
    return image, [c["text"] for c in graph["captions"]], graph


def generate(
    images: int, seed: int, image_size: int = 96, start: int = 0
) -> tuple[np.ndarray, list[list[str]], list[dict]]:
    """In-memory: images uint8 [N,H,W,3], 5 captions per image, scene graphs (JSON-ready dicts)."""
    at_least(0, images=images, start=start)
    at_least(16, image_size=image_size)
    out = np.empty((images, image_size, image_size, 3), dtype=np.uint8)
    captions: list[list[str]] = []
    graphs: list[dict] = []
    for k in range(images):
        out[k], caps, graph = generate_one(start + k, seed, image_size)
        captions.append(caps)
        graphs.append(graph)
    return out, captions, graphs


def generate_graphs(images: int, seed: int, image_size: int = 96, start: int = 0) -> list[dict]:
    """Scene graphs with captions only (no rendering; identical to ``generate``'s graphs), for fast
    statistics and split building."""
    graphs = []
    for index in range(start, start + images):
        graph = scene_graph(np.random.default_rng([seed, index, 0]), index, image_size)
        graph["captions"] = caption_scene(graph, np.random.default_rng([seed, index, 2]), CAPTIONS_PER_IMAGE)
        graphs.append(graph)
    return graphs


def mention_rate(graphs: list[dict]) -> float:
    """Mean number of captions mentioning each concept pair present in a scene."""
    total = mentions = 0
    for g in graphs:
        for pair in present_pairs(g):
            total += 1
            mentions += sum(list(pair) in c["pairs"] for c in g["captions"])
    return mentions / max(1, total)


def _progress(total: int, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc="SceneWorld", unit="img")


def write_dataset(out: Path, images: int, seed: int, image_size: int = 96, progress: bool = True) -> dict:
    """Write ``out/images/NNNNNN.png``, ``out/captions.json`` (COCO captions) and ``out/scene_graphs.json``;
    return a summary (counts, timings, images/s for generation alone and for the whole write,
    mean mentions per present pair)."""
    out = Path(out)
    (out / "images").mkdir(parents=True, exist_ok=True)
    bar = _progress(images, progress)
    t0 = time.perf_counter()
    gen_seconds = 0.0
    coco_images: list[dict] = []
    annotations: list[dict] = []
    graphs: dict[str, dict] = {}
    chunk = 256
    for begin in range(0, images, chunk):
        n = min(chunk, images - begin)
        g0 = time.perf_counter()
        arr, caps, gs = generate(n, seed, image_size, start=begin)
        gen_seconds += time.perf_counter() - g0
        for k in range(n):
            image_id = begin + k
            name = f"images/{image_id:06d}.png"
            Image.fromarray(arr[k]).save(out / name, compress_level=1)
            coco_images.append({"id": image_id, "file_name": name, "width": image_size, "height": image_size})
            for text in caps[k]:
                annotations.append({"id": len(annotations), "image_id": image_id, "caption": text})
            graphs[str(image_id)] = gs[k]
        if bar is not None:
            bar.update(n)
    if bar is not None:
        bar.close()
    info = {
        "description": "SceneWorld: procedurally rendered scenes with exact scene graphs",
        "generator": GENERATOR,
        "seed": seed,
        "images": images,
        "image_size": image_size,
        "captions_per_image": CAPTIONS_PER_IMAGE,
    }
    (out / "captions.json").write_text(
        json.dumps({"info": info, "images": coco_images, "annotations": annotations}), encoding="utf-8"
    )
    (out / "scene_graphs.json").write_text(json.dumps(graphs), encoding="utf-8")
    seconds = time.perf_counter() - t0
    return {
        "out": str(out),
        "images": images,
        "captions": len(annotations),
        "seconds": round(seconds, 3),
        "generate_seconds": round(gen_seconds, 3),
        "images_per_s_generate": round(images / max(gen_seconds, 1e-9), 1),
        "images_per_s": round(images / max(seconds, 1e-9), 1),
        "mean_mentions_per_present_pair": round(mention_rate(list(graphs.values())), 3),
    }


def load_dataset(folder: Path) -> tuple[np.ndarray, list[list[str]], list[dict], list[int]]:
    """Read back images (uint8 [N,H,W,3]), captions per image, graphs, image ids, in id order."""
    folder = Path(folder)
    coco = json.loads((folder / "captions.json").read_text(encoding="utf-8"))
    graphs_by_id = json.loads((folder / "scene_graphs.json").read_text(encoding="utf-8"))
    entries = sorted(coco["images"], key=lambda e: int(e["id"]))
    ids = [int(e["id"]) for e in entries]
    by_image: dict[int, list[tuple[int, str]]] = {i: [] for i in ids}
    for a in coco["annotations"]:
        by_image[int(a["image_id"])].append((int(a["id"]), a["caption"]))
    captions = [[text for _, text in sorted(by_image[i])] for i in ids]
    if entries:
        first = entries[0]
        images = np.empty((len(entries), int(first["height"]), int(first["width"]), 3), dtype=np.uint8)
    else:
        images = np.empty((0, 0, 0, 3), dtype=np.uint8)
    for k, e in enumerate(entries):
        with Image.open(folder / e["file_name"]) as im:
            images[k] = np.asarray(im.convert("RGB"))
    graphs = [graphs_by_id[str(i)] for i in ids]
    return images, captions, graphs, ids
