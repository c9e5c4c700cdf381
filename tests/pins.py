"""Behaviour pins of the served engine path: the shipped default repository (``model_repo/``, fixed files
in git, so its weights do not depend on the CPU that trains them) decodes a fixed image set with every
case of ``tests/data/pinned_captions.json`` (beam 1, 5, 20 and 100, re-ranked and not, each decoding
hook), concurrently through one ``CaptionEngine``; ``tests/integration/test_pinned_captions.py`` checks
the top captions token for token.

Another CPU runs onnxruntime's kernels with other SIMD instructions, so model outputs differ in their
last bits. A pin is only worth keeping if no such difference can flip it: ``PerturbedBackend`` adds
noise ten times above that (``NOISE``, relative) to every float output of every model call, and the
pins must hold under it too. The recorder tries more noise than the test and leaves out (lists as
``near_ties``) the few (case, image) pairs whose result some noise changed: there two hypotheses score
within rounding of each other, and another CPU may order them either way.

Record the pins again after a deliberate change of the default models (the digest test says when):
``.venv/bin/python -m tests.pins`` (writes ``tests/data/pinned_captions.json``; it refuses to write a
degenerate pin, a caption under three words or one word repeated).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from sceneworld.dataset import generate
from service.backends.onnxruntime.backend import OnnxRuntimeBackend
from service.engine.engine import CaptionEngine
from service.gateway.original import caption_with_original, resolve_with_original
from service.manifest import Manifest, load_manifest
from service.settings import Settings
from service.text.vocabulary import Vocabulary

ROOT = Path(__file__).resolve().parents[1]
PINNED = ROOT / "tests" / "data" / "pinned_captions.json"
REPO = ROOT / "model_repo"
# relative: x + 2e-6 (|x| + rms(x)) u, ~1e-5 on the step models' log-probs; onnxruntime on an AVX2 CPU
# (qemu -cpu Haswell) differs from this AVX-512 one by <= 9.5e-7 on them
NOISE = 2e-6
NOISE_SEEDS = (1, 2)  # the test's; the recorder tries more
RECORD_SEEDS = tuple(range(1, 9))
DEADLINE_S = 600.0  # generous: the cases share one engine on a machine that may be busy

Tokens = list[list[list[int]]]  # per image, per caption of the final order, token ids
Decoded = tuple[Tokens, Tokens | None]  # a case's captions, and its original captions (substitution)


def repo_digest(repo: Path, manifest: Manifest) -> str:
    """SHA-256 over the ONNX files of the repository's manifest models and its vocabulary (models a
    later import adds to the repository do not change it)."""
    files = sorted([*(repo / m.name / "1" / "model.onnx" for m in manifest.models), repo / "vocab.json"])
    lines = "".join(f"{f.relative_to(repo)}:{hashlib.sha256(f.read_bytes()).hexdigest()}\n" for f in files)
    return hashlib.sha256(lines.encode()).hexdigest()


class PerturbedBackend:
    """The real backend, with seeded noise of relative size ``scale`` added to every float output:
    ``x + scale * (|x| + rms(x)) * u``, ``u`` uniform in [-1, 1] per element, ``rms`` over the tensor
    (rounding in a dot product is relative to its terms, not only to its result)."""

    def __init__(self, inner: OnnxRuntimeBackend, scale: float, seed: int) -> None:
        if scale <= 0:
            raise ValueError(f"scale must be > 0, got {scale}")
        self.inner, self.scale = inner, scale
        self.rng = np.random.default_rng(seed)

    async def infer(self, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = await self.inner.infer(model, inputs)
        for key, value in out.items():
            if value.dtype == np.float32:
                u = self.rng.uniform(-1.0, 1.0, value.shape).astype(np.float32)
                rms = float(np.sqrt(np.mean(np.square(value, dtype=np.float64)))) if value.size else 0.0
                out[key] = value + (self.scale * (np.abs(value) + rms) * u).astype(np.float32)
        return out

    async def close(self) -> None:
        await self.inner.close()


def pin_images(pinned: dict[str, Any], manifest: Manifest) -> np.ndarray:
    spec = pinned["images"]
    return generate(spec["count"], seed=spec["world_seed"], image_size=manifest.image.height)[0]


def decode_cases(
    repo: Path,
    cases: list[dict[str, Any]],
    images: np.ndarray,
    noise_seed: int | None = None,
    device: str = "auto",
) -> list[Decoded]:
    """Per case: the top captions' tokens and, for a ``synonym_substitution`` hook that asks for it, the
    original caption's; all cases decoded concurrently by one engine (``noise_seed``: through
    ``PerturbedBackend``; ``device``: the backend's ``COMPCAP_DEVICE``, ``scripts/gpu_check.py`` decodes
    them on cuda)."""
    manifest = load_manifest(repo)
    vocab = Vocabulary.load(repo / manifest.vocabulary.file)

    async def run() -> list[Decoded]:
        backend: Any = OnnxRuntimeBackend(repo, manifest, threads=1, device=device)
        if noise_seed is not None:
            backend = PerturbedBackend(backend, NOISE, noise_seed)
        settings = Settings(repo=repo, intra_op_threads=1, max_beam_size=100)
        engine = CaptionEngine(backend, manifest, vocab, settings)
        try:
            params = [resolve_with_original(engine, case["options"]) for case in cases]
            outs = await asyncio.gather(
                *(caption_with_original(engine, images, s, o, DEADLINE_S) for s, o in params)
            )
        finally:
            await engine.close()
            await backend.close()
        return [
            (
                [[c.tokens for c in per] for per in out.results],
                None if original is None else [[c.tokens for c in per] for per in original],
            )
            for out, original in outs
        ]

    return asyncio.run(run())


def degenerate(tokens: list[int]) -> bool:
    """A caption of fewer than three words, or one word repeated."""
    return len(tokens) < 3 or len(set(tokens)) == 1


def image_result(decoded: Decoded, image: int) -> tuple[list[list[int]], list[list[int]] | None]:
    """One image's captions (and original captions) of one case."""
    captions, original = decoded
    return captions[image], None if original is None else original[image]


