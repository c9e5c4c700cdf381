"""Exporting an imported ranker (CLIP, ``export.hf.architectures.clip``): its image and text graphs with
``torch.onnx``, each checked against the transformers module on onnxruntime (≤ ``PARITY_TOLERANCE``
over several batch shapes), its tokenizer, the Triton configs and its manifest entry (contract v2: it
reads pixels, and its own tokens)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import torch

from export.hf.adapter import adapt_ranker, preprocessing
from export.hf.snapshot import Snapshot
from export.hf.staging import HfImportError, ImportReport, write_configs
from export.packaging.onnx import GraphSpec, export_graph, parity
from service.manifest import ModelEntry, RankerEntry, TensorSpec, TokenizerSpec, Training

PARITY_TOLERANCE = 1e-4
PER_ITEM_MAX_BATCH = 64


def export_ranker(
    snapshot: Snapshot, name: str, stage: Path, seed: int = 0
) -> tuple[RankerEntry, list[ModelEntry], ImportReport]:
    """Stage ranker ``name`` (see module docstring)."""
    tokenizer_file = snapshot.tokenizer_file()
    pre = preprocessing(snapshot)
    adapted = adapt_ranker(snapshot, pre)
    report = ImportReport(name, snapshot.architecture)
    rng = np.random.default_rng(seed)
    batch = {0: "batch"}
    images = [
        torch.from_numpy(rng.integers(0, 256, (b, pre.height, pre.width, 3), dtype=np.uint8)) for b in (2, 3)
    ]
    image_path = stage / f"{name}_image" / "1" / "model.onnx"
    spec = GraphSpec({"image": images[0]}, ["embedding"], {"image": batch, "embedding": batch})
    export_graph(adapted.image, adapted.image.forward, spec, image_path)
    report.parity[f"{name}_image"] = max(
        parity(adapted.image, adapted.image.forward, image_path, {"image": im}) for im in images
    )

    def texts(n: int, t: int) -> dict[str, torch.Tensor]:
        length = torch.from_numpy(rng.integers(2, t + 1, (n, 1)))
        tokens = torch.from_numpy(rng.integers(0, adapted.vocab_size, (n, t)))
        for row in range(n):
            k = int(length[row, 0])
            tokens[row, 0], tokens[row, k - 1] = adapted.bos, adapted.eos
            tokens[row, k:] = adapted.pad
        return {"tokens": tokens, "length": length}

    trials = [texts(4, 7), texts(3, 3), texts(6, 12)]
    text_path = stage / f"{name}_text" / "1" / "model.onnx"
    dynamic = {"tokens": {0: "batch", 1: "t"}, "length": batch, "embedding": batch}
    export_graph(adapted.text, adapted.text.forward, GraphSpec(trials[0], ["embedding"], dynamic), text_path)
    report.parity[f"{name}_text"] = max(
        parity(adapted.text, adapted.text.forward, text_path, t) for t in trials
    )
    for graph, diff in report.parity.items():
        if not diff <= PARITY_TOLERANCE:
            raise HfImportError(
                f"{graph}: transformers vs onnxruntime max abs diff {diff:.2e} > {PARITY_TOLERANCE}"
            )
    (stage / "tokenizers").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tokenizer_file, stage / "tokenizers" / f"{name}.json")
    j = adapted.embedding_dim
    models = [
        ModelEntry(
            name=f"{name}_image",
            role="ranker_pixels",
            owner=name,
            max_batch_size=PER_ITEM_MAX_BATCH,
            inputs=[TensorSpec(name="image", dtype="UINT8", dims=[pre.height, pre.width, 3])],
            outputs=[TensorSpec(name="embedding", dtype="FP32", dims=[j])],
        ),
        ModelEntry(
            name=f"{name}_text",
            role="ranker_text",
            owner=name,
            max_batch_size=PER_ITEM_MAX_BATCH,
            inputs=[
                TensorSpec(name="tokens", dtype="INT64", dims=[-1]),
                TensorSpec(name="length", dtype="INT64", dims=[1]),
            ],
            outputs=[TensorSpec(name="embedding", dtype="FP32", dims=[j])],
        ),
    ]
    entry = RankerEntry(
        name=name,
        architecture=snapshot.architecture,
        image=f"{name}_image",
        text=f"{name}_text",
        embedding_dim=j,
        text_tokens="bos_subwords_eos",
        training=Training(split="external", dataset=f"transformers snapshot {snapshot.path.name}"),
        reads="pixels",
        image_preprocessing=pre,
        tokens=TokenizerSpec(
            file=f"tokenizers/{name}.json",
            size=adapted.vocab_size,
            bos_id=adapted.bos,
            eos_id=adapted.eos,
            pad_id=adapted.pad,
            max_tokens=adapted.max_tokens,
        ),
        source=f"transformers {snapshot.model_type} snapshot {snapshot.path.resolve()}",
    )
    write_configs(stage, models)
    report.files = [f"{name}_image/", f"{name}_text/", f"tokenizers/{name}.json"]
    return entry, models, report


__all__ = ["export_ranker"]
