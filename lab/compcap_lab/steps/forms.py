"""What each step form of an imported ViT + GPT-2 costs (``export.hf.step_choice``): the plain, image-cache
and kv step graphs of a random-weight snapshot, exported as ``compcap import hf`` exports them and timed
as its ``auto`` times them (onnxruntime, one thread, 16 rows of 4 images at half the longest prefix,
best of 3 after a warm-up; the kv graph with a pool of the previous call's 16 rows reordered as a beam
does). No parity check here: the import makes those.

Run: ``python -m compcap_lab.steps.forms [--real-size] [--max-length 16] [--out DIR]`` (real size: the
size of nlpconnect/vit-gpt2-image-captioning, about 1 GB of ONNX per graph; a few minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch


def measure(out: Path, real_size: bool, max_length: int) -> dict[str, object]:
    """Make the snapshot in ``out``, export the three step graphs there and time them."""
    from compcap_lab.snapshots import vit_gpt2
    from export.hf.adapter import adapt, preprocessing
    from export.hf.architectures import read_snapshot
    from export.hf.kv_step import KeyValueStep
    from export.hf.step_choice import choose
    from export.models.step_contract import STEP_AXES, STEP_OUTPUTS
    from export.packaging.onnx import GraphSpec, export_graph

    built = vit_gpt2.build(out / "snapshot", "real" if real_size else "tiny", max_length=max_length)
    about = {"real_size": real_size, **vit_gpt2.describe(built)}
    snapshot = read_snapshot(out / "snapshot")
    adapted = adapt(snapshot, preprocessing(snapshot))
    kv = adapted.kv_step
    assert isinstance(kv, KeyValueStep) and adapted.cached_step is not None
    pre = preprocessing(snapshot)
    with torch.no_grad():
        memory, _ = adapted.encoder(torch.zeros(2, pre.height, pre.width, 3, dtype=torch.uint8))
    tokens = torch.full((4, 3), adapted.start)
    example = {
        "memory": memory,
        "image_index": torch.tensor([0, 0, 1, 1]),
        "tokens": tokens,
        "length": torch.tensor([1, 2, 3, 2]),
        "state": torch.zeros(4, 1),
    }
    outputs, dynamic = STEP_OUTPUTS, STEP_AXES
    paths = {form: out / f"{form}.onnx" for form in ("plain", "cached", "kv")}
    export_graph(adapted.step, adapted.step.forward, GraphSpec(example, outputs, dynamic), paths["plain"])
    cached = adapted.cached_step
    export_graph(cached, cached.forward, GraphSpec(example, outputs, dynamic), paths["cached"])
    kv_dynamic = {**dynamic, "state": {0: "pool"}, "state_new": {0: "new"}, "state_index": {0: "rows"}}
    kv_example = {
        **example,
        "state": torch.zeros(3, kv.state_dim),
        "state_new": torch.zeros(2, kv.state_dim),
        "state_index": torch.tensor([3, 0, 1, 4]),
    }
    export_graph(kv, kv.forward, GraphSpec(kv_example, outputs, kv_dynamic), paths["kv"])
    m, d = int(memory.shape[1]), int(memory.shape[2])
    timing = choose(
        paths["plain"],
        paths["cached"],
        (m, d),
        adapted.vocab_size,
        adapted.max_tokens,
        "auto",
        kv=paths["kv"],
        state_dim=kv.state_dim,
    )
    return {
        "snapshot": about,
        "state_dim": kv.state_dim,
        "width": timing.width,
        "ms_per_call": {"plain": timing.plain_ms, "cached": timing.cached_ms, "kv": timing.kv_ms},
        "auto_keeps": timing.kept,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real-size", action="store_true", help="ViT-base + GPT-2 (default: the tiny one)")
    parser.add_argument("--max-length", type=int, default=16, help="generate's max_length (Tcap)")
    parser.add_argument("--out", type=Path, default=None, help="keep the snapshot and graphs here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.out is not None:
        result = measure(args.out, args.real_size, args.max_length)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            result = measure(Path(tmp), args.real_size, args.max_length)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
