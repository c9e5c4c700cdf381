"""``compcap import hf``: add a user's ``transformers`` captioner to a model repository, from a snapshot
directory on disk, nothing fetched.

Steps: read the snapshot (``snapshot``), load it offline and wrap it as its architecture's module does
(``adapter``; ``ved``: the encoder with the image processor's normalisation inside, the step of the
model contract), export the two graphs with ``torch.onnx``, check each against the transformers module
on onnxruntime (max abs difference ≤ ``PARITY_TOLERANCE`` on several batch shapes), keep one of the
step's three forms (``export.hf.step_choice``: plain, image cache, or the key/value cache of contract
v3, ``export.hf.kv_step``, whose graph is also checked over a whole beam decode against the plain
step; its encoder's ``state`` is then the cache's zeros [B, S]), write their torch.export programs for
gradient explanations (``export.hf.imported_programs``: the encoder and the plain step, whatever form the
graph has — explanations score whole captions), copy its ``tokenizer.json``, then write the Triton configs
and the manifest entry (contract version 2; a kv step adds ``state_new`` / ``state_index`` inputs,
``state_dim`` S and ``kv_cache``). Everything is staged in a folder of its own inside the repository and moved
into place only once it all checked out; the manifest is replaced last, in one ``os.replace``, so a
failed import leaves the repository as it was. Importing a name again replaces that captioner."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
import torch

from export.hf.adapter import adapt, preprocessing
from export.hf.architecture import Adapted
from export.hf.architectures import read_snapshot
from export.hf.fusion import FUSE_FORMS, FuseForm, choose_fused
from export.hf.imported_programs import MIN_TOKENS, write_programs
from export.hf.kv_step import CacheShape, KeyValueStep, ZeroState, decode_parity
from export.hf.single_caption import record_single_caption
from export.hf.snapshot import Snapshot
from export.hf.staging import HfImportError, ImportReport, commit, write_configs
from export.hf.step_choice import STEP_FORMS, StepForm, StepTiming, choose, timing_feeds
from export.models.step_contract import STEP_AXES, STEP_OUTPUTS
from export.packaging.onnx import GraphSpec, export_graph, parity
from export.packaging.programs import program_path
from export.packaging.topk import add_top_k_file
from service.engine.sparse import SPARSE_MIN_VOCAB
from service.manifest import (
    EXTERNAL_SPLIT,
    CaptionerEntry,
    HeldOutPair,
    ModelEntry,
    TensorSpec,
    TokenizerSpec,
    Training,
    load_manifest,
)

PARITY_TOLERANCE = 1e-4
PER_IMAGE_MAX_BATCH = 64
NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789_")


def _check_name(name: str) -> None:
    if not name or not set(name) <= NAME_CHARS or not name[0].isalpha():
        raise HfImportError(f"--name {name!r}: lower-case letters, digits and '_', starting with a letter")


def _held_out(path: Path | None) -> list[HeldOutPair] | None:
    """The declared held-out pairs (None: not declared; ``[]``: declared, none held out)."""
    if path is None:
        return None
    try:
        pairs = json.loads(Path(path).read_text(encoding="utf-8"))
        return [HeldOutPair.model_validate(p) for p in pairs]
    except (OSError, ValueError) as exc:
        raise HfImportError(
            f"--held-out-pairs {path}: not a JSON list of {{kind, modifier, noun}} ({exc})"
        ) from None


def import_hf(
    snapshot_dir: str | Path,
    name: str,
    repo: str | Path,
    held_out_pairs: Path | None = None,
    seed: int = 0,
    step_form: StepForm = "auto",
    programs: bool = True,
    top_k: bool | None = None,
    fuse: FuseForm = "auto",
) -> ImportReport:
    """Import the snapshot as captioner ``name`` of ``repo`` (see module docstring); ``step_form``: which
    step graph of a cross-attention captioner to keep (``export.hf.step_choice``); ``programs``: write
    the torch programs of gradient explanations (most of a small model's import time; without them
    ``/v1/explain`` answers the gradient methods with 501 ``programs_missing``, attention still works);
    ``top_k``: the step graph also returns each row's best words (``export.packaging.topk``; None: where its
    vocabulary has at least ``SPARSE_MIN_VOCAB`` words, as GPT-2's 50 257); ``fuse``: whether to keep the
    encoder and step graphs through onnxruntime's transformer optimizer (``export.hf.fusion``)."""
    if step_form not in STEP_FORMS:
        raise HfImportError(f"--step {step_form!r}: one of {', '.join(STEP_FORMS)}")
    if fuse not in FUSE_FORMS:
        raise HfImportError(f"--fuse {fuse!r}: one of {', '.join(FUSE_FORMS)}")
    repo = Path(repo)
    _check_name(name)
    snapshot = read_snapshot(snapshot_dir)
    manifest = load_manifest(repo)
    own = {f"{name}_encoder", f"{name}_step", f"{name}_image", f"{name}_text"}
    clashes = {m.name for m in manifest.models if m.owner != name} & own
    other = manifest.rankers if snapshot.role == "captioner" else manifest.captioners
    if name in {e.name for e in other} or clashes:
        raise HfImportError(f"--name {name!r}: the repository has a model of that name already")
    held = _held_out(held_out_pairs)
    stage = repo / f".import-{name}"
    shutil.rmtree(stage, ignore_errors=True)
    try:
        if snapshot.role == "ranker":
            from export.hf.ranker_export import export_ranker

            ranker, models, report = export_ranker(snapshot, name, stage, seed)
            commit(repo, manifest, stage, ranker, models)
        else:
            entry, models, report = _export(
                snapshot, name, stage, held, seed, step_form, programs, top_k, fuse
            )
            commit(repo, manifest, stage, entry, models)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    if snapshot.role == "captioner":  # once it serves: what its requests' deadline scales with
        report.single_caption_ms = record_single_caption(repo, name)
    return report


