"""The SceneWorld probe sets of a model repository: written by ``compcap-lab build`` / ``compcap-lab models``
into the staging repository, or by ``compcap probesets --repo DIR`` into an already built one (no
retraining). The training references (CIDEr-D document frequencies, synonym counts) are the ``train``
set of the split the repository's default captioner was trained on (``systematicity/<g>`` or ``full``
of the training world ``<repo>.work/data/train``); for the zoo that is the group-1 split of ``butr_g1``.
``register_probe_sets`` lists sets written under a built repository (these, or ``compcap probeset
--repo``'s from a COCO-format folder) in its probe index, ``<repo>/probes/index.json``."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from export.data.coco_captions import load_folder
from export.data.splits import Split, build_split, load_split, split_path_for, write_split
from export.presets import Preset, get_preset
from export.probesets import COUNTERFACTUAL, KINDS
from export.probesets.counterfactual import counterfactual_probe_set
from export.probesets.sceneworld import sceneworld_probe_sets
from export.progress import stages
from service.manifest import (
    MANIFEST_NAME,
    PROBE_INDEX,
    Manifest,
    ProbeIndex,
    ProbeSetEntry,
    load_manifest,
    load_probe_index,
)
from service.text.concepts import ConceptPair


def preset_probe_sets(
    repo: Path,
    preset: Preset,
    seed: int,
    train_references: Sequence[Sequence[str]],
    references: str,
    image_size: int | None = None,
    kinds: Sequence[str] = KINDS,
    on_kind: Callable[[str], object] | None = None,
) -> list[ProbeSetEntry]:
    """The probe sets of a repository trained on world ``seed``, sized by the preset (``on_kind(kind)``
    as each kind starts)."""
    return sceneworld_probe_sets(
        repo,
        train_references,
        seed,
        image_size or preset.image_size,
        per_pair=preset.probe_images_per_pair,
        per_bucket=preset.probe_images_per_bucket,
        min_count=preset.probe_min_synonym_count,
        kinds=kinds,
        references=references,
        on_kind=on_kind,
    )


def training_references(train_dir: Path, split_name: str, seed: int) -> tuple[list[list[str]], str]:
    """References of the ``train`` set of split ``split_name`` ("full" or "systematicity/<g>") of the
    training world; the split is read from ``<train_dir>/splits/`` (built and written when missing)."""
    kind, _, group_text = split_name.partition("/")
    group = int(group_text) if group_text else None
    ds = load_folder(train_dir)
    path = split_path_for(train_dir, kind, group)
    split: Split
    if path.is_file():
        split = load_split(path)
    else:
        split = build_split(ds, kind, group=group, seed=seed)  # the parser only without scene graphs
        write_split(split, path.parent)
    ids = split.sets["train"]
    return [
        list(ds.captions[i]) for i in ids
    ], f"{split_name} split train set of {train_dir} ({len(ids)} images)"


def add_probe_sets(
    repo: Path, work: Path | None = None, kinds: Sequence[str] = KINDS, preset: str | None = None
) -> dict[str, Any]:
    """``compcap probesets --repo DIR``: (re)write the SceneWorld probe sets of a built repository and
    list them in its probe index (entries of the same names are replaced). ``counterfactual`` (not
    written unless asked for) needs only the training world's seed, not its images."""
    repo = Path(repo)
    manifest = load_manifest(repo)
    work = Path(work) if work is not None else repo.with_name(repo.name + ".work")
    train_dir = work / "data" / "train"
    seeded = [k for k in kinds if k != COUNTERFACTUAL]
    if seeded and not (train_dir / "captions.json").is_file():
        render_training_world(repo, work, preset or manifest.preset)
    seed = training_seed(repo, train_dir)
    split_name = manifest.captioner(manifest.default_captioner).training.split
    sizes = get_preset(preset or manifest.preset)
    t0 = time.perf_counter()
    entries: list[ProbeSetEntry] = []
    about = ""
    with stages(len(kinds) + 2) as stage:
        if seeded:
            stage("training references")
            refs, about = training_references(train_dir, split_name, seed)
            entries += preset_probe_sets(
                repo,
                sizes,
                seed,
                refs,
                about,
                manifest.image.height,
                seeded,
                on_kind=lambda kind: stage(f"{kind} probe set"),
            )
        if COUNTERFACTUAL in kinds:
            stage("counterfactual probe set")
            default = manifest.captioner(manifest.default_captioner)
            held = [ConceptPair(p.kind, p.modifier, p.noun) for p in default.training.held_out_pairs]
            entries.append(
                counterfactual_probe_set(
                    repo, seed, manifest.image.height, held, sizes.probe_minimal_pairs, default.name
                )
            )
        stage("probe index")
        register_probe_sets(repo, entries, manifest)
    summary = {
        "repo": str(repo),
        "training_world_seed": seed,
        "training_references": about,
        "seconds": round(time.perf_counter() - t0, 1),
        "probe_sets": [e.model_dump() for e in entries],
    }
    print(json.dumps(summary, indent=2))
    return summary


