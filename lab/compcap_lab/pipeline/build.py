"""``compcap-lab build``: SceneWorld data → trained encoder, BUTD, BUTR and VSE++ → ONNX (parity-checked) →
Triton repository with ``manifest.json`` and the probe sets (``probes/<kind>/``, from a world seed of
their own, ``export.probesets``). Writes ``build_report.json`` beside the manifest."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from torch import nn

from compcap_lab.training.train import (
    TrainLog,
    Validation,
    extract_regions,
    train_captioner,
    train_visual_encoder,
    train_vsepp,
)
from export.data.coco_captions import load_folder
from export.data.splits import Split, build_split, split_dir_for, write_split
from export.models.architectures import ARCHITECTURES, Architecture
from export.packaging.package import TrainedRanker, architecture_entries, export_repository
from export.packaging.quality import evaluate_repository
from export.presets import Preset, get_preset
from export.probesets.repo import preset_probe_sets
from sceneworld import labels as world_labels
from sceneworld.dataset import GENERATOR, TEST_SEED_OFFSET, load_dataset, write_dataset
from service.manifest import HeldOutPair, Manifest, Training
from service.text.vocabulary import Vocabulary

QUALITY_RUNS: list[tuple[str, str | None]] = [
    ("butd", None),
    ("butr", None),
    ("butr", "butr"),
    ("butd", "vsepp"),
]
console = Console(stderr=True)


def training_worlds(work: Path, preset: Preset, seed: int) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The training and test worlds under ``<work>/data`` (rendered where missing or stale), loaded."""
    train_dir, test_dir = work / "data" / "train", work / "data" / "test"
    for folder, n, s in (
        (train_dir, preset.train_images, seed),
        (test_dir, preset.test_images, seed + TEST_SEED_OFFSET),
    ):
        if not _is_current(folder, n, s):
            shutil.rmtree(folder, ignore_errors=True)
            write_dataset(folder, images=n, seed=s, image_size=preset.image_size)
    return load_dataset(train_dir), load_dataset(test_dir)


def _is_current(folder: Path, images: int, seed: int) -> bool:
    """Whether ``folder`` holds a dataset of this generator version, seed and size (else it is rebuilt)."""
    try:
        info = json.loads((folder / "captions.json").read_text(encoding="utf-8"))["info"]
    except (OSError, ValueError, KeyError):
        return False
    return bool(
        info.get("generator") == GENERATOR and info.get("seed") == seed and info.get("images") == images
    )


def cell_label_arrays(graphs: list[dict[str, Any]], preset: Preset) -> dict[str, np.ndarray]:
    """Per-cell scene labels of every image (the visual encoder's targets), stacked per label kind."""
    cells = [world_labels.cell_labels(g, preset.grid, preset.image_size) for g in graphs]
    return {k: np.stack([c[k] for c in cells]) for k in cells[0]}


def label_sizes() -> dict[str, int]:
    return {
        "noun": len(world_labels.NOUN_LABELS),
        "colour": len(world_labels.COLOUR_LABELS),
        "size": len(world_labels.SIZE_LABELS),
        "action": len(world_labels.ACTION_LABELS),
    }


def train_models(data: Path, preset: str, out: Path, seed: int = 0) -> dict[str, Any]:
    """``compcap-lab train``: train every model on a SceneWorld dataset folder (captioners and rankers on the
    preset's held-out split of it, captioners selected on its val set) and save torch checkpoints."""
    p = get_preset(preset)
    images, captions, graphs, ids = load_dataset(data)
    split = training_split(data, p.held_out_group, seed)
    trained = _train_all(images, captions, graphs, ids, split, p, seed, dataset=str(data))
    out.mkdir(parents=True, exist_ok=True)
    torch.save(trained["encoder"].state_dict(), out / "encoder.pt")
    for item in [*trained["captioners"], *trained["rankers"]]:
        torch.save(item.model.state_dict(), out / f"{item.name}.pt")
    trained["vocab"].save(out / "vocab.json")
    return trained


