"""README examples: caption a few held-out SceneWorld images with the served engine (embedded backend)
and write them, enlarged for viewing, with a Markdown table. ``python -m compcap_lab.studies.examples``."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from sceneworld.dataset import TEST_SEED_OFFSET, generate
from service.engine.engine import CaptionEngine

RUNS: list[tuple[str, str | bool]] = [("butr", True), ("butd", False)]


async def _caption_all(repo: Path, images: np.ndarray) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    async with await CaptionEngine.from_repo(repo) as engine:
        for model, rerank in RUNS:
            params = engine.resolve(model=model, rerank=rerank)
            result = await engine.caption(images, params)
            label = f"{model}+{params.ranker}" if params.ranker else model
            out[label] = [per[0].text for per in result.results]
    return out


def write_examples(
    repo: Path, out: Path, count: int = 3, seed: int = TEST_SEED_OFFSET + 11, start: int = 0
) -> str:
    """Caption ``count`` images of a world seed never used for training; return the Markdown table."""
    images, references, _ = generate(count, seed=seed, start=start)
    captions = asyncio.run(_caption_all(repo, images))
    out.mkdir(parents=True, exist_ok=True)
    rows = [
        "| image | " + " | ".join(captions) + " | a reference caption |",
        "|---" * (len(captions) + 2) + "|",
    ]
    for i, array in enumerate(images):
        path = out / f"example_{i}.png"
        Image.fromarray(array).resize((192, 192), Image.Resampling.NEAREST).save(path)
        cells = " | ".join(captions[label][i] for label in captions)
        rows.append(f"| ![example {i}]({path.as_posix()}) | {cells} | {references[i][0]} |")
    table = "\n".join(rows)
    (out / "examples.md").write_text(table + "\n", encoding="utf-8")
    return table


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repo", type=Path, default=Path("model_repo"))
    parser.add_argument("--out", type=Path, default=Path("docs/examples"))
    parser.add_argument("--count", type=int, default=3)
    args = parser.parse_args(argv)
    print(write_examples(args.repo, args.out, args.count))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
