"""The one writer of the probe-set format (``service.probesets`` documents and reads it), for every
registered format: the kind-specific keys come in ``ProbeContent.extra`` and are checked on reading
back by the format's record (``service.probesets.format.SetFormat``)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from export.data.splits import Split, split_dir_for, write_split
from export.probesets.tables import full_split
from service.evaluation.cider import CiderD
from service.manifest import ProbeSetEntry
from service.probesets import (
    CAPTIONS_FILE,
    CIDER_FILE,
    FORMAT,
    PROBE_FILE,
    SCENES_FILE,
    format_names,
    get_format,
    load_probe_set,
)

# (image id, probe folder) -> (file name relative to the folder, width, height); writes the file
ImageSaver = Callable[[int, Path], tuple[str, int, int]]


@dataclass
class ProbeContent:
    name: str
    kind: str  # a registered probe-set format (service.probesets.format_names())
    source: str  # "sceneworld(seed=...)" or the COCO folder
    world_seed: int | None
    captions: dict[int, list[str]]  # image id -> references, in the order written
    extra: dict[str, Any]  # the kind-specific keys of probe.json
    scenes: dict[int, dict[str, Any]] | None = None
    splits: list[Split] = field(default_factory=list)
    cider: CiderD | None = None  # DF of the training references
    info: dict[str, Any] = field(default_factory=dict)  # extra keys of captions.json "info"


def write_probe_set(
    folder: Path, content: ProbeContent, save_image: ImageSaver, repo: Path | None = None
) -> ProbeSetEntry:
    """Write ``content`` to ``folder`` (replacing it once complete), check it reads back, and return its
    manifest entry (``path`` relative to ``repo`` when given)."""
    if get_format(content.kind) is None:
        raise ValueError(f"kind must be a probe-set format, one of {format_names()}, got {content.kind!r}")
    folder = Path(folder)
    tmp = folder.with_name(f".{folder.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "images").mkdir(parents=True)
    images: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    for image_id, refs in content.captions.items():
        file_name, width, height = save_image(image_id, tmp)
        images.append({"id": image_id, "file_name": file_name, "width": width, "height": height})
        for text in refs:
            annotations.append({"id": len(annotations), "image_id": image_id, "caption": text})
    about = {"source": content.source, "world_seed": content.world_seed}
    info = {"description": f"{content.kind} probe set {content.name!r}", **about, **content.info}
    _dump(tmp / CAPTIONS_FILE, {"info": info, "images": images, "annotations": annotations})
    if content.scenes is not None:
        _dump(tmp / SCENES_FILE, {str(i): content.scenes[i] for i in content.captions})
    if content.cider is not None:
        content.cider.save(tmp / CIDER_FILE)
    split_info = {"probe_set": content.name, **about}
    for split in [*content.splits, full_split(list(content.captions), split_info)]:
        write_split(split, split_dir_for(tmp, split.kind, split.group))
    probe = {
        "format": FORMAT,
        "name": content.name,
        "kind": content.kind,
        **about,
        "images": len(images),
        "scene_graphs": content.scenes is not None,
        **content.extra,
    }
    _dump(tmp / PROBE_FILE, probe, indent=1)
    load_probe_set(tmp)  # the reader agrees with the writer
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    path = folder.relative_to(repo).as_posix() if repo is not None else str(folder)
    return ProbeSetEntry(
        name=content.name,
        kind=content.kind,
        path=path,
        images=len(images),
        scene_graphs=content.scenes is not None,
        source=content.source,
        world_seed=content.world_seed,
    )


def _dump(path: Path, data: Any, indent: int | None = None) -> None:
    path.write_text(json.dumps(data, indent=indent), encoding="utf-8")
