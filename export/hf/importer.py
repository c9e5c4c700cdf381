"""``compcap import hf``: add a user's ``transformers`` captioner to a model repository, from a snapshot
directory on disk, nothing fetched.

Steps: read the snapshot (``snapshot``), load it offline, export its two graphs (``ved``: the encoder
with the image processor's normalisation inside, the step of the model contract) with ``torch.onnx``,
check each against the transformers module on onnxruntime (max abs difference ≤ ``PARITY_TOLERANCE``
on several batch shapes), copy its ``tokenizer.json``, then write the Triton configs and the manifest
entry (contract version 2). Everything is staged in a folder of its own inside the repository and moved
into place only once it all checked out; the manifest is replaced last, in one ``os.replace``, so a
failed import leaves the repository as it was. Importing a name again replaces that captioner."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from export.hf.snapshot import Snapshot, SnapshotError, offline, read_snapshot
from export.hf.ved import Encoder, Step
from export.onnx import GraphSpec, export_graph, parity
from export.repo import config_pbtxt, parse_config
from service.manifest import (
    MANIFEST_NAME,
    CaptionerEntry,
    HeldOutPair,
    Manifest,
    ModelEntry,
    Preprocessing,
    TensorSpec,
    TokenizerSpec,
    Training,
    load_manifest,
)

PARITY_TOLERANCE = 1e-4
PER_IMAGE_MAX_BATCH = 64
NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789_")
RESAMPLE = {0: "nearest", 2: "bilinear", 3: "bicubic"}  # PIL's codes in preprocessor_config.json


class HfImportError(RuntimeError):
    """An import that cannot go on; the message names what is wrong. The repository is unchanged."""


@dataclass
class ImportReport:
    name: str
    architecture: str
    parity: dict[str, float] = field(default_factory=dict)  # graph → max abs difference
    files: list[str] = field(default_factory=list)


def _preprocessing(snapshot: Snapshot) -> Preprocessing:
    path = snapshot.path / "preprocessor_config.json"
    if not path.is_file():
        raise SnapshotError(f"{snapshot.path}: no preprocessor_config.json (the image processor)")
    config = json.loads(path.read_text(encoding="utf-8"))
    size = config.get("size") or {}
    if not {"height", "width"} <= set(size):
        raise SnapshotError(f"{path}: size must give height and width, got {size!r}")
    rescale = float(config.get("rescale_factor", 1 / 255)) if config.get("do_rescale", True) else 1.0
    normalise = config.get("do_normalize", True)
    return Preprocessing(
        height=int(size["height"]),
        width=int(size["width"]),
        resample=RESAMPLE.get(int(config.get("resample", 2)), "bilinear"),  # type: ignore[arg-type]
        rescale=rescale,
        mean=[float(m) for m in config.get("image_mean", [0.0] * 3)] if normalise else [0.0] * 3,
        std=[float(s) for s in config.get("image_std", [1.0] * 3)] if normalise else [1.0] * 3,
    )


def _token_ids(model: Any) -> tuple[int, int, int, int]:
    """(decoder start, end, padding, longest sequence in tokens) from the generation config."""
    gen, config = model.generation_config, model.config
    start = (
        gen.decoder_start_token_id
        if gen.decoder_start_token_id is not None
        else config.decoder_start_token_id
    )
    eos = gen.eos_token_id if gen.eos_token_id is not None else config.decoder.eos_token_id
    if isinstance(eos, list):
        eos = eos[0]
    pad = gen.pad_token_id if gen.pad_token_id is not None else config.pad_token_id
    if start is None or eos is None:
        raise SnapshotError("the snapshot's generation config names no decoder_start_token_id / eos_token_id")
    return int(start), int(eos), int(pad if pad is not None else eos), int(gen.max_length or 20)


def _check_name(name: str) -> None:
    if not name or not set(name) <= NAME_CHARS or not name[0].isalpha():
        raise HfImportError(f"--name {name!r}: lower-case letters, digits and '_', starting with a letter")


def _held_out(path: Path | None) -> list[HeldOutPair]:
    if path is None:
        return []
    try:
        pairs = json.loads(Path(path).read_text(encoding="utf-8"))
        return [HeldOutPair.model_validate(p) for p in pairs]
    except (OSError, ValueError) as exc:
        raise HfImportError(
            f"--held-out-pairs {path}: not a JSON list of {{kind, modifier, noun}} ({exc})"
        ) from None


def import_hf(
    snapshot_dir: str | Path, name: str, repo: str | Path, held_out_pairs: Path | None = None, seed: int = 0
) -> ImportReport:
    """Import the snapshot as captioner ``name`` of ``repo`` (see module docstring)."""
    repo = Path(repo)
    _check_name(name)
    snapshot = read_snapshot(snapshot_dir)
    manifest = load_manifest(repo)
    clashes = {m.name for m in manifest.models if m.owner != name} & {f"{name}_encoder", f"{name}_step"}
    if name in {r.name for r in manifest.rankers} or clashes:
        raise HfImportError(f"--name {name!r}: the repository has a model of that name already")
    held = _held_out(held_out_pairs)
    stage = repo / f".import-{name}"
    shutil.rmtree(stage, ignore_errors=True)
    try:
        entry, models, report = _export(snapshot, name, stage, held, seed)
        _commit(repo, manifest, stage, entry, models)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return report


def _export(
    snapshot: Snapshot, name: str, stage: Path, held: list[HeldOutPair], seed: int
) -> tuple[CaptionerEntry, list[ModelEntry], ImportReport]:
    with offline():
        from transformers import VisionEncoderDecoderModel

        model = VisionEncoderDecoderModel.from_pretrained(
            str(snapshot.path), local_files_only=True, attn_implementation="eager"
        ).eval()
    tokenizer_file = snapshot.path / "tokenizer.json"
    if not tokenizer_file.is_file():
        raise SnapshotError(f"{snapshot.path}: no tokenizer.json (CompCap reads fast tokenizers only)")
    pre = _preprocessing(snapshot)
    start, eos, pad, max_tokens = _token_ids(model)
    early = model.generation_config.early_stopping  # True, False or "never" (read as False)
    vocab_size = int(model.config.decoder.vocab_size)
    report = ImportReport(name, snapshot.architecture)
    rng = np.random.default_rng(seed)
    encoder, step = Encoder(model, pre.rescale, pre.mean, pre.std), Step(model)
    images = [
        torch.from_numpy(rng.integers(0, 256, (b, pre.height, pre.width, 3), dtype=np.uint8)) for b in (2, 3)
    ]
    with torch.no_grad():
        memory, _ = encoder(images[0])
    m, d = int(memory.shape[1]), int(memory.shape[2])
    batch = {0: "batch"}
    enc_path = stage / f"{name}_encoder" / "1" / "model.onnx"
    export_graph(
        encoder,
        encoder.forward,
        GraphSpec(
            {"image": images[0]}, ["memory", "state"], {"image": batch, "memory": batch, "state": batch}
        ),
        enc_path,
    )
    report.parity[f"{name}_encoder"] = max(
        parity(encoder, encoder.forward, enc_path, {"image": im}) for im in images
    )

    def rows(n: int, t: int) -> dict[str, torch.Tensor]:
        tokens = torch.from_numpy(rng.integers(0, vocab_size, (n, t)))
        tokens[:, 0] = start
        return {
            "memory": memory,
            "image_index": torch.from_numpy(rng.integers(0, len(memory), n)),
            "tokens": tokens,
            "length": torch.from_numpy(rng.integers(1, t + 1, n)),
            "state": torch.zeros(n, 1),
        }

    trials = [rows(5, 4), rows(3, 1), rows(7, 9)]
    step_path = stage / f"{name}_step" / "1" / "model.onnx"
    dynamic = {
        "memory": {0: "images"},
        "image_index": {0: "rows"},
        "tokens": {0: "rows", 1: "t"},
        "length": {0: "rows"},
        "state": {0: "rows"},
        "logprobs": {0: "rows"},
        "state_out": {0: "rows"},
        "attention": {0: "rows"},
    }
    export_graph(
        step, step.forward, GraphSpec(trials[0], ["logprobs", "state_out", "attention"], dynamic), step_path
    )
    report.parity[f"{name}_step"] = max(parity(step, step.forward, step_path, t) for t in trials)
    for graph, diff in report.parity.items():
        if not diff <= PARITY_TOLERANCE:
            raise HfImportError(
                f"{graph}: transformers vs onnxruntime max abs diff {diff:.2e} > {PARITY_TOLERANCE}"
            )
    tokenizers_dir = stage / "tokenizers"
    tokenizers_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tokenizer_file, tokenizers_dir / f"{name}.json")
    models = [
        ModelEntry(
            name=f"{name}_encoder",
            role="captioner_encoder",
            owner=name,
            max_batch_size=PER_IMAGE_MAX_BATCH,
            inputs=[TensorSpec(name="image", dtype="UINT8", dims=[pre.height, pre.width, 3])],
            outputs=[
                TensorSpec(name="memory", dtype="FP32", dims=[m, d]),
                TensorSpec(name="state", dtype="FP32", dims=[1]),
            ],
        ),
        ModelEntry(
            name=f"{name}_step",
            role="captioner_step",
            owner=name,
            max_batch_size=0,
            inputs=[
                TensorSpec(name="memory", dtype="FP32", dims=[-1, m, d]),
                TensorSpec(name="image_index", dtype="INT64", dims=[-1]),
                TensorSpec(name="tokens", dtype="INT64", dims=[-1, -1]),
                TensorSpec(name="length", dtype="INT64", dims=[-1]),
                TensorSpec(name="state", dtype="FP32", dims=[-1, 1]),
            ],
            outputs=[
                TensorSpec(name="logprobs", dtype="FP32", dims=[-1, vocab_size]),
                TensorSpec(name="state_out", dtype="FP32", dims=[-1, 1]),
                TensorSpec(name="attention", dtype="FP32", dims=[-1, m]),
            ],
        ),
    ]
    entry = CaptionerEntry(
        name=name,
        architecture=snapshot.architecture,
        init=f"{name}_encoder",
        step=f"{name}_step",
        reads="prefix",
        memory_dims=[m, d],
        state_dim=1,
        max_length=max(1, max_tokens - 1),  # generate's max_length counts the start token
        search="transformers",
        early_stopping=early is True,
        training=Training(
            split="external", held_out_pairs=held, dataset=f"transformers snapshot {snapshot.path.name}"
        ),
        image=pre,
        tokens=TokenizerSpec(
            file=f"tokenizers/{name}.json", size=vocab_size, bos_id=start, eos_id=eos, pad_id=pad
        ),
        source=f"transformers {snapshot.model_type} snapshot {snapshot.path.resolve()}",
    )
    for model_entry in models:
        text = config_pbtxt(model_entry)
        parse_config(text)
        (stage / model_entry.name / "config.pbtxt").write_text(text, encoding="utf-8")
    report.files = [f"{name}_encoder/", f"{name}_step/", f"tokenizers/{name}.json"]
    return entry, models, report


def _commit(
    repo: Path, manifest: Manifest, stage: Path, entry: CaptionerEntry, models: list[ModelEntry]
) -> None:
    """Move the staged files into ``repo`` and replace the manifest (the last step)."""
    kept_models = [m for m in manifest.models if m.owner != entry.name]
    kept_caps = [c for c in manifest.captioners if c.name != entry.name]
    updated = Manifest.model_validate(
        {
            **manifest.model_dump(),
            "format_version": 2,
            "models": [m.model_dump() for m in [*kept_models, *models]],
            "captioners": [c.model_dump() for c in [*kept_caps, entry]],
        }
    )
    backup = stage / ".previous"
    tokenizer = Path("tokenizers") / f"{entry.name}.json"
    moved: list[tuple[Path, Path | None]] = []
    try:
        for relative in [*(Path(m.name) for m in models), tokenizer]:
            target = repo / relative
            previous = None
            if target.exists():
                previous = backup / relative
                previous.parent.mkdir(parents=True, exist_ok=True)
                target.rename(previous)
            target.parent.mkdir(parents=True, exist_ok=True)
            (stage / relative).rename(target)
            moved.append((target, previous))
        tmp = repo / f".{MANIFEST_NAME}.tmp"
        tmp.write_text(updated.model_dump_json(indent=2), encoding="utf-8")
        os.replace(tmp, repo / MANIFEST_NAME)
    except BaseException:
        for target, previous in reversed(moved):
            if target.is_dir():
                shutil.rmtree(target, ignore_errors=True)
            else:
                target.unlink(missing_ok=True)
            if previous is not None:
                previous.rename(target)
        raise


__all__ = ["HfImportError", "ImportReport", "import_hf"]
