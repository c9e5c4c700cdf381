"""Package trained models as a Triton repository: export every contract graph to ONNX, check parity
(torch vs onnxruntime ≤ 1e-4 on random and real inputs), and write configs, vocabulary and manifest.
Shared by ``compcap-lab build`` (the default repository) and the model zoo."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from export.models.architectures import Architecture, Reads
from export.models.visual_encoder import VisualEncoder
from export.packaging.onnx import GraphSpec, export_graph, parity
from export.packaging.programs import PROGRAM_TOLERANCE, export_program, padded_tokens, program_path
from export.packaging.state_gather import add_state_gather_file, v3_inputs
from export.packaging.triton_repo import write_repository
from export.presets import Preset
from service.manifest import (
    CaptionerEntry,
    DType,
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
PER_IMAGE_MAX_BATCH = 64
MAX_PROGRAM_BATCH = 4096  # rows a program accepts: integrated gradients' path steps × images
_DTYPES: dict[torch.dtype, DType] = {torch.uint8: "UINT8", torch.int64: "INT64", torch.float32: "FP32"}


@dataclass
class TrainedCaptioner:
    """A captioner with ``init(regions)`` and ``step(memory, image_index, tokens, length, state)``."""

    name: str
    architecture: str
    model: nn.Module
    reads: Reads
    training: Training
    ranker: str | None = None


@dataclass
class TrainedRanker:
    """A ranker with ``image_embedding(regions)`` and ``text_embedding(tokens, length)``."""

    name: str
    architecture: str
    model: nn.Module
    training: Training
    joint_with: str | None = None


def architecture_entries(
    arch: Architecture, name: str, model: nn.Module, training: Training
) -> tuple[TrainedCaptioner, list[TrainedRanker]]:
    """A trained ``arch`` captioner called ``name`` as the repository lists it, and the rankers it brings:
    its ranking head, a ranker of the same name joint with it, when the architecture ranks (else none)."""
    ranker = name if arch.ranks else None
    captioner = TrainedCaptioner(name, arch.display, model, arch.reads, training, ranker=ranker)
    if not arch.ranks:
        return captioner, []
    return captioner, [TrainedRanker(name, arch.ranker_display, model, training, joint_with=name)]


class _Exporter:
    """Exports graphs into ``out`` and collects manifest entries and parity figures."""

    def __init__(self, out: Path, programs: bool) -> None:
        self.out = out
        self.programs = programs
        self.entries: list[ModelEntry] = []
        self.parity: dict[str, float] = {}

    def add(
        self,
        name: str,
        role: Role,
        owner: str,
        module: nn.Module,
        fn: Callable[..., object],
        spec: GraphSpec,
        trials: Sequence[dict[str, torch.Tensor]],
        dims: dict[str, list[int]],
        max_batch: int,
        program: dict[str, int] | None = None,
        cast: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]] = dict,
        program_fn: Callable[..., object] | None = None,
    ) -> None:
        """``program``: also write the graph's torch.export program, its axes bounded by these maxima
        (inputs passed through ``cast`` first: the encoder's program takes float pixels), tracing
        ``program_fn`` instead of ``fn`` where given (same inputs and outputs)."""
        path = self.out / name / "1" / "model.onnx"
        export_graph(module, fn, spec, path)
        self.parity[name] = max(parity(module, fn, path, t) for t in trials)
        if self.parity[name] > PARITY_TOLERANCE:
            raise RuntimeError(
                f"{name}: torch vs onnxruntime max abs diff {self.parity[name]:.2e} > {PARITY_TOLERANCE}"
            )
        program_file = None
        if program is not None and self.programs:
            program_file = program_path(name)
            diff = export_program(
                module,
                program_fn or fn,
                cast(spec.inputs),
                spec.dynamic,
                self.out / program_file,
                [cast(t) for t in trials],
                program,
            )
            self.parity[f"{name}.pt2"] = diff
            if diff > PROGRAM_TOLERANCE:
                raise RuntimeError(f"{name}: torch.export program vs eager max abs diff {diff:.2e}")
        with torch.no_grad():
            produced = fn(*spec.inputs.values())
        outputs: list[torch.Tensor] = list(produced) if isinstance(produced, tuple) else [produced]  # type: ignore[list-item]
        self.entries.append(
            ModelEntry(
                name=name,
                role=role,
                owner=owner,
                max_batch_size=max_batch,
                inputs=[
                    TensorSpec(name=k, dtype=_DTYPES[t.dtype], dims=dims[k]) for k, t in spec.inputs.items()
                ],
                outputs=[
                    TensorSpec(name=k, dtype=_DTYPES[o.dtype], dims=dims[k])
                    for k, o in zip(spec.outputs, outputs, strict=True)
                ],
                program=program_file,
            )
        )


def export_repository(
    out: Path,
    preset: Preset,
    encoder: VisualEncoder,
    vocab: Vocabulary,
    captioners: Sequence[TrainedCaptioner],
    rankers: Sequence[TrainedRanker],
    real_images: np.ndarray,
    default_captioner: str,
    programs: bool = True,
) -> tuple[Manifest, dict[str, float]]:
    """Write every graph, config, ``vocab.json`` and ``manifest.json`` into ``out``; return the manifest
    and the parity figure of each graph. ``real_images`` uint8 [B, H, W, 3] are held-out images.
    ``programs``: also write the torch.export program of every graph (explanations, the torch baseline)."""
    rng = np.random.default_rng(0)
    size, v = preset.image_size, len(vocab)
    exporter = _Exporter(out, programs)
    bounds = {"batch": MAX_PROGRAM_BATCH, "images": MAX_PROGRAM_BATCH, "rows": MAX_PROGRAM_BATCH}
    images = torch.from_numpy(real_images[:4])
    random_images = torch.from_numpy(rng.integers(0, 256, (3, size, size, 3), dtype=np.uint8))
    with torch.no_grad():
        regions = encoder(images)
    r, d = regions.shape[1:]
    random_regions = torch.rand(3, r, d) * regions.max()
    batch = {0: "batch"}
    exporter.add(
        "visual_encoder",
        "visual_encoder",
        "",
        encoder,
        encoder.forward,
        GraphSpec({"image": images}, ["regions"], {"image": batch, "regions": batch}),
        [{"image": images}, {"image": random_images}],
        {"image": [size, size, 3], "regions": [r, d]},
        PER_IMAGE_MAX_BATCH,
        bounds,
        lambda t: {k: x.float() for k, x in t.items()},
    )

    def tokens_for(n: int, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        tok = torch.from_numpy(rng.integers(4, v, (n, t)))
        tok[:, 0] = vocab.bos_id
        return tok, torch.from_numpy(rng.integers(1, t + 1, n))

    entries: list[CaptionerEntry] = []
    for cap in captioners:
        model = cap.model.eval()
        with torch.no_grad():
            memory, state = model.init(regions)  # type: ignore[operator]
        m, dm, s = memory.shape[1], memory.shape[2], state.shape[1]
        exporter.add(
            f"{cap.name}_init",
            "captioner_init",
            cap.name,
            model,
            model.init,  # type: ignore[arg-type]
            GraphSpec(
                {"regions": regions}, ["memory", "state"], {"regions": batch, "memory": batch, "state": batch}
            ),
            [{"regions": regions}, {"regions": random_regions}],
            {"regions": [r, d], "memory": [m, dm], "state": [s]},
            PER_IMAGE_MAX_BATCH,
            bounds,
        )
        trials = []
        for n, t in ((5, 1), (7, 4)):
            tok, length = tokens_for(n, t)
            trials.append(
                {
                    "memory": memory,
                    "image_index": torch.from_numpy(rng.integers(0, len(memory), n)),
                    "tokens": tok,
                    "length": length,
                    "state": torch.randn(n, s) * 0.5,
                }
            )
        rows = {0: "rows"}
        exporter.add(
            f"{cap.name}_step",
            "captioner_step",
            cap.name,
            model,
            model.step,  # type: ignore[arg-type]
            GraphSpec(
                trials[1],
                ["logprobs", "state_out", "attention"],
                {
                    "memory": {0: "images"},
                    "image_index": rows,
                    "tokens": {0: "rows", 1: "steps"},
                    "length": rows,
                    "state": rows,
                    "logprobs": rows,
                    "state_out": rows,
                    "attention": rows,
                },
            ),
            trials,
            {
                "memory": [-1, m, dm],
                "image_index": [-1],
                "tokens": [-1, -1],
                "length": [-1],
                "state": [-1, s],
                "logprobs": [-1, v],
                "state_out": [-1, s],
                "attention": [-1, m],
            },
            0,
            {**bounds, "steps": preset.max_length + 2},
        )
        # contract v3: the step gathers its rows' states itself (exact: parity holds as checked above)
        add_state_gather_file(out / f"{cap.name}_step" / "1" / "model.onnx")
        step_entry = exporter.entries[-1]
        exporter.entries[-1] = step_entry.model_copy(update={"inputs": v3_inputs(step_entry.inputs)})
        entries.append(
            CaptionerEntry(
                name=cap.name,
                architecture=cap.architecture,
                init=f"{cap.name}_init",
                step=f"{cap.name}_step",
                reads=cap.reads,
                memory_dims=[m, dm],
                state_dim=s,
                max_length=preset.max_length,
                ranker=cap.ranker,
                training=cap.training,
            )
        )

    ranker_entries: list[RankerEntry] = []
    text_width = preset.max_length + 2  # BOS, the words, EOS: the longest caption a ranker scores
    for rk in rankers:
        model = rk.model.eval()
        with torch.no_grad():
            joint = model.image_embedding(regions).shape[1]  # type: ignore[operator]
        exporter.add(
            f"{rk.name}_image",
            "ranker_image",
            rk.name,
            model,
            model.image_embedding,  # type: ignore[arg-type]
            GraphSpec({"regions": regions}, ["embedding"], {"regions": batch, "embedding": batch}),
            [{"regions": regions}, {"regions": random_regions}],
            {"regions": [r, d], "embedding": [joint]},
            PER_IMAGE_MAX_BATCH,
            bounds,
        )
        text_trials = []
        for n, t in ((3, 6), (5, 11)):
            tok, length = tokens_for(n, t)
            text_trials.append({"tokens": tok, "length": length.view(-1, 1)})
        exporter.add(
            f"{rk.name}_text",
            "ranker_text",
            rk.name,
            model,
            model.text_embedding,  # type: ignore[arg-type]
            GraphSpec(
                text_trials[1],
                ["embedding"],
                {"tokens": {0: "batch", 1: "tokens"}, "length": batch, "embedding": batch},
            ),
            text_trials,
            {"tokens": [-1], "length": [1], "embedding": [joint]},
            PER_IMAGE_MAX_BATCH,
            {**bounds, "tokens": text_width},
            program_fn=padded_tokens(model.text_embedding, text_width, vocab.pad_id),  # type: ignore[arg-type]
        )
        ranker_entries.append(
            RankerEntry(
                name=rk.name,
                architecture=rk.architecture,
                image=f"{rk.name}_image",
                text=f"{rk.name}_text",
                embedding_dim=joint,
                joint_with=rk.joint_with,
                training=rk.training,
            )
        )

    vocab.save(out / "vocab.json")
    manifest = Manifest(
        preset=preset.name,
        image=ImageSpec(height=size, width=size),
        vocabulary=VocabularySpec(size=v),
        default_captioner=default_captioner,
        models=exporter.entries,
        captioners=entries,
        rankers=ranker_entries,
    )
    write_repository(out, manifest)
    return manifest, exporter.parity