def _check(graph: str, diff: float) -> None:
    if not diff <= PARITY_TOLERANCE:
        raise HfImportError(
            f"{graph}: transformers vs onnxruntime max abs diff {diff:.2e} > {PARITY_TOLERANCE}"
        )


def _kv_trials(
    trials: list[dict[str, torch.Tensor]], shape: CacheShape, seed: int
) -> list[dict[str, torch.Tensor]]:
    """The step trials as the kv graph's inputs: prefixes cut to ``shape.slots``, each row's state drawn
    from a pool of the previous call's rows or from ``state_new`` (random slots: a trial checks the
    graph against transformers, whatever its cache holds)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for k, trial in enumerate(trials):
        rows = trial["tokens"].shape[0]
        pool, new = (rows + 1, 2) if k % 2 == 0 else (3, 0)  # 3, 0: a first call's (the contract's)
        out.append(
            {
                "memory": trial["memory"],
                "image_index": trial["image_index"],
                "tokens": trial["tokens"][:, : shape.slots],
                "length": trial["length"].clamp(max=shape.slots),
                "state": torch.randn(pool, shape.state_dim, generator=gen),
                "state_new": torch.randn(new, shape.state_dim, generator=gen),
                "state_index": torch.randint(0, pool + new, (rows,), generator=gen),
            }
        )
    return out


def _choose_step(
    adapted: Adapted,
    step_path: Path,
    trials: list[dict[str, torch.Tensor]],
    dynamic: dict[str, dict[int, str]],
    memory: torch.Tensor,
    form: StepForm,
    seed: int,
) -> tuple[StepTiming, float]:
    """Export the image-cache and kv steps the form asks for beside the plain one at ``step_path``
    (``export.hf.step_choice``), check each, time them, and put the one to keep at ``step_path``; the
    timing and the kept graph's parity (the plain one's is the caller's)."""
    outputs = ["logprobs", "state_out", "attention"]
    paths: dict[str, Path] = {}
    diffs: dict[str, float] = {}
    cached = adapted.cached_step
    if cached is not None and form in ("auto", "cached"):
        paths["cached"] = step_path.with_name("model.cached.onnx")
        export_graph(cached, cached.forward, GraphSpec(trials[0], outputs, dynamic), paths["cached"])
        diffs["cached"] = max(parity(cached, cached.forward, paths["cached"], t) for t in trials)
        _check("image-cache step", diffs["cached"])
    kv = adapted.kv_step
    state_dim = None
    if isinstance(kv, KeyValueStep) and form in ("auto", "kv"):
        paths["kv"] = step_path.with_name("model.kv.onnx")
        kv_trials = _kv_trials(trials, kv.shape, seed)
        kv_dynamic = {**dynamic, "state": {0: "pool"}, "state_new": {0: "new"}, "state_index": {0: "rows"}}
        export_graph(kv, kv.forward, GraphSpec(kv_trials[0], outputs, kv_dynamic), paths["kv"])
        diffs["kv"] = max(parity(kv, kv.forward, paths["kv"], t) for t in kv_trials)
        _check("kv step", diffs["kv"])
        decode = decode_parity(
            paths["kv"], adapted.step, memory, adapted.start, adapted.vocab_size, kv.shape, seed
        )
        _check("kv step over a beam decode (vs the plain step)", decode)
        diffs["kv"] = max(diffs["kv"], decode)
        state_dim = kv.state_dim
    m, d = int(memory.shape[1]), int(memory.shape[2])
    timing = choose(
        step_path,
        paths.get("cached"),
        (m, d),
        adapted.vocab_size,
        adapted.max_tokens,
        form,
        kv=paths.get("kv"),
        state_dim=state_dim,
    )
    for kept, path in paths.items():
        if kept == timing.kept:
            os.replace(path, step_path)
        else:
            path.unlink()
    return timing, diffs.get(timing.kept, 0.0)


