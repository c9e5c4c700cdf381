"""``compcap build``: SceneWorld data → trained encoder, BUTD, BUTR and VSE++ → ONNX (parity-checked) →
Triton repository with ``manifest.json``. Writes ``build_report.json`` beside the manifest."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console

from export.models.butr import BUTR
from export.models.visual_encoder import VisualEncoder
from export.models.vsepp import VSEPP
from export.onnx import GraphSpec, export_graph, parity
from export.presets import Preset, get_preset
from export.quality import evaluate_repository
from export.repo import write_repository
from export.train import extract_regions, train_butr, train_visual_encoder, train_vsepp
from export.world import labels as world_labels
from export.world.dataset import load_dataset, write_dataset
from service.manifest import (
    CaptionerEntry,
    ImageSpec,
    Manifest,
    ModelEntry,
    RankerEntry,
    Role,
    TensorSpec,
    Training,
    VocabularySpec,
)
from service.text.vocabulary import Vocabulary

PARITY_TOLERANCE = 1e-4
TEST_SEED_OFFSET = 7919  # the test split is drawn from another world seed than training
QUALITY_RUNS: list[tuple[str, str | None]] = [
    ("butd", None),
    ("butr", None),
    ("butr", "butr"),
    ("butd", "vsepp"),
]
console = Console(stderr=True)


def _data(work: Path, preset: Preset, seed: int) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    train_dir, test_dir = work / "data" / "train", work / "data" / "test"
    for folder, n, s in (
        (train_dir, preset.train_images, seed),
        (test_dir, preset.test_images, seed + TEST_SEED_OFFSET),
    ):
        if not (folder / "captions.json").is_file():
            write_dataset(folder, images=n, seed=s, image_size=preset.image_size)
    return load_dataset(train_dir), load_dataset(test_dir)


def _cell_labels(graphs: list[dict[str, Any]], preset: Preset) -> dict[str, np.ndarray]:
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
    """``compcap train``: train every model on a SceneWorld dataset folder and save torch checkpoints."""
    p = get_preset(preset)
    images, captions, graphs, _ = load_dataset(data)
    trained = _train_all(images, captions, graphs, p, seed)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("encoder", "butd", "butr", "vsepp"):
        torch.save(trained[name].state_dict(), out / f"{name}.pt")
    trained["vocab"].save(out / "vocab.json")
    return trained


def _train_all(
    images: np.ndarray, captions: list[list[str]], graphs: list[dict[str, Any]], p: Preset, seed: int
) -> dict[str, Any]:
    vocab = Vocabulary.build(c for caps in captions for c in caps)
    encoder, enc_log = train_visual_encoder(images, _cell_labels(graphs, p), label_sizes(), p, seed)
    regions = extract_regions(encoder, images)
    butd, butd_log = train_butr(regions, captions, vocab, p, seed + 1, rank=False, desc="butd")
    butr, butr_log = train_butr(regions, captions, vocab, p, seed + 2, rank=True, desc="butr")
    vsepp, vsepp_log = train_vsepp(regions, captions, vocab, p, seed + 3)
    return {
        "vocab": vocab,
        "encoder": encoder,
        "butd": butd,
        "butr": butr,
        "vsepp": vsepp,
        "logs": {"visual_encoder": enc_log, "butd": butd_log, "butr": butr_log, "vsepp": vsepp_log},
    }


def _spec(name: str, dtype: str, dims: list[int]) -> TensorSpec:
    return TensorSpec(name=name, dtype=dtype, dims=dims)  # type: ignore[arg-type]


def _export_all(
    out: Path, trained: dict[str, Any], p: Preset, test_images: np.ndarray
) -> tuple[list[ModelEntry], dict[str, float]]:
    """Export every graph, check parity on random and real inputs; return manifest entries and parity."""
    encoder: VisualEncoder = trained["encoder"]
    vocab: Vocabulary = trained["vocab"]
    rng = np.random.default_rng(0)
    h = w = p.image_size
    r, d, v = p.grid * p.grid, p.region_dim, len(vocab)
    real_images = torch.from_numpy(test_images[:4])
    random_images = torch.from_numpy(rng.integers(0, 256, (3, h, w, 3), dtype=np.uint8))
    with torch.no_grad():
        real_regions = encoder(real_images)
    random_regions = torch.rand(3, r, d) * real_regions.max()
    entries: list[ModelEntry] = []
    checks: dict[str, float] = {}

    def add(
        name: str,
        role: Role,
        owner: str,
        module: torch.nn.Module,
        fn: Any,
        spec: GraphSpec,
        trials: list[dict[str, torch.Tensor]],
        dims: dict[str, list[int]],
        max_batch: int,
    ) -> None:
        path = out / name / "1" / "model.onnx"
        export_graph(module, fn, spec, path)
        checks[name] = max(parity(module, fn, path, t) for t in trials)
        if checks[name] > PARITY_TOLERANCE:
            raise RuntimeError(
                f"{name}: torch vs onnxruntime max abs difference {checks[name]:.2e} > {PARITY_TOLERANCE}"
            )
        dtype = {torch.uint8: "UINT8", torch.int64: "INT64", torch.float32: "FP32"}
        batched = max_batch > 0
        inputs = [_spec(k, dtype[t.dtype], dims[k]) for k, t in spec.inputs.items()]
        outputs = [_spec(k, "INT64" if k == "tokens" else "FP32", dims[k]) for k in spec.outputs]
        entries.append(
            ModelEntry(
                name=name,
                role=role,
                owner=owner,
                inputs=inputs,
                outputs=outputs,
                max_batch_size=max_batch if batched else 0,
            )
        )

    batch = {0: "batch"}
    add(
        "visual_encoder",
        "visual_encoder",
        "",
        encoder,
        encoder.forward,
        GraphSpec({"image": real_images}, ["regions"], {"image": batch, "regions": batch}),
        [{"image": real_images}, {"image": random_images}],
        {"image": [h, w, 3], "regions": [r, d]},
        64,
    )

    def tokens_for(n: int, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        tok = torch.from_numpy(rng.integers(4, v, (n, t)))
        tok[:, 0] = vocab.bos_id
        length = torch.from_numpy(rng.integers(1, t + 1, n))
        return tok, length

    for cap in ("butd", "butr"):
        model: BUTR = trained[cap]
        mem_dims = [r, p.joint_dim]
        add(
            f"{cap}_init",
            "captioner_init",
            cap,
            model,
            model.init,
            GraphSpec(
                {"regions": real_regions},
                ["memory", "state"],
                {"regions": batch, "memory": batch, "state": batch},
            ),
            [{"regions": real_regions}, {"regions": random_regions}],
            {"regions": [r, d], "memory": mem_dims, "state": [model.state_dim]},
            64,
        )
        with torch.no_grad():
            memory, _ = model.init(real_regions)
        step_trials = []
        for n, t in ((5, 1), (7, 4)):
            tok, length = tokens_for(n, t)
            index = torch.from_numpy(rng.integers(0, len(memory), n))
            step_trials.append(
                {
                    "memory": memory,
                    "image_index": index,
                    "tokens": tok,
                    "length": length,
                    "state": torch.randn(n, model.state_dim) * 0.5,
                }
            )
        dyn = {
            "memory": {0: "images"},
            "image_index": {0: "rows"},
            "tokens": {0: "rows", 1: "steps"},
            "length": {0: "rows"},
            "state": {0: "rows"},
            "logprobs": {0: "rows"},
            "state_out": {0: "rows"},
            "attention": {0: "rows"},
        }
        add(
            f"{cap}_step",
            "captioner_step",
            cap,
            model,
            model.step,
            GraphSpec(step_trials[1], ["logprobs", "state_out", "attention"], dyn),
            step_trials,
            {
                "memory": [-1, *mem_dims],
                "image_index": [-1],
                "tokens": [-1, -1],
                "length": [-1],
                "state": [-1, model.state_dim],
                "logprobs": [-1, v],
                "state_out": [-1, model.state_dim],
                "attention": [-1, r],
            },
            0,
        )

    for ranker in ("butr", "vsepp"):
        rmodel: BUTR | VSEPP = trained[ranker]
        add(
            f"{ranker}_image",
            "ranker_image",
            ranker,
            rmodel,
            rmodel.image_embedding,
            GraphSpec({"regions": real_regions}, ["embedding"], {"regions": batch, "embedding": batch}),
            [{"regions": real_regions}, {"regions": random_regions}],
            {"regions": [r, d], "embedding": [p.joint_dim]},
            64,
        )
        text_trials = []
        for n, t in ((3, 6), (5, 11)):
            tok, length = tokens_for(n, t)
            text_trials.append({"tokens": tok, "length": length.view(-1, 1)})
        add(
            f"{ranker}_text",
            "ranker_text",
            ranker,
            rmodel,
            rmodel.text_embedding,
            GraphSpec(
                text_trials[1],
                ["embedding"],
                {"tokens": {0: "batch", 1: "tokens"}, "length": batch, "embedding": batch},
            ),
            text_trials,
            {"tokens": [-1], "length": [1], "embedding": [p.joint_dim]},
            64,
        )
    return entries, checks


def build_repo(out: Path, preset: str = "default", seed: int = 0, work: str | Path | None = None) -> Manifest:
    """Generate data, train, export and write a complete repository at ``out``."""
    p = get_preset(preset)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    started = time.perf_counter()
    work_dir = Path(work) if work else out.with_name(out.name + ".work")
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    (train_images, train_captions, train_graphs, _), (test_images, test_captions, _, _) = _data(
        work_dir, p, seed
    )
    timings["world"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    trained = _train_all(train_images, train_captions, train_graphs, p, seed)
    timings["train"] = time.perf_counter() - t0
    staging = out.with_name(out.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    t0 = time.perf_counter()
    entries, checks = _export_all(staging, trained, p, test_images)
    timings["export"] = time.perf_counter() - t0
    vocab: Vocabulary = trained["vocab"]
    vocab.save(staging / "vocab.json")
    logs = trained["logs"]
    training = {
        name: Training(
            split="full",
            held_out_pairs=[],
            dataset=f"sceneworld(seed={seed}, images={p.train_images})",
            images=p.train_images,
            epochs=logs[name].epochs,
            seconds=round(logs[name].seconds, 1),
        )
        for name in ("butd", "butr", "vsepp")
    }
    state_dim = 4 * p.hidden_dim
    captioners = [
        CaptionerEntry(
            name=name,
            architecture=arch,
            init=f"{name}_init",
            step=f"{name}_step",
            reads="last_token",
            memory_dims=[p.grid * p.grid, p.joint_dim],
            state_dim=state_dim,
            max_length=p.max_length,
            ranker=ranker,
            training=training[name],
        )
        for name, arch, ranker in (("butr", "BUTR", "butr"), ("butd", "BUTD", None))
    ]
    rankers = [
        RankerEntry(
            name="butr",
            architecture="BUTR ranking head",
            image="butr_image",
            text="butr_text",
            embedding_dim=p.joint_dim,
            joint_with="butr",
            training=training["butr"],
        ),
        RankerEntry(
            name="vsepp",
            architecture="VSE++",
            image="vsepp_image",
            text="vsepp_text",
            embedding_dim=p.joint_dim,
            training=training["vsepp"],
        ),
    ]
    manifest = Manifest(
        preset=p.name,
        image=ImageSpec(height=p.image_size, width=p.image_size),
        vocabulary=VocabularySpec(size=len(vocab)),
        default_captioner="butr",
        models=entries,
        captioners=captioners,
        rankers=rankers,
    )
    write_repository(staging, manifest)
    t0 = time.perf_counter()
    n_eval = min(p.eval_images, len(test_images))
    quality = evaluate_repository(staging, test_images[:n_eval], test_captions[:n_eval], QUALITY_RUNS)
    timings["quality"] = time.perf_counter() - t0
    for cap in manifest.captioners:
        served = quality[f"{cap.name}+{cap.ranker}" if cap.ranker else cap.name]
        cap.quality = {k: float(v) for k, v in served.items() if k in ("bleu4", "cider_d")}
        cap.quality["test_images"] = float(n_eval)
    write_repository(staging, manifest)
    report: dict[str, Any] = {
        "preset": p.name,
        "seed": seed,
        "timings_s": {k: round(v, 1) for k, v in timings.items()},
        "parity_max_abs_diff": checks,
        "training": {
            k: {"seconds": round(v.seconds, 1), "final_loss": v.losses[-1] if v.losses else None, **v.extra}
            for k, v in logs.items()
        },
        "test": {"images": len(test_images), "evaluated": n_eval, "seed": seed + TEST_SEED_OFFSET},
        "quality": quality,
    }
    report["timings_s"]["total"] = round(time.perf_counter() - started, 1)
    (staging / "build_report.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    _install(staging, out)
    console.print(
        f"[green]built {out}[/] in {report['timings_s']['total']} s; parity max {max(checks.values()):.1e}"
    )
    return manifest


def _install(staging: Path, out: Path) -> None:
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