def training_record(split: Split | None, images: int, log: TrainLog, dataset: str) -> Training:
    """What a model was trained on, for the manifest: the split (or "full") and its held-out pairs, and
    which epoch validation selected."""
    common: dict[str, Any] = {
        "dataset": dataset,
        "images": images,
        "epochs": log.epochs,
        "seconds": round(log.seconds, 1),
        "max_epochs": log.max_epochs or None,
        "selected_epoch": log.selected_epoch,
        "val_bleu4": [round(b, 6) for b in log.val_bleu4],
        "val_images": log.val_images,
    }
    if split is None or split.kind == "full":
        return Training(split="full", **common)
    pairs = [HeldOutPair(kind=p.kind, modifier=p.modifier, noun=p.noun) for p in split.pairs]  # type: ignore[arg-type]
    return Training(split=f"{split.kind}/{split.group}", held_out_pairs=pairs, **common)


def training_split(train_dir: Path, group: int | None, seed: int) -> Split:
    """The systematicity split of group ``group`` of the training world, or (``group`` None) the "full"
    split (nothing held out; a random 10% val and 10% test), written to
    ``<train_dir>/splits/systematicity_<group>`` or ``<train_dir>/splits/full``."""
    dataset = load_folder(train_dir)
    if group is None:
        split = build_split(dataset, "full", seed=seed)
        write_split(split, split_dir_for(train_dir, "full", None))
        return split
    split = build_split(dataset, "systematicity", group=group, seed=seed)  # scene-graph pairs: no parser
    write_split(split, split_dir_for(train_dir, "systematicity", group))
    return split


def validation_set(
    split: Split, position: dict[int, int], regions: torch.Tensor, captions: list[list[str]], limit: int
) -> Validation:
    """The first ``limit`` images of the split's val set (``position``: image id → row of ``regions``)."""
    rows = [position[i] for i in split.sets["val"][:limit]]
    return Validation(regions[rows], [captions[r] for r in rows])


def _train_all(
    images: np.ndarray,
    captions: list[list[str]],
    graphs: list[dict[str, Any]],
    ids: list[int],
    split: Split,
    p: Preset,
    seed: int,
    dataset: str,
) -> dict[str, Any]:
    """The encoder learns from every image's scene graph (no captions); captioners and rankers learn from
    the captions of the split's training images only, so they never see a held-out pair; captioners are
    selected on the split's val images (held-out-pair images for systematicity)."""
    encoder, enc_log = train_visual_encoder(images, cell_label_arrays(graphs, p), label_sizes(), p, seed)
    all_regions = extract_regions(encoder, images)
    position = {image_id: i for i, image_id in enumerate(ids)}
    val = validation_set(split, position, all_regions, captions, p.val_images)
    rows = np.array([position[i] for i in split.sets["train"]])
    regions, captions = all_regions[rows], [captions[i] for i in rows]
    vocab = Vocabulary.build(c for caps in captions for c in caps)
    butd, butr = ARCHITECTURES["butd"], ARCHITECTURES["butr"]
    butd_model, butd_log = _train(butd, regions, captions, vocab, p, seed + 1, val)
    butr_model, butr_log = _train(butr, regions, captions, vocab, p, seed + 2, val)
    vsepp, vsepp_log = train_vsepp(regions, captions, vocab, p, seed + 3)

    def record(log: TrainLog) -> Training:
        return training_record(split, len(captions), log, dataset)

    butr_captioner, butr_rankers = architecture_entries(butr, butr.name, butr_model, record(butr_log))
    butd_captioner, butd_rankers = architecture_entries(butd, butd.name, butd_model, record(butd_log))
    return {
        "vocab": vocab,
        "encoder": encoder,
        "captioners": [butr_captioner, butd_captioner],
        "rankers": [
            *butr_rankers,
            *butd_rankers,
            TrainedRanker("vsepp", "VSE++", vsepp, record(vsepp_log)),
        ],
        "logs": {"visual_encoder": enc_log, "butd": butd_log, "butr": butr_log, "vsepp": vsepp_log},
    }