def training_seed(repo: Path, train_dir: Path) -> int:
    """The training world's seed: from its rendered captions, else from ``build_report.json``."""
    captions = Path(train_dir) / "captions.json"
    if captions.is_file():
        return int(json.loads(captions.read_text(encoding="utf-8"))["info"]["seed"])
    report = Path(repo) / "build_report.json"
    if not report.is_file():
        raise FileNotFoundError(f"no training world under {train_dir} and no {report} to read its seed from")
    return int(json.loads(report.read_text(encoding="utf-8"))["seed"])


def render_training_world(repo: Path, work: Path, preset: str) -> None:
    """Render the training world a repository was built from (its seed is in ``build_report.json``),
    for a repository shipped without its work folder."""
    report = Path(repo) / "build_report.json"
    if not report.is_file():
        raise FileNotFoundError(
            f"no training world under {work} and no {report} to render it from (pass --work: the build's "
            "work folder)"
        )
    from sceneworld.dataset import write_dataset

    seed = int(json.loads(report.read_text(encoding="utf-8"))["seed"])
    p = get_preset(preset)
    print(f"rendering the training world (seed {seed}, {p.train_images} images) under {work}", flush=True)
    write_dataset(work / "data" / "train", images=p.train_images, seed=seed, image_size=p.image_size)


def register_probe_sets(
    repo: Path, entries: Sequence[ProbeSetEntry], manifest: Manifest | None = None
) -> list[ProbeSetEntry]:
    """List ``entries`` (probe sets already written under ``repo``) in its probe index
    (``<repo>/probes/index.json``; manifest.json is left as it is), replacing entries of the same names:
    a running gateway serves them (``GET /v1/probe-sets``, ``probe_set`` of ``POST /v1/probes``) once it
    sees the repository change (``COMPCAP_REPO_WATCH_S``) or is told to (``POST /v1/admin/reload``).
    Returns the index written."""
    repo = Path(repo)
    if manifest is None:
        load_manifest(repo)  # it is a model repository
    for entry in entries:
        if Path(entry.path).is_absolute() or ".." in Path(entry.path).parts:
            raise ValueError(f"probe set {entry.name!r}: path {entry.path!r} is not inside the repository")
    names = {e.name for e in entries}
    index = [e for e in load_probe_index(repo) if e.name not in names] + list(entries)
    _replace(repo / PROBE_INDEX, ProbeIndex(probe_sets=index).model_dump_json(indent=2))
    return index


def write_manifest(repo: Path, manifest: Manifest) -> None:
    """Replace ``<repo>/manifest.json`` atomically."""
    _replace(Path(repo) / MANIFEST_NAME, manifest.model_dump_json(indent=2))


def _replace(path: Path, text: str) -> None:
    """Write ``path`` atomically: a reader (a running gateway) sees the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
