"""``ExplainService``: one explanation — caption (or take the client's caption), one map per word over
the regions, the object under each word's argmax and GroundingScore(δ) when the image has a scene
graph. A client of the engine: it decodes through ``EngineClient.caption`` at background priority with
a step observer (``attention``), or hands the words to the torch programs (gradient methods, the
``explain`` extra, imported only then). At most ``max_concurrent`` explanations at once (the kit's
``BoundedGate``: 429 beyond); a request it refuses is the kit's ``RequestError``."""

from __future__ import annotations

import asyncio
import importlib.util
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from service.api.gate import BoundedGate, RequestError
from service.checks import at_least
from service.engine.client import EngineClient
from service.engine.params import SearchParams
from service.engine.request import Priority
from service.explain.attention import AttentionRecorder
from service.explain.geometry import cell_boxes, fold_slots, grid_area, grid_size, pool_to_grid
from service.explain.render import overlay_png, place, stretch
from service.explain.scene import ground_caption
from service.manifest import CaptionerEntry, Manifest
from service.text.lexicon import default_lexicon
from service.text.subword import SubwordVocabulary, TokenVocabulary
from service.text.vocabulary import Vocabulary

METHODS = ("attention", "saliency", "guided_backprop", "integrated_gradients")
INPUTS = ("regions", "pixels")
EXTRA = "explain"
IG_BASELINE = {"regions": "zero region features", "pixels": "black image (0 in 0–255 pixel space)"}


@dataclass(frozen=True)
class ExplainInput:
    image: np.ndarray  # uint8 [1, H, W, 3]
    params: SearchParams
    method: str = "attention"
    caption: str | None = None
    tokens: list[int] | None = None  # the caption as token ids (instead of ``caption``)
    n_steps: int = 50
    attribute_to: str = "regions"
    scene: Mapping[str, Any] | None = None
    overlays: bool = True
    overlay_scale: int = 2


def token_words(vocab: SubwordVocabulary, ids: list[int]) -> list[str]:
    """Per token of a subword caption: the whole word it starts (a token starts a word when it opens
    the caption or its decoding begins with a space), or its piece when it continues one."""
    out: list[str] = []
    starts = [k for k in range(len(ids)) if k == 0 or vocab.decode(ids[k - 1 : k + 1]).count(" ") > 0]
    for k in range(len(ids)):
        if k in starts:
            end = next((s for s in starts if s > k), len(ids))
            out.append(vocab.decode(ids[k:end]).strip())
        else:
            out.append(vocab.decode(ids[k : k + 1]).strip())
    return out


def torch_available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("torch", "captum"))


