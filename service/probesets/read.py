"""Probe sets on disk: the images, references and (SceneWorld) scene graphs the live probes decode,
written by ``compcap-lab build`` / ``compcap-lab models`` / ``compcap probesets`` into
``<repo>/probes/<name>/`` and listed in the manifest (``Manifest.probe_sets``, by a build) or the
repository's probe index (``<repo>/probes/index.json``, by ``compcap probesets``), or by ``compcap
probeset`` from any COCO-format folder. This module only reads them (numpy, PIL and ``service.*``);
``export.probesets.write`` is the one writer.

Layout of ``<repo>/probes/<name>/``::

    probe.json         {"format": 1, "name", "kind", "source", "world_seed", "images", "scene_graphs", ...}
    captions.json      COCO captions: {"info", "images": [{"id", "file_name", "width", "height"}],
                       "annotations": [{"id", "image_id", "caption"}]}
    scene_graphs.json  {str(id): scene graph}   (SceneWorld only)
    images/...         the image files, ``file_name`` relative to the probe folder
    cider_df.json      CIDEr-D document frequencies of the training references (productivity,
                       substitutivity; ``CiderD.save``)
    splits/<kind>[_<g>]/split.json   splits over the probe images (``compcap-lab evaluate --data <folder>``)

The kind-specific keys of ``probe.json`` are each format's (``SetFormat``, ``service.probesets.format``):
the built-in four are documented in ``service.probesets.builtin``; a probe kind may bring its own. This
module knows no format: a set's keys are checked by its format's ``check`` and read by its format's
``readers`` (``probe_set.minimal_pairs()`` is the counterfactual format's reader of that name).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from service.evaluation.cider import CiderD
from service.images.decode import ImageError, decode_image
from service.manifest import Manifest, repo_probe_set_entries
from service.probesets.format import ProbeSetError, SetFormat, format_names, get_format

FORMAT = 1
PROBE_FILE = "probe.json"
CAPTIONS_FILE = "captions.json"
SCENES_FILE = "scene_graphs.json"
CIDER_FILE = "cider_df.json"
# probe images are the repository's own files, not uploads: generous decoding limits
MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_PIXELS = 64 * 1024 * 1024


@dataclass(frozen=True)
class ProbeSet:
    name: str
    kind: str
    root: Path
    info: dict[str, Any]  # probe.json
    image_ids: tuple[int, ...]
    file_names: dict[int, str]
    captions: dict[int, list[str]]
    scenes: dict[int, dict[str, Any]] | None

    @property
    def where(self) -> Path:
        """Its ``probe.json``, as error messages name it."""
        return self.root / PROBE_FILE

    @property
    def format(self) -> SetFormat:
        """The set's format record (``service.probesets.format``)."""
        fmt = get_format(self.kind)
        if fmt is None:
            raise ProbeSetError(f"{self.where}: probe-set format {self.kind!r} is not registered")
        return fmt

    def expect(self, fmt: str) -> None:
        """Raise ``ProbeSetError`` unless the set is of format ``fmt`` (a reader given another's set)."""
        if self.kind != fmt:
            raise ProbeSetError(f"{self.where}: probe set {self.name!r} is {self.kind}, not {fmt}")

    def __getattr__(self, name: str) -> Callable[..., Any]:
        """``probe_set.<name>(*args)``: the reader ``name`` of the set's format (``SetFormat.readers``),
        bound to the set — ``minimal_pairs()`` of a counterfactual set; a reader of another registered
        format raises ``ProbeSetError`` naming both formats. Code that wants the reader's type calls the
        format's function (``service.probesets.builtin.minimal_pairs(probe_set)``)."""
        if name.startswith("_") or "kind" not in self.__dict__:
            raise AttributeError(name)
        for fmt_name in (self.kind, *format_names()):
            fmt = get_format(fmt_name)
            if fmt is not None and name in fmt.readers:
                self.expect(fmt.name)
                return functools.partial(fmt.readers[name], self)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def has_scene_graphs(self) -> bool:
        return self.scenes is not None

    def images(self, ids: Sequence[int], height: int, width: int) -> np.ndarray:
        """uint8 [N, height, width, 3] of ``ids``, in that order (decoded and resized like uploads)."""
        out = np.zeros((len(ids), height, width, 3), dtype=np.uint8)
        for k, image_id in enumerate(ids):
            if image_id not in self.file_names:
                raise ProbeSetError(f"{self.root / CAPTIONS_FILE}: no image {image_id}")
            path = self.root / self.file_names[image_id]
            try:
                data = path.read_bytes()
                out[k] = decode_image(
                    data, height, width, max_bytes=MAX_FILE_BYTES, max_pixels=MAX_PIXELS, label=str(path)
                )
            except (OSError, ImageError) as exc:
                raise ProbeSetError(f"{path}: {exc}") from None
        return out

    def cider(self) -> CiderD | None:
        """CIDEr-D with the training references' document frequencies (None if the set has none)."""
        path = self.root / CIDER_FILE
        if not path.is_file():
            return None
        try:
            return CiderD.load(path)
        except (OSError, ValueError, KeyError) as exc:
            raise ProbeSetError(f"{path}: {exc}") from None


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise ProbeSetError(f"{path} is missing")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ProbeSetError(f"{path}: not valid JSON ({exc})") from None


