"""COCO-format caption data: one loader for SceneWorld folders and real COCO caption files.

* ``load_captions(captions_json, karpathy_json=None, instances_json=None)`` reads a COCO captions file
  (``{"images": [{"id", "file_name"}], "annotations": [{"image_id", "caption"}]}``), optionally a
  Karpathy split file (``dataset_coco.json``: ``{"images": [{"cocoid", "split"}]}``) and a COCO
  instances file, whose annotation count per image is the scene density of Pantazopoulos et al.
  (2022, §4.2).
* ``load_folder(folder)`` reads a folder holding ``captions.json`` — a SceneWorld dataset, whose
  ``scene_graphs.json`` gives exact objects (density = number of objects), or a COCO-like folder with
  optional ``dataset_coco.json`` / ``instances.json`` next to it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KARPATHY_NAMES = ("dataset_coco.json", "karpathy.json")
INSTANCES_NAMES = ("instances.json",)


@dataclass
class CaptionDataset:
    root: Path  # folder images are relative to
    image_ids: list[int]
    file_names: dict[int, str]
    captions: dict[int, list[str]]
    karpathy: dict[int, str] | None = None  # image id -> train / val / test / restval
    object_counts: dict[int, int] | None = None  # scene density (scene graph objects / COCO instances)
    scenes: dict[int, dict[str, Any]] | None = None  # SceneWorld scene graphs, when present
    source: Path | None = field(default=None)  # the captions JSON this was read from

    def __post_init__(self) -> None:
        missing = [i for i in self.image_ids if i not in self.captions]
        if missing:
            raise ValueError(f"{len(missing)} image ids have no caption list, e.g. {missing[:3]}")

    def __len__(self) -> int:
        return len(self.image_ids)

    def all_captions(self) -> list[str]:
        """Every caption, image id order then annotation order."""
        return [c for i in self.image_ids for c in self.captions[i]]

    def subset_captions(self, ids: list[int]) -> list[str]:
        return [c for i in ids for c in self.captions[i]]


def _read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def read_karpathy(path: Path) -> dict[int, str]:
    """``dataset_coco.json`` (Karpathy & Fei-Fei 2015) -> image id -> split name."""
    data = _read_json(path)
    out: dict[int, str] = {}
    for entry in data["images"]:
        image_id = entry.get("cocoid", entry.get("id"))
        if image_id is None:
            raise ValueError(f"{path}: Karpathy entry without cocoid/id: {entry}")
        out[int(image_id)] = str(entry["split"])
    return out


def read_instance_counts(path: Path, image_ids: list[int] | None = None) -> dict[int, int]:
    """Number of instance annotations (ground-truth boxes) per image of a COCO instances file;
    images of ``image_ids`` without annotations count 0."""
    data = _read_json(path)
    counts: dict[int, int] = dict.fromkeys(image_ids or [], 0)
    for entry in data.get("images", []):
        counts.setdefault(int(entry["id"]), 0)
    for ann in data["annotations"]:
        image_id = int(ann["image_id"])
        counts[image_id] = counts.get(image_id, 0) + 1
    return counts


def load_captions(
    captions_json: Path,
    karpathy_json: Path | None = None,
    instances_json: Path | None = None,
    root: Path | None = None,
) -> CaptionDataset:
    """A COCO captions file (+ optional Karpathy split file and instances file).

    Images without any caption are dropped; captions keep annotation-id order. ``root`` (default:
    the captions file's folder) is the folder ``file_name`` is relative to."""
    captions_json = Path(captions_json)
    data = _read_json(captions_json)
    by_image: dict[int, list[tuple[int, str]]] = {}
    for k, ann in enumerate(data["annotations"]):
        by_image.setdefault(int(ann["image_id"]), []).append((int(ann.get("id", k)), str(ann["caption"])))
    file_names: dict[int, str] = {}
    for entry in data.get("images", []):
        file_names[int(entry["id"])] = str(entry.get("file_name", ""))
    image_ids = sorted(i for i in by_image if by_image[i])
    captions = {i: [text.strip() for _, text in sorted(by_image[i])] for i in image_ids}
    for i in image_ids:
        file_names.setdefault(i, "")
    karpathy = read_karpathy(Path(karpathy_json)) if karpathy_json is not None else None
    counts = read_instance_counts(Path(instances_json), image_ids) if instances_json is not None else None
    return CaptionDataset(
        root=Path(root) if root is not None else captions_json.parent,
        image_ids=image_ids,
        file_names={i: file_names[i] for i in image_ids},
        captions=captions,
        karpathy=karpathy,
        object_counts=counts,
        source=captions_json,
    )


def load_folder(folder: Path) -> CaptionDataset:
    """A SceneWorld / COCO-like folder: ``captions.json`` (+ ``scene_graphs.json``, a Karpathy file
    ``dataset_coco.json`` and an ``instances.json`` when present)."""
    folder = Path(folder)
    captions_json = folder / "captions.json"
    if not captions_json.is_file():
        raise FileNotFoundError(f"{folder} has no captions.json")
    karpathy = next((folder / n for n in KARPATHY_NAMES if (folder / n).is_file()), None)
    instances = next((folder / n for n in INSTANCES_NAMES if (folder / n).is_file()), None)
    ds = load_captions(captions_json, karpathy_json=karpathy, instances_json=instances, root=folder)
    graphs_path = folder / "scene_graphs.json"
    if graphs_path.is_file():
        graphs = _read_json(graphs_path)
        ds.scenes = {int(k): v for k, v in graphs.items() if int(k) in ds.captions}
        ds.object_counts = {i: len(ds.scenes[i]["objects"]) for i in ds.image_ids if i in ds.scenes}
    return ds
