"""Repositories and data for the tests of imported models: a snapshot imported into a repository with
the network refused (the import itself offline, not only the tests after it), and a small COCO-format
folder (SceneWorld images and captions, instance annotations, no scene graphs: what a
user's own COCO-style data gives ``compcap probeset`` and ``compcap-lab mad``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.hf_checks import refuse_network


def import_offline(
    snapshot: Path, name: str, repo: Path, held_out_pairs: Path | None = None, programs: bool = False
) -> Any:
    """``import_hf(snapshot, name, repo, held_out_pairs, programs=programs)`` with every connection but
    loopback refused (without the gradient programs by default: most of a tiny import's time); its graphs
    agree with transformers within the import's tolerance. Returns its ``ImportReport``."""
    from export.hf.importer import PARITY_TOLERANCE, import_hf

    with pytest.MonkeyPatch.context() as mp:
        refuse_network(mp)
        report = import_hf(snapshot, name, repo, held_out_pairs=held_out_pairs, programs=programs)
    assert all(diff <= PARITY_TOLERANCE for diff in report.parity.values()), report.parity
    return report


def coco_box(box: list[float]) -> list[float]:
    """A scene graph's [x0, y0, x1, y1] as COCO writes a box: [x, y, width, height]."""
    return [box[0], box[1], box[2] - box[0], box[3] - box[1]]


def coco_folder(folder: Path, images: int, seed: int, image_size: int = 32) -> Path:
    """A COCO-format folder of ``images`` SceneWorld images: ``captions.json`` (5 references each),
    ``images/``, and ``instances.json`` (each object a category annotation with its box, COCO's
    [x, y, w, h]); its scene graphs are removed, as real COCO has none."""
    from sceneworld.dataset import write_dataset
    from service.text.concepts import load_concepts

    write_dataset(folder, images=images, seed=seed, image_size=image_size, progress=False)
    graphs = json.loads((folder / "scene_graphs.json").read_text())
    (folder / "scene_graphs.json").unlink()
    nouns = list(load_concepts().nouns)
    objects = [(int(i), o) for i, g in graphs.items() for o in g["objects"]]
    instances = {
        "images": [{"id": int(i)} for i in graphs],
        "annotations": [
            {"id": k, "image_id": i, "category_id": nouns.index(o["noun"]) + 1, "bbox": coco_box(o["bbox"])}
            for k, (i, o) in enumerate(objects)
        ],
        "categories": [{"id": k + 1, "name": n} for k, n in enumerate(nouns)],
    }
    (folder / "instances.json").write_text(json.dumps(instances))
    return folder