def load_probe_set(root: Path) -> ProbeSet:
    """Read and check the probe set in folder ``root``."""
    root = Path(root)
    if not root.is_dir():
        raise ProbeSetError(f"probe set folder {root} does not exist")
    probe_path = root / PROBE_FILE
    info = _read_json(probe_path)
    if not isinstance(info, dict):
        raise ProbeSetError(f"{probe_path}: must be a JSON object")
    if info.get("format") != FORMAT:
        raise ProbeSetError(f"{probe_path}: format {info.get('format')!r}, expected {FORMAT}")
    for key in ("name", "kind"):
        if not isinstance(info.get(key), str):
            raise ProbeSetError(f"{probe_path}: key {key!r} is missing or not a string")
    fmt = get_format(info["kind"])
    if fmt is None:
        raise ProbeSetError(f"{probe_path}: kind {info['kind']!r} is not one of {format_names()}")
    captions_path = root / CAPTIONS_FILE
    coco = _read_json(captions_path)
    try:
        entries = sorted(coco["images"], key=lambda e: int(e["id"]))
        file_names = {int(e["id"]): str(e["file_name"]) for e in entries}
        by_image: dict[int, list[tuple[int, str]]] = {i: [] for i in file_names}
        for k, a in enumerate(coco["annotations"]):
            image_id = int(a["image_id"])
            if image_id not in by_image:
                raise ProbeSetError(
                    f"{captions_path}: annotation {a.get('id', k)} names unknown image {image_id}"
                )
            by_image[image_id].append((int(a.get("id", k)), str(a["caption"])))
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, ProbeSetError):
            raise
        raise ProbeSetError(f"{captions_path}: not COCO captions ({exc!r})") from None
    captions = {i: [t for _, t in sorted(refs)] for i, refs in by_image.items()}
    bare = [i for i, refs in captions.items() if not refs]
    if bare:
        raise ProbeSetError(f"{captions_path}: images without captions, e.g. {bare[:3]}")
    absent = [name for name in file_names.values() if not (root / name).is_file()]
    if absent:
        raise ProbeSetError(
            f"{root}: {len(absent)} image files of captions.json are missing, e.g. {absent[:3]}"
        )
    if "images" in info and int(info["images"]) != len(file_names):
        raise ProbeSetError(
            f"{probe_path}: images = {info['images']} but captions.json has {len(file_names)}"
        )
    scenes: dict[int, dict[str, Any]] | None = None
    if (root / SCENES_FILE).is_file():
        raw = _read_json(root / SCENES_FILE)
        scenes = {int(k): v for k, v in raw.items()}
        missing = [i for i in file_names if i not in scenes]
        if missing:
            raise ProbeSetError(f"{root / SCENES_FILE}: no scene graph for images {missing[:3]}")
    elif info.get("scene_graphs"):
        raise ProbeSetError(f"{probe_path} says scene_graphs but {root / SCENES_FILE} is missing")
    fmt.validate(info, str(probe_path), set(file_names))
    return ProbeSet(
        name=info["name"],
        kind=info["kind"],
        root=root,
        info=info,
        image_ids=tuple(file_names),
        file_names=file_names,
        captions=captions,
        scenes=scenes,
    )


def repo_probe_sets(repo: Path, manifest: Manifest) -> dict[str, ProbeSet]:
    """Every probe set of the repository (its manifest's and its probe index's), loaded (name -> set)."""
    out: dict[str, ProbeSet] = {}
    for entry in repo_probe_set_entries(repo, manifest):
        probe = load_probe_set(Path(repo) / entry.path)
        if (probe.name, probe.kind) != (entry.name, entry.kind):
            raise ProbeSetError(
                f"{probe.root / PROBE_FILE}: is {probe.kind} set {probe.name!r}, "
                f"the manifest lists {entry.kind} set {entry.name!r}"
            )
        out[entry.name] = probe
    return out