def _train(
    arch: Architecture,
    regions: torch.Tensor,
    captions: list[list[str]],
    vocab: Vocabulary,
    p: Preset,
    seed: int,
    val: Validation,
) -> tuple[nn.Module, TrainLog]:
    """A fresh ``arch`` captioner (initialised with ``seed``) trained on ``regions`` [N, R, D] and their
    ``captions``, selected on ``val``; its progress bar and log are named after the architecture."""
    torch.manual_seed(seed)
    model = arch.build(len(vocab), regions.size(-1), regions.size(1), p)
    rate = arch.learning_rate(p)
    log = train_captioner(
        model, regions, captions, vocab, p, seed, arch.name, rank=arch.ranks, learning_rate=rate, val=val
    )
    return model, log


def build_repo(out: Path, preset: str = "default", seed: int = 0, work: str | Path | None = None) -> Manifest:
    """Generate data, train, export and write a complete repository at ``out``."""
    p = get_preset(preset)
    started = time.perf_counter()
    work_dir = Path(work) if work else out.with_name(out.name + ".work")
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    (train_images, train_captions, train_graphs, train_ids), (test_images, test_captions, _, _) = (
        training_worlds(work_dir, p, seed)
    )
    timings["world"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    dataset = f"sceneworld(seed={seed}, images={p.train_images})"
    split = training_split(work_dir / "data" / "train", p.held_out_group, seed)
    trained = _train_all(train_images, train_captions, train_graphs, train_ids, split, p, seed, dataset)
    timings["train"] = time.perf_counter() - t0
    staging = out.with_name(out.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    t0 = time.perf_counter()
    manifest, checks = export_repository(
        staging,
        p,
        trained["encoder"],
        trained["vocab"],
        trained["captioners"],
        trained["rankers"],
        test_images,
        default_captioner="butr",
    )
    timings["export"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    n_eval = min(p.eval_images, len(test_images))
    quality = evaluate_repository(staging, test_images[:n_eval], test_captions[:n_eval], QUALITY_RUNS)
    timings["quality"] = time.perf_counter() - t0
    for cap in manifest.captioners:
        served = quality[f"{cap.name}+{cap.ranker}" if cap.ranker else cap.name]
        cap.quality = {k: float(v) for k, v in served.items() if k in ("bleu4", "cider_d")}
        cap.quality["test_images"] = float(n_eval)
    t0 = time.perf_counter()
    position = {image_id: k for k, image_id in enumerate(train_ids)}
    refs = [train_captions[position[i]] for i in split.sets["train"]]
    name = split.kind if split.group is None else f"{split.kind}/{split.group}"
    about = f"{name} split train set of the training world ({len(refs)} images)"
    manifest.probe_sets = preset_probe_sets(staging, p, seed, refs, about)
    timings["probes"] = time.perf_counter() - t0
    (staging / "manifest.json").write_text(manifest.model_dump_json(indent=2), encoding="utf-8")
    timings["total"] = time.perf_counter() - started
    logs: dict[str, TrainLog] = trained["logs"]
    report: dict[str, Any] = {
        "preset": p.name,
        "seed": seed,
        "timings_s": {k: round(v, 1) for k, v in timings.items()},
        "parity_max_abs_diff": checks,
        "training": training_summary(logs),
        "test": {"images": len(test_images), "evaluated": n_eval, "seed": seed + TEST_SEED_OFFSET},
        "quality": quality,
    }
    (staging / "build_report.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    install_repository(staging, out)
    console.print(
        f"[green]built {out}[/] in {report['timings_s']['total']} s; parity max {max(checks.values()):.1e}"
    )
    return manifest


def training_summary(logs: dict[str, TrainLog]) -> dict[str, Any]:
    """``build_report.json`` "training": per model its time, last loss, task weights and model selection
    (epochs run, cap, selected epoch, val BLEU-4 after each epoch)."""
    return {
        k: {
            "seconds": round(v.seconds, 1),
            "final_loss": v.losses[-1] if v.losses else None,
            **v.extra,
            **v.selection(),
        }
        for k, v in logs.items()
    }


def install_repository(staging: Path, out: Path) -> None:
    """Move the staged repository into ``out``: model folders of an earlier build are removed, anything
    not generated (e.g. the tracked README) is kept."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.iterdir():
        if old.is_dir() and (old / "config.pbtxt").is_file():
            shutil.rmtree(old)
    for child in staging.iterdir():
        target = out / child.name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
        shutil.move(str(child), str(target))
    staging.rmdir()