def _export(
    snapshot: Snapshot,
    name: str,
    stage: Path,
    held: list[HeldOutPair] | None,
    seed: int,
    step_form: StepForm,
    programs: bool,
    top_k: bool | None = None,
    fuse: FuseForm = "auto",
) -> tuple[CaptionerEntry, list[ModelEntry], ImportReport]:
    tokenizer_file = snapshot.tokenizer_file()
    pre = preprocessing(snapshot)
    adapted = adapt(snapshot, pre)
    start, eos, pad, max_tokens = adapted.start, adapted.eos, adapted.pad, adapted.max_tokens
    vocab_size = adapted.vocab_size
    report = ImportReport(name, snapshot.architecture)
    rng = np.random.default_rng(seed)
    encoder, step = adapted.encoder, adapted.step
    images = [
        torch.from_numpy(rng.integers(0, 256, (b, pre.height, pre.width, 3), dtype=np.uint8)) for b in (2, 3)
    ]
    with torch.no_grad():
        memory, _ = encoder(images[0])
    m, d = int(memory.shape[1]), int(memory.shape[2])

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

    trials = [rows(5, 4), rows(3, 1), rows(7, min(9, max(2, max_tokens)))]
    step_path = stage / f"{name}_step" / "1" / "model.onnx"
    export_graph(step, step.forward, GraphSpec(trials[0], STEP_OUTPUTS, STEP_AXES), step_path)
    report.parity[f"{name}_step"] = max(parity(step, step.forward, step_path, t) for t in trials)
    if step_form == "kv" and not isinstance(adapted.kv_step, KeyValueStep):
        raise HfImportError(f"--step kv: a {snapshot.architecture} captioner has no key/value-cache step yet")
    if (adapted.cached_step is not None or adapted.kv_step is not None) and step_form != "plain":
        report.step, diff = _choose_step(adapted, step_path, trials, STEP_AXES, memory, step_form, seed)
        if report.step.kept != "plain":
            report.parity[f"{name}_step"] = diff
    kv = adapted.kv_step if report.step is not None and report.step.kept == "kv" else None
    state_dim = kv.state_dim if isinstance(kv, KeyValueStep) else 1
    # the encoder's state: the kv step's initial one (zeros [B, S]), else unused zeros [B, 1]
    graph_encoder = ZeroState(encoder, state_dim) if state_dim > 1 else encoder
    batch = {0: "batch"}
    enc_path = stage / f"{name}_encoder" / "1" / "model.onnx"
    export_graph(
        graph_encoder,
        graph_encoder.forward,
        GraphSpec(
            {"image": images[0]}, ["memory", "state"], {"image": batch, "memory": batch, "state": batch}
        ),
        enc_path,
    )
    report.parity[f"{name}_encoder"] = max(
        parity(graph_encoder, graph_encoder.forward, enc_path, {"image": im}) for im in images
    )
    for graph, diff in report.parity.items():
        _check(graph, diff)
    if adapted.fusion is not None and fuse != "off":  # after the parity check: against the checked graphs
        (enc_type, enc_heads, enc_width), (dec_type, dec_heads, dec_width) = adapted.fusion
        plain_feed, kv_feed, _ = timing_feeds(
            (m, d), vocab_size, max_tokens, state_dim if kv is not None else None
        )
        step_feed = kv_feed if kv_feed is not None else plain_feed
        report.fusions = [
            choose_fused(
                enc_path, {"image": images[0].numpy()}, enc_type, enc_heads, enc_width, fuse, PARITY_TOLERANCE
            ),
            choose_fused(step_path, step_feed, dec_type, dec_heads, dec_width, fuse, PARITY_TOLERANCE),
        ]
    report.top_k = vocab_size >= SPARSE_MIN_VOCAB if top_k is None else top_k
    if report.top_k:  # after the parity check: the outputs it adds are computed from logprobs
        add_top_k_file(step_path, eos)
    wide = [t for t in trials if t["tokens"].shape[1] >= MIN_TOKENS]
    if programs:
        report.programs = write_programs(encoder, step, images, wide, stage, name, max_tokens)
    tokenizers_dir = stage / "tokenizers"
    tokenizers_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tokenizer_file, tokenizers_dir / f"{name}.json")
    models = [
        ModelEntry(
            name=f"{name}_encoder",
            role="captioner_encoder",
            owner=name,
            max_batch_size=PER_IMAGE_MAX_BATCH,
            program=program_path(f"{name}_encoder") if programs else None,
            inputs=[TensorSpec(name="image", dtype="UINT8", dims=[pre.height, pre.width, 3])],
            outputs=[
                TensorSpec(name="memory", dtype="FP32", dims=[m, d]),
                TensorSpec(name="state", dtype="FP32", dims=[state_dim]),
            ],
        ),
        ModelEntry(
            name=f"{name}_step",
            role="captioner_step",
            owner=name,
            max_batch_size=0,
            program=program_path(f"{name}_step") if programs else None,
            inputs=[
                TensorSpec(name="memory", dtype="FP32", dims=[-1, m, d]),
                TensorSpec(name="image_index", dtype="INT64", dims=[-1]),
                TensorSpec(name="tokens", dtype="INT64", dims=[-1, -1]),
                TensorSpec(name="length", dtype="INT64", dims=[-1]),
                TensorSpec(name="state", dtype="FP32", dims=[-1, state_dim]),
                *(
                    [
                        TensorSpec(name="state_new", dtype="FP32", dims=[-1, state_dim]),
                        TensorSpec(name="state_index", dtype="INT64", dims=[-1]),
                    ]
                    if kv is not None
                    else []
                ),
                *([TensorSpec(name="top_k", dtype="INT64", dims=[1])] if report.top_k else []),
            ],
            outputs=[
                TensorSpec(name="logprobs", dtype="FP32", dims=[-1, vocab_size]),
                TensorSpec(name="state_out", dtype="FP32", dims=[-1, state_dim]),
                TensorSpec(name="attention", dtype="FP32", dims=[-1, m]),
                *(
                    [
                        TensorSpec(name="top_logprobs", dtype="FP32", dims=[-1, -1]),
                        TensorSpec(name="top_tokens", dtype="INT64", dims=[-1, -1]),
                        TensorSpec(name="eos_logprob", dtype="FP32", dims=[-1]),
                    ]
                    if report.top_k
                    else []
                ),
            ],
        ),
    ]
    # a ViT-like encoder's memory: its class token, then a square grid of patches (or the grid alone)
    grid = next((g for g in (math.isqrt(m - 1), math.isqrt(m)) if g > 1 and g * g in (m - 1, m)), None)
    entry = CaptionerEntry(
        name=name,
        architecture=snapshot.architecture,
        init=f"{name}_encoder",
        step=f"{name}_step",
        reads="prefix",
        memory_dims=[m, d],
        memory_grid=grid,
        memory_offset=m - grid * grid if grid else 0,
        state_dim=state_dim,
        max_length=max(1, max_tokens - 1),  # generate's max_length counts the start token
        search="transformers",
        early_stopping=adapted.early_stopping,
        image_cache=report.step is not None and report.step.kept in ("cached", "kv"),
        kv_cache=kv is not None,
        training=Training(
            split=EXTERNAL_SPLIT,
            held_out_pairs=held or [],
            held_out_declared=held is not None,
            dataset=f"transformers snapshot {snapshot.path.name}",
        ),
        image=pre,
        tokens=TokenizerSpec(
            file=f"tokenizers/{name}.json", size=vocab_size, bos_id=start, eos_id=eos, pad_id=pad
        ),
        source=f"transformers {snapshot.model_type} snapshot {snapshot.path.resolve()}",
    )
    write_configs(stage, models)
    report.files = [f"{name}_encoder/", f"{name}_step/", f"tokenizers/{name}.json"]
    report.files += [m.program for m in models if m.program]
    return entry, models, report


__all__ = ["HfImportError", "ImportReport", "import_hf"]
