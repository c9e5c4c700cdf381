"""What each of onnxruntime's transformer-optimizer fusions buys an imported captioner, per call: its
encoder and step graphs unfused, with each fusion alone (``export.hf.fusion.optimize(only=…)``), and
with all of them, timed in turn (best of ``--repeats`` after a warm-up, the variants alternating) on
the batch the import times its step forms with, with the threads the embedded backend gives the model.

Run: ``python -m compcap_lab.steps.fusions --repo REPO --model NAME [--json OUT]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from loadtests.load.results import run_and_save, script

SWITCHES = ("enable_layer_norm", "enable_gelu", "enable_bias_gelu", "enable_skip_layer_norm",
            "enable_bias_skip_layer_norm", "enable_attention")  # fmt: skip


def _feeds(repo: Path, model: str) -> dict[str, tuple[Path, dict[str, np.ndarray], str, int, int]]:
    """Per graph: its file, the inputs it is timed on, and the optimizer's model type, heads and width."""
    import json

    from export.hf.step_choice import timing_feeds
    from service.manifest import load_manifest

    manifest = load_manifest(repo)
    cap = manifest.captioner(model)
    assert cap.image is not None and cap.tokens is not None, f"{model} is not an imported captioner"
    config = json.loads(Path(cap.source.rsplit(" ", 1)[-1], "config.json").read_text(encoding="utf-8"))
    if config["model_type"] == "blip":
        vision, text = config["vision_config"], config["text_config"]
        kinds = (("vit", vision["num_attention_heads"], vision["hidden_size"]),
                 ("bert", text["num_attention_heads"], text["hidden_size"]))  # fmt: skip
    else:
        enc, dec = config["encoder"], config["decoder"]
        kinds = (
            ("vit", enc["num_attention_heads"], enc["hidden_size"]),
            ("gpt2", dec["n_head"], dec["n_embd"]),
        )
    images = np.random.default_rng(0).integers(
        0, 256, (2, cap.image.height, cap.image.width, 3), dtype=np.uint8
    )
    m, d = cap.memory_dims
    plain, kv, _ = timing_feeds(
        (m, d), cap.tokens.size, cap.max_length + 1, cap.state_dim if cap.kv_cache else None
    )
    step = manifest.model(cap.step)
    feed = kv if kv is not None else plain
    if "top_k" in {i.name for i in step.inputs}:
        feed = {**feed, "top_k": np.array([1], dtype=np.int64)}
    return {
        cap.init: (manifest.model(cap.init).path(repo), {"image": images}, *kinds[0]),
        cap.step: (step.path(repo), feed, *kinds[1]),
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import onnxruntime as ort

    from export.hf.fusion import optimize
    from service.backends.onnxruntime.backend import model_threads

    out: dict[str, Any] = {"model": args.model, "graphs": {}}
    with tempfile.TemporaryDirectory(prefix="compcap-fusions-") as tmp:
        for graph, (path, feed, kind, heads, width) in _feeds(Path(args.repo), args.model).items():
            variants: dict[str, tuple[Path, dict[str, int]]] = {"unfused": (path, {})}
            for only in (*SWITCHES, None):
                target = Path(tmp) / f"{graph}.{only or 'all'}.onnx"
                made = optimize(path, target, kind, heads, width, only)
                if made or only is None:
                    variants[only or "all"] = (target, made)
            options = ort.SessionOptions()
            options.intra_op_num_threads = model_threads(0, 4, path.stat().st_size)
            sessions = {n: ort.InferenceSession(str(p), options, providers=["CPUExecutionProvider"])
                        for n, (p, _) in variants.items()}  # fmt: skip
            for session in sessions.values():
                session.run(None, feed)
            best = dict.fromkeys(sessions, float("inf"))
            for _ in range(args.repeats):
                for name, session in sessions.items():
                    start = time.perf_counter()
                    session.run(None, feed)
                    best[name] = min(best[name], time.perf_counter() - start)
            base = best["unfused"]
            out["graphs"][graph] = {
                name: {
                    "ms": round(best[name] * 1e3, 2),
                    "of_unfused": round(best[name] / base, 3),
                    "fused": made,
                }
                for name, (_, made) in variants.items()
            }
    return out


def summary(result: dict[str, Any]) -> Iterator[str]:
    for graph, rows in result["graphs"].items():
        for name, row in rows.items():
            fused = ", ".join(f"{op} {n}" for op, n in row["fused"].items()) or "-"
            yield f"{graph} {name}: {row['ms']:.3g} ms per call ({row['of_unfused']:.3f} of unfused; {fused})"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repo", required=True, help="the repository the captioner was imported into")
    parser.add_argument("--model", required=True, help="the imported captioner")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls of each variant, alternating")
    parser.add_argument("--json", default=None, help="write the figures as JSON here")


def fusions(args: argparse.Namespace) -> int:
    return run_and_save(args, measure, summary)


main = script(__doc__.split("\n\n")[0], add_arguments, fusions, prog="python -m compcap_lab.steps.fusions")

__all__ = ["main", "measure"]

if __name__ == "__main__":
    raise SystemExit(main())