def unsettled(clean: list[Decoded], noisy: list[Decoded], images: int) -> set[tuple[int, int]]:
    """(case, image) pairs whose result the noise changed."""
    return {
        (n, i)
        for n, (a, b) in enumerate(zip(clean, noisy, strict=True))
        for i in range(images)
        if image_result(a, i) != image_result(b, i)
    }


def checked(pinned: dict[str, Any]) -> list[tuple[int, int]]:
    """The pinned (case, image) pairs: all but the recorded near ties."""
    ties = {(n, i) for n, i, _ in pinned["near_ties"]}
    count = pinned["images"]["count"]
    return [(n, i) for n in range(len(pinned["cases"])) for i in range(count) if (n, i) not in ties]


def mismatches(pinned: dict[str, Any], decoded: list[Decoded]) -> list[str]:
    """The pinned (case, image) pairs whose decoded result differs from the pin."""
    cases = pinned["cases"]
    return [
        f"case {n} image {i} {cases[n]['options']}"
        for n, i in checked(pinned)
        if image_result(decoded[n], i) != image_result((cases[n]["captions"], cases[n]["original"]), i)
    ]


def check(repo: Path = REPO, pins: Path = PINNED) -> list[str]:
    """Decode the pinned cases plainly and return the mismatches (``python -m tests.pins --check``
    prints them, and the SIMD levels numpy dispatches to, as JSON on its last line: the test runs it
    with numpy's kernels limited to its baseline)."""
    pinned = json.loads(pins.read_text(encoding="utf-8"))
    return mismatches(pinned, decode_cases(repo, pinned["cases"], pin_images(pinned, load_manifest(repo))))


def record(repo: Path = REPO, out: Path = PINNED) -> int:
    """Decode every case plainly and under ``RECORD_SEEDS`` of noise; pin the plain results, and list
    as near ties the (case, image) pairs that some noise changed (they are not checked)."""
    pinned = json.loads(out.read_text(encoding="utf-8"))
    manifest = load_manifest(repo)
    images = pin_images(pinned, manifest)
    cases = pinned["cases"]
    clean = decode_cases(repo, cases, images)
    ties: dict[tuple[int, int], list[int]] = {}
    for seed in RECORD_SEEDS:
        for pair in unsettled(clean, decode_cases(repo, cases, images, noise_seed=seed), len(images)):
            ties.setdefault(pair, []).append(seed)
    weak = [
        (n, i)
        for n, decoded in enumerate(clean)
        for i in range(len(images))
        if (n, i) not in ties and any(degenerate(t) for t in image_result(decoded, i)[0])
    ]
    for n, i in weak:
        print(f"case {n} {cases[n]['options']} image {i}: degenerate caption", file=sys.stderr)
    if weak:
        print("not written: change or drop those cases", file=sys.stderr)
        return 1
    for case, (got, original) in zip(cases, clean, strict=True):
        case["captions"], case["original"] = got, original
    pinned["about"] = (
        "top captions of the shipped default repository per case and image, final order; recorded by "
        "`python -m tests.pins`. near_ties: (case, image) pairs that noise of the given relative size "
        "changed under one of the record seeds; they are not checked"
    )
    pinned["repo"] = str(repo.relative_to(ROOT)) if repo.is_relative_to(ROOT) else str(repo)
    pinned["repo_digest"] = repo_digest(repo, manifest)
    pinned["noise"] = {"relative": NOISE, "record_seeds": list(RECORD_SEEDS), "test_seeds": list(NOISE_SEEDS)}
    pinned["near_ties"] = [[n, i, seeds] for (n, i), seeds in sorted(ties.items())]
    out.write_text(json.dumps(pinned, indent=1) + "\n", encoding="utf-8")
    checked = len(cases) * len(images) - len(ties)
    print(
        f"wrote {len(cases)} cases x {len(images)} images to {out}: {checked} pinned, {len(ties)} near ties"
    )
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__

        dispatched = [f for f in __cpu_dispatch__ if __cpu_features__.get(f)]  # the SIMD levels in use
        print(json.dumps({"mismatches": check(), "dispatched": dispatched}))
        sys.exit(0)
    sys.exit(record())
