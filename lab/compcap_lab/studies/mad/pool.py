"""The MAD study's raw image pool R and its captions (``compcap-lab mad``, ``compcap_lab.studies.mad.study``).

A pool is a SceneWorld world of its own seed (written once under the work directory), any COCO-format
folder (references; scene graphs when it has ``scene_graphs.json``), or a plain folder of images (no
references). Its identity (kind, seed, size and a fingerprint of its file names and references) names it
in every checkpoint and in the study's state, so captions of one pool are never read as another's.

Captioning is resumable: per configuration a JSON-lines checkpoint ``<dir>/<name>.jsonl`` whose first
line is a header (the configuration's options, the pool identity, the chunk size) and every further line
one finished chunk ``{"start", "captions", "seconds"}``. A checkpoint whose header differs is an error
naming the file, never reused. Images are decoded one chunk at a time and captioned by every
configuration still missing that chunk, so no image is decoded twice.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm import tqdm

from export.data.coco_captions import load_folder
from service.compare.configs import (
    Configuration,
    ConfigurationError,
    check_unique,
    default_configurations,
    parse_configuration,
)

if TYPE_CHECKING:
    from service.engine.engine import CaptionEngine

CHECKPOINT_FORMAT = "compcap.mad-captions/1"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")
CHUNK = 250


class MadError(ValueError):
    """Bad input to the MAD study: the CLI prints it and exits 2."""


@dataclass
class Pool:
    """Images of a pool in a fixed order: ``file_names[n]`` (relative to ``root``) is image ``n`` with
    key ``ids[n]``; ``references[n]`` its reference captions and ``scenes[n]`` its scene graph, when
    the pool has them."""

    kind: str  # sceneworld | coco | images
    root: Path
    ids: list[int]
    file_names: list[str]
    references: list[list[str]] | None = None
    scenes: list[dict[str, Any]] | None = None
    seed: int | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def identity(self) -> dict[str, Any]:
        digest = hashlib.sha256(
            json.dumps([self.ids, self.file_names, self.references], ensure_ascii=True).encode()
        ).hexdigest()[:16]
        return {"kind": self.kind, "seed": self.seed, "images": len(self), "fingerprint": digest}


def pool_dir(workdir: Path, seed: int, images: int) -> Path:
    return Path(workdir) / f"pool_{seed}_{images}"


def _world_complete(folder: Path, seed: int, images: int) -> bool:
    from sceneworld.dataset import GENERATOR

    try:
        info = json.loads((folder / "captions.json").read_text(encoding="utf-8"))["info"]
    except (OSError, ValueError, KeyError):
        return False
    return (
        (folder / "scene_graphs.json").is_file()
        and info.get("generator") == GENERATOR
        and (info.get("seed"), info.get("images")) == (seed, images)
    )


def sceneworld_pool(workdir: Path, seed: int, images: int, image_size: int) -> Pool:
    """The world ``<workdir>/pool_<seed>_<images>``, written (into a temporary folder, then renamed) unless
    it is already complete."""
    from sceneworld.dataset import write_dataset

    folder = pool_dir(workdir, seed, images)
    if not _world_complete(folder, seed, images):
        tmp = folder.with_name(folder.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        write_dataset(tmp, images=images, seed=seed, image_size=image_size, progress=True)
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)
    pool = coco_pool(folder)
    pool.kind, pool.seed = "sceneworld", seed
    return pool


def coco_pool(folder: Path, ids: Sequence[int] | None = None) -> Pool:
    """A COCO-format folder (``load_folder``): references, and scene graphs when every image has one.
    ``ids``: only these images, in this order (default: all, by id)."""
    folder = Path(folder)
    if not (folder / "captions.json").is_file():
        raise MadError(f"{folder} has no captions.json (not a COCO-format folder)")
    ds = load_folder(folder)
    chosen = list(ds.image_ids if ids is None else ids)
    missing = [i for i in chosen if i not in ds.captions]
    if missing:
        raise MadError(f"{folder}: image ids {missing[:3]} have no captions")
    scenes = ds.scenes if ds.scenes and all(i in ds.scenes for i in chosen) else None
    return Pool(
        kind="coco",
        root=folder,
        ids=chosen,
        file_names=[ds.file_names[i] for i in chosen],
        references=[ds.captions[i] for i in chosen],
        scenes=[scenes[i] for i in chosen] if scenes else None,
    )


def image_dir_pool(folder: Path) -> Pool:
    """Every image file directly in ``folder``, by name (no references)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise MadError(f"--image-dir {folder} is not a folder")
    names = sorted(p.name for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if not names:
        raise MadError(f"--image-dir {folder} holds no images ({', '.join(IMAGE_SUFFIXES)})")
    return Pool(kind="images", root=folder, ids=list(range(len(names))), file_names=names)


def pool_from_state(entry: dict[str, Any]) -> Pool:
    """The pool a state file names (``{"root", "kind", "seed", "ids", ...}``), checked against its
    recorded identity."""
    root, kind = Path(entry["root"]), entry["kind"]
    if kind == "images":
        pool = image_dir_pool(root)
    else:
        pool = coco_pool(root, entry.get("ids"))
        pool.kind, pool.seed = kind, entry.get("seed")
    if pool.identity() != entry["identity"]:
        raise MadError(f"the pool at {root} is not the one the state was made on (it changed or moved)")
    return pool


def check_same_pool(have: dict[str, Any], spec: dict[str, Any]) -> None:
    """``--add`` with pool options: they must name the state's pool (identity ``have``)."""
    if spec.get("data") or spec.get("image_dir"):
        pool = coco_pool(spec["data"]) if spec.get("data") else image_dir_pool(spec["image_dir"])
        same = pool.identity()["fingerprint"] == have["fingerprint"]
    else:
        seed = have.get("seed") if spec.get("world_seed") is None else spec["world_seed"]
        images = have["images"] if spec.get("images") is None else spec["images"]
        same = have["kind"] == "sceneworld" and (seed, images) == (have["seed"], have["images"])
    if not same:
        raise MadError(f"the state file is from another pool ({json.dumps(have)}) than the one given")


# ------------------------------------------------------------------------------------------ checkpoints
def checkpoint_header(config: Configuration, pool: Pool, chunk: int) -> dict[str, Any]:
    return {
        "format": CHECKPOINT_FORMAT,
        "configuration": config.to_json(),
        "pool": pool.identity(),
        "chunk": chunk,
    }


def read_checkpoint(path: Path, header: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Finished chunks by start (``{"captions", "seconds"}``) of the checkpoint at ``path`` (none when it
    does not exist). ``MadError`` naming the file when its header is not ``header``. A torn last line
    (an interrupted write) is dropped and the file rewritten without it."""
    if not path.is_file():
        return {}
    lines = path.read_text(encoding="utf-8").splitlines()
    try:
        found = json.loads(lines[0]) if lines else None
    except ValueError:
        found = None
    if found != header:
        raise MadError(
            f"checkpoint {path} was written for another configuration or pool "
            f"(its header: {json.dumps(found)[:300]}); delete it or use another --out"
        )
    chunks: dict[int, dict[str, Any]] = {}
    kept = [lines[0]]
    for n, line in enumerate(lines[1:], start=1):
        try:
            entry = json.loads(line)
        except ValueError:
            if n == len(lines) - 1:  # torn tail: recaption that chunk
                path.write_text("\n".join(kept) + "\n", encoding="utf-8")
                break
            raise MadError(f"checkpoint {path}: line {n + 1} is not JSON; delete the file") from None
        chunks[int(entry["start"])] = {"captions": entry["captions"], "seconds": float(entry["seconds"])}
        kept.append(line)
    return chunks


def _append(path: Path, entry: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")
        f.flush()


def resolve_options(config: Configuration) -> dict[str, Any]:
    """``engine.resolve`` kwargs: the configuration's options, one caption per image unless it says."""
    return {"n_best": 1, **config.options}


async def caption_pool(
    engine: CaptionEngine,
    pool: Pool,
    configs: Sequence[Configuration],
    folder: Path,
    size: tuple[int, int],
    chunk: int = CHUNK,
    desc: str = "caption",
) -> tuple[dict[str, list[str]], dict[str, float]]:
    """Best caption per image of ``pool`` by every configuration, and seconds of captioning per
    configuration (summed over chunks, earlier runs' included). Resumes from the checkpoints in
    ``folder``; every header is checked before any captioning."""
    from compcap_lab.studies.evaluate import load_images

    folder.mkdir(parents=True, exist_ok=True)
    starts = list(range(0, len(pool), chunk))
    headers = {c.name: checkpoint_header(c, pool, chunk) for c in configs}
    done = {c.name: read_checkpoint(folder / f"{c.name}.jsonl", headers[c.name]) for c in configs}
    for config in configs:  # every header checked before any is written
        path = folder / f"{config.name}.jsonl"
        if not path.is_file():
            path.write_text(json.dumps(headers[config.name]) + "\n", encoding="utf-8")
    params = {c.name: engine.resolve(**resolve_options(c)) for c in configs}
    bars = {
        c.name: tqdm(
            total=len(pool),
            initial=sum(len(v["captions"]) for v in done[c.name].values()),
            desc=f"{desc} {c.name}",
            unit="img",
            position=n,
        )
        for n, c in enumerate(configs)
    }
    try:
        for start in starts:
            todo = [c for c in configs if start not in done[c.name]]
            if not todo:
                continue
            stop = min(start + chunk, len(pool))
            images = load_images(pool.root, pool.file_names[start:stop], *size)
            for config in todo:
                t0 = time.perf_counter()
                out = await engine.caption_many(
                    images, params[config.name], progress=bars[config.name].update
                )
                entry = {"start": start, "captions": [per[0].text for per in out]}
                entry["seconds"] = round(time.perf_counter() - t0, 4)
                _append(folder / f"{config.name}.jsonl", entry)
                done[config.name][start] = entry
    finally:
        for bar in bars.values():
            bar.close()
    captions = {c.name: [t for s in starts for t in done[c.name][s]["captions"]] for c in configs}
    seconds = {c.name: round(float(sum(v["seconds"] for v in done[c.name].values())), 3) for c in configs}
    return captions, seconds


# ------------------------------------------------------------------------- configurations, the i.i.d. set
def parse_configurations(
    texts: Sequence[str] | None, repo: Path, known: Sequence[Configuration] = ()
) -> list[Configuration]:
    """``texts`` parsed (default: the repository's line-up), unique among themselves and ``known``,
    each resolved on ``repo``."""
    from service.manifest import load_manifest

    try:
        manifest = load_manifest(repo)
    except (OSError, ValueError) as exc:
        raise MadError(f"--repo {repo}: cannot read its manifest ({exc})") from None
    try:
        configs = [parse_configuration(t) for t in texts] if texts else default_configurations(manifest)
        check_unique([*known, *configs])
    except ConfigurationError as exc:
        raise MadError(str(exc)) from None
    validate_configurations(repo, configs)
    return configs


def validate_configurations(repo: Path, configs: Sequence[Configuration]) -> None:
    """Every configuration resolves on ``repo`` as the engine would (unknown model, bad option)."""
    from service.engine.params import EngineError, resolve_params
    from service.engine.settings import MAX_BEAM_SIZE
    from service.engine.tokens import captioner_vocabularies
    from service.manifest import load_manifest
    from service.settings import Settings
    from service.text.vocabulary import Vocabulary

    manifest = load_manifest(repo)
    # each captioner's own tokens (an imported one's subword tokenizer), as the engine resolves them
    vocabs = captioner_vocabularies(repo, manifest, Vocabulary.load(repo / manifest.vocabulary.file))
    settings = Settings(repo=repo, max_beam_size=MAX_BEAM_SIZE)
    for config in configs:
        try:
            resolve_params(manifest, vocabs, settings, **resolve_options(config))
        except (EngineError, TypeError, ValueError) as exc:
            raise MadError(f"configuration {config.name}: {exc}") from None


def default_iid(repo: Path) -> tuple[Path, list[int] | None] | None:
    """Where ``compcap-lab report`` evaluates: ``<repo>.work/data/eval_<EVAL_SEED>`` (its full split's test
    set), else the build's test world ``<repo>.work/data/test`` (all of it); None when neither exists."""
    from compcap_lab.pipeline.zoo import EVAL_SEED

    work = Path(str(repo) + ".work") / "data"
    for folder in (work / f"eval_{EVAL_SEED}", work / "test"):
        if (folder / "captions.json").is_file():
            return folder, _test_ids(folder)
    return None


def _test_ids(folder: Path) -> list[int] | None:
    split = folder / "splits" / "full" / "split.json"
    if not split.is_file():
        return None
    return [int(i) for i in json.loads(split.read_text(encoding="utf-8"))["sets"]["test"]]


def iid_pool(repo: Path, data: Path | None, images: int) -> Pool | None:
    found = (Path(data), _test_ids(Path(data))) if data else default_iid(repo)
    if found is None:
        return None
    folder, ids = found
    if not (folder / "captions.json").is_file():
        raise MadError(f"--iid-data {folder} has no captions.json (not a COCO-format folder)")
    full = coco_pool(folder, ids)
    return coco_pool(folder, full.ids[:images])


def iid_scores(pool: Pool, captions: dict[str, list[str]]) -> dict[str, float]:
    from service.evaluation.cider import CiderD

    assert pool.references is not None
    cider = CiderD.from_references(pool.references)
    return {
        name: float(np.mean([cider.score(c, r) for c, r in zip(caps, pool.references, strict=True)]))
        for name, caps in captions.items()
    }