class ExplainService:
    def __init__(
        self,
        repo: Path,
        manifest: Manifest,
        vocab: Vocabulary,
        max_concurrent: int = 2,
        max_ig_steps: int = 200,
        torch_threads: int = 1,
    ) -> None:
        at_least(1, max_concurrent=max_concurrent, max_ig_steps=max_ig_steps)
        self.repo, self.manifest, self.vocab = repo, manifest, vocab
        self.max_concurrent, self.max_ig_steps, self.torch_threads = (
            max_concurrent,
            max_ig_steps,
            torch_threads,
        )
        self.gate = BoundedGate(
            max_concurrent, "too_many_explanations", "{limit} explanations are running; retry later"
        )
        self._programs: Any = None  # service.explain.gradients.ProgramCache once a gradient method ran
        self.regions = manifest.model("visual_encoder").outputs[0].dims[0]

    def use(self, manifest: Manifest, vocab: Vocabulary) -> None:
        """Explain with the repository as reloaded (``service.api.reload``): its manifest and vocabulary;
        the gradient methods' programs are built again on their next use."""
        self.manifest, self.vocab = manifest, vocab
        self.regions = manifest.model("visual_encoder").outputs[0].dims[0]
        self._programs = None

    # -- validation -------------------------------------------------------------------------------------

    def _within_length(self, spec: ExplainInput, ids: list[int], field: str, unit: str) -> list[int]:
        """``ids`` when the captioner decodes that many (its ``max_length``), else a 422 naming ``field``."""
        limit = self.manifest.captioner(spec.params.model).max_length
        if len(ids) > limit:
            raise RequestError(
                422, "invalid_caption", f"{field} has {len(ids)} {unit}, more than {limit}", field=field
            )
        return ids

    def _subword_caption(self, spec: ExplainInput, vocab: TokenVocabulary) -> list[int]:
        tokens = vocab.encode(spec.caption or "")
        if not tokens:
            raise RequestError(422, "invalid_caption", "caption has no tokens", field="caption")
        return self._within_length(spec, tokens, "caption", "tokens")

    def _client_tokens(self, spec: ExplainInput, vocab: TokenVocabulary | None) -> list[int]:
        """The client's caption token ids, checked against the captioner's vocabulary."""
        tokens = list(spec.tokens or [])
        known: TokenVocabulary = vocab if vocab is not None else self.vocab
        if not tokens:
            raise RequestError(422, "invalid_caption", "tokens is empty", field="tokens")
        bad = [t for t in tokens if not 0 <= t < len(known) or t in known.special_ids]
        if bad:
            raise RequestError(
                422,
                "invalid_caption",
                f"tokens {bad[:5]} are not caption tokens of {spec.params.model} (ids below {len(known)}, "
                "not its start, end, padding or unknown token)",
                field="tokens",
            )
        return self._within_length(spec, tokens, "tokens", "ids")

    def check(self, spec: ExplainInput, vocab: TokenVocabulary | None = None) -> list[int] | None:
        """Validate ``spec`` before any work; the client caption's token ids, from ``tokens`` or
        its ``caption`` encoded (None: the engine captions)."""
        if spec.method not in METHODS:
            raise RequestError(422, "invalid_method", f"method must be one of {METHODS}", field="method")
        cap = self.manifest.captioner(spec.params.model)
        if cap.image is not None and spec.method == "attention" and cap.memory_grid is None:
            raise RequestError(
                422,
                "unsupported_model",
                f"{cap.name} is an imported captioner ({cap.architecture}) whose memory is not a "
                "grid of patches: its attention has no place in the image (the gradient methods do)",
                field="method",
            )
        if spec.attribute_to not in INPUTS:
            raise RequestError(
                422, "invalid_parameter", f"attribute_to must be one of {INPUTS}", field="attribute_to"
            )
        if spec.method == "attention" and spec.attribute_to != "regions":
            raise RequestError(
                422,
                "invalid_parameter",
                "attention is over the regions; attribute_to must be 'regions'",
                field="attribute_to",
            )
        if spec.method == "integrated_gradients" and not 1 <= spec.n_steps <= self.max_ig_steps:
            raise RequestError(
                422, "invalid_parameter", f"n_steps must be in [1, {self.max_ig_steps}]", field="n_steps"
            )
        if spec.method != "attention":
            if not torch_available():
                raise RequestError(
                    501,
                    "extra_not_installed",
                    f"method {spec.method!r} needs torch and captum: install the {EXTRA!r} extra "
                    f"(pip install 'compcap[{EXTRA}]'); 'attention' works without it",
                    field="method",
                )
            graphs = [cap.init, cap.step] if cap.image is not None else ["visual_encoder", cap.init, cap.step]
            missing = [m for m in graphs if not self._has_program(m)]
            if missing:
                raise RequestError(
                    501,
                    "programs_missing",
                    f"this repository has no torch programs for {missing}: the build writes them "
                    "(make build / compcap-lab build) and so does compcap import hf; git does not carry them",
                    field="method",
                )
        if spec.tokens is not None:
            return self._client_tokens(spec, vocab)
        if spec.caption is None:
            return None
        if cap.tokens is not None and vocab is not None:
            return self._subword_caption(spec, vocab)
        words = self.vocab.encode(spec.caption)
        unknown = [
            w for w, i in zip(spec.caption.lower().split(), words, strict=False) if i == self.vocab.unk_id
        ]
        if not words:
            raise RequestError(422, "invalid_caption", "caption has no words", field="caption")
        if self.vocab.unk_id in words:
            raise RequestError(
                422,
                "invalid_caption",
                f"caption words not in the vocabulary: {unknown or '?'}",
                field="caption",
            )
        return self._within_length(spec, words, "caption", "words")

    def _has_program(self, model: str) -> bool:
        program = self.manifest.model(model).program
        return program is not None and (self.repo / program).is_file()

    # -- admission --------------------------------------------------------------------------------------

    async def explain(self, engine: EngineClient, spec: ExplainInput) -> dict[str, Any]:
        """Explain one image (see module docstring); a ``RequestError`` for a request it refuses, a
        ``BusyError`` (429) when ``max_concurrent`` run."""
        words = self.check(spec, engine.vocabs[spec.params.model])
        async with self.gate.hold():
            return await self._explain(engine, spec, words)

    # -- work -------------------------------------------------------------------------------------------

    async def _decode(
        self,
        engine: EngineClient,
        spec: ExplainInput,
        words: list[int] | None,
        recorder: AttentionRecorder | None,
    ) -> tuple[list[int], dict[str, Any]]:
        """The caption's word ids and its description (engine-produced or forced)."""
        params = spec.params
        if words is not None:
            if recorder is None:
                return words, {"source": "client"}
            # one beam under the force_words hook alone: the search takes exactly the caption's steps
            force = {"name": "force_words", "params": {"ids": words}}
            params = engine.resolve(
                model=params.model, beam_size=1, n_best=1, rerank=False, max_length=len(words),
                length_penalty=params.length_penalty, hooks=[force],
            )  # fmt: skip
        out = await engine.caption(spec.image, params, priority=Priority.BACKGROUND, observer=recorder)
        best = out.results[0][0]
        if words is not None:
            if list(best.tokens) != words:
                raise RuntimeError("the forced decode did not follow the caption")
            return words, {"source": "client"}
        return list(best.tokens), {
            "source": "engine",
            "logprob": best.logprob,
            "normalized_logprob": best.normalized_logprob,
            "ranker_score": best.ranker_score,
        }

    async def _explain(
        self, engine: EngineClient, spec: ExplainInput, forced: list[int] | None
    ) -> dict[str, Any]:
        t0 = time.perf_counter()
        recorder = AttentionRecorder() if spec.method == "attention" else None
        words, about = await self._decode(engine, spec, forced, recorder)
        t1 = time.perf_counter()
        if not words:
            raise RequestError(
                422, "empty_caption", "the engine produced an empty caption", field="max_length"
            )
        extra: dict[str, Any] = {}
        pixel_maps = None
        if recorder is not None:
            maps = recorder.maps(words)
            if (
                maps is None
            ):  # the returned caption's prefixes were not all seen (cannot happen with one beam)
                words, about = await self._decode(engine, spec, words, recorder := AttentionRecorder())
                maps = recorder.maps(words)
            if recorder.missing or maps is None:
                raise RequestError(
                    501,
                    "no_attention",
                    f"{spec.params.model}'s step model has no attention output",
                    field="method",
                )
            raw = self._cells(spec.params.model, maps)
            logprobs: list[float | None] = recorder.word_logprobs(words)
        else:
            image = engine.encoder_images(spec.params.model, spec.image)  # what its programs read
            raw, pixel_maps, logprobs, extra = await asyncio.to_thread(self._gradients, spec, image, words)
        t2 = time.perf_counter()
        result = self._shape(spec, words, raw, pixel_maps, logprobs, engine.vocabs[spec.params.model])
        t3 = time.perf_counter()
        n = len(words)
        return {
            "model": spec.params.model,
            "method": spec.method,
            "attribute_to": spec.attribute_to,
            "caption": engine.vocabs[spec.params.model].decode(words),
            **about,
            **result,
            **extra,
            "timings_ms": {
                "caption": (t1 - t0) * 1e3,
                "maps": (t2 - t1) * 1e3,
                "render": (t3 - t2) * 1e3,
                "per_word": (t2 - t1) * 1e3 / n,
            },
        }

    def _gradients(
        self, spec: ExplainInput, image: np.ndarray, words: list[int]
    ) -> tuple[np.ndarray, np.ndarray | None, list[float | None], dict[str, Any]]:
        from service.explain.gradients import ProgramCache  # torch: the explain extra

        if self._programs is None:
            self._programs = ProgramCache(self.repo, self.manifest, self.torch_threads)
        cap = self.manifest.captioner(spec.params.model)
        pixels = spec.attribute_to == "pixels"
        maps = self._programs.attribute(cap.name, image, words, spec.method, spec.attribute_to, spec.n_steps)
        extra: dict[str, Any] = {}
        if spec.method == "guided_backprop":
            relus = self._programs.relus(cap.name, pixels)
            extra["guided_backprop"] = {
                "relu_modules": relus,
                "note": "no ReLU in these graphs: guided backpropagation is the plain gradient here"
                if relus == 0
                else "negative gradients stopped at each ReLU",
            }
        if maps.delta is not None and maps.gap is not None:
            rel = np.abs(maps.delta) / np.maximum(np.abs(maps.gap), 1e-12)
            extra["integrated_gradients"] = {
                "n_steps": spec.n_steps,
                "baseline": IG_BASELINE[spec.attribute_to],
                "delta": maps.delta.tolist(),
                "score_gap": maps.gap.tolist(),
                "mean_abs_delta": float(np.abs(maps.delta).mean()),
                "mean_relative_delta": float(rel.mean()),
            }
        if pixels:
            pixel = maps.values.sum(-1)  # [T, H, W] at the encoder's input size
            g = self._grid(cap)
            raw = np.stack([pool_to_grid(p, g) for p in pixel]) if g else pixel.reshape(len(words), -1)
            return raw, pixel, maps.scores, extra
        return self._cells(cap.name, maps.values.sum(-1)), None, maps.scores, extra

    def _grid(self, cap: CaptionerEntry) -> int | None:
        """The side of the captioner's square grid of regions or patches (None: not a square grid)."""
        return cap.memory_grid if cap.memory_grid is not None else grid_size(self.regions)

    def _cells(self, captioner: str, values: np.ndarray) -> np.ndarray:
        """[T, M] per memory slot → [T, cells]: an imported ViT-like encoder's patches (its class token
        left out), an imported memory without a grid as it is, a built-in memory folded onto its regions."""
        cap = self.manifest.captioner(captioner)
        if cap.memory_grid is not None:
            return values[:, cap.memory_offset : cap.memory_offset + cap.memory_grid**2]
        return values if cap.image is not None else fold_slots(values, self.regions)

    def _shape(
        self,
        spec: ExplainInput,
        words: list[int],
        raw: np.ndarray,
        pixel_maps: np.ndarray | None,
        logprobs: list[float | None],
        vocab: TokenVocabulary | None = None,
    ) -> dict[str, Any]:
        """Per-word entries (+ grounding when the image has a scene graph). ``raw`` float [T, R]. For a
        subword captioner an entry per token, its ``word`` the whole word on the word's first token (so
        that a noun is grounded once, by its first token's map) and the piece on the others."""
        image = spec.image[0]
        h, w = image.shape[:2]
        cap = self.manifest.captioner(spec.params.model)
        g = self._grid(cap)
        pre = cap.image
        area = grid_area(h, w, pre.resize if pre else None, (pre.height, pre.width) if pre else (h, w))
        if isinstance(vocab, SubwordVocabulary):
            texts = token_words(vocab, words)
        else:
            texts = [self.vocab.words[i] for i in words]
        argmax = [int(np.argmax(r)) for r in raw]
        lexicon = default_lexicon()
        grounded = (
            ground_caption(texts, argmax, spec.scene, g, h, w, lexicon, area) if spec.scene and g else None
        )
        cells = cell_boxes(g, h, w, area) if g else None
        entries = []
        for t, (word, r) in enumerate(zip(texts, argmax, strict=True)):
            entry: dict[str, Any] = {
                "index": t,
                "word": word,
                "noun": lexicon.noun_class(word),
                "logprob": logprobs[t],
                "values": raw[t].reshape(g, g).tolist() if g else raw[t].tolist(),
                "argmax_region": r,
            }
            if cells is not None:
                entry["argmax_box"] = cells[r].tolist()
            if spec.overlays and g:
                values = pixel_maps[t] if pixel_maps is not None else raw[t].reshape(g, g)
                full = values if values.shape == (h, w) else place(values, area, h, w)
                entry["overlay_png"] = overlay_png(image, stretch(full), spec.overlay_scale)
            if grounded is not None:
                wg = grounded.words[t]
                entry["under_argmax"] = {
                    "labels": list(wg.labels),
                    "object": None
                    if wg.object is None
                    else {k: wg.object[k] for k in ("id", "noun", "bbox")},
                }
                entry["pointing"] = wg.pointing
                entry["pointing_chance"] = wg.chance
                entry["grounded"] = None if wg.noun_class is None else bool(wg.noun_class in wg.labels)
            entries.append(entry)
        return {
            "grid": [g, g] if g else None,
            "grid_area": list(area),
            "image_size": [h, w],
            "scene_graph": grounded is not None,
            "words": entries,
            "grounding_score": None if grounded is None else grounded.scores,
            "grounding_score_interval": None if grounded is None else grounded.intervals,
        }
