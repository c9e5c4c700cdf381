"""The model runner: the only code that knows the five-model contract of ``model_repo/manifest.json``
(docs/architecture.md, "The model contract") and builds model inputs.

- ``encode``: ``visual_encoder`` (uint8 images → regions) then ``<cap>_init`` (regions → memory, state);
  a captioner with an encoder of its own (contract v2) gets the images, resized to its preprocessing's
  size, and no regions;
- ``step``: one ``<cap>_step`` call for rows of many images: ``memory`` once per image and a row →
  image index; LSTM captioners (``reads == "last_token"``) get only each row's last real token,
  Transformer captioners the right-padded prefix (padded to a fixed T where the model has one); each
  row's decoder state by reference (``StateRows``): a step of contract v3 (an input ``state_index``)
  gets the last call's ``state_out`` as it was kept (on the model's device, where the backend keeps
  outputs there), the new images' initial states and a row → state index, and gathers them itself;
  an older step gets the rows' states gathered on the host;
- ``rank``: ``<ranker>_image`` and ``<ranker>_text`` in one call each, cosine per caption. A ranker of
  its own (contract v2, e.g. an imported CLIP) reads the images and tokenizes the captions' text with
  its own tokenizer; a word ranker of a subword captioner's captions reads their text as words.

The scheduler, the naive mode, the offline studies and the benchmark all call it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from service.backends.base import Backend, DeviceArray, infer_outputs
from service.engine.sparse import RowTopK, row_top_k
from service.engine.state_rows import StateRows, pooled_feed, state_rows
from service.manifest import CaptionerEntry, Manifest, Preprocessing, RankerEntry
from service.text.subword import SubwordVocabulary
from service.text.vocabulary import Vocabulary


@dataclass(frozen=True)
class Encoded:
    """Per-image tensors of ``I`` images."""

    regions: np.ndarray  # float32 [I, R, D] ([I, 0, 0] for a captioner with its own encoder)
    memory: np.ndarray  # float32 [I, M, Dm]
    state: np.ndarray  # float32 [I, S]


@dataclass(frozen=True)
class StepInput:
    """The rows of one ``<cap>_step`` call (N rows of I images)."""

    memory: np.ndarray  # float32 [I, M, Dm], once per image
    image_index: np.ndarray  # int64 [N], each row's image
    tokens: np.ndarray  # int64 [N, T], prefixes BOS w1..wt right-padded
    lengths: np.ndarray  # int64 [N], real tokens per row
    state: np.ndarray | StateRows  # float32 [N, S], or the rows' states by reference


@dataclass(frozen=True)
class StepOutput:
    logprobs: np.ndarray | RowTopK  # float32 [N, V], or each row's best words (``step``'s ``top_k``)
    state: np.ndarray | DeviceArray  # float32 [N, S]: on the model's device for a v3 step where kept
    attention: np.ndarray | None  # float32 [N, M], the step model's attention over memory slots


def text_batch(
    captions: Sequence[Sequence[int]], bos: int, pad: int, fixed_length: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Ranker text input: ``tokens`` int64 [C, T] = BOS w1..wn PAD..., ``length`` int64 [C, 1] = n + 1.
    ``fixed_length`` pads to (and cuts at) a model's fixed T. Pure."""
    width = fixed_length if fixed_length else 1 + max((len(c) for c in captions), default=0)
    tokens = np.full((len(captions), width), pad, dtype=np.int64)
    length = np.zeros((len(captions), 1), dtype=np.int64)
    tokens[:, 0] = bos
    for row, words in enumerate(captions):
        words = list(words)[: width - 1]
        tokens[row, 1 : 1 + len(words)] = words
        length[row, 0] = len(words) + 1
    return tokens, length


def resize_images(images: np.ndarray, height: int, width: int, resample: str = "bilinear") -> np.ndarray:
    """uint8 [I, H, W, 3] → uint8 [I, height, width, 3] with PIL's ``resample`` filter (unchanged when
    the size is already right)."""
    if images.shape[1:3] == (height, width):
        return images
    from PIL import Image

    mode = {"nearest": Image.Resampling.NEAREST, "bilinear": Image.Resampling.BILINEAR}.get(
        resample, Image.Resampling.BICUBIC
    )
    return np.stack([np.asarray(Image.fromarray(im).resize((width, height), mode)) for im in images])


def prepare_images(images: np.ndarray, pre: Preprocessing) -> np.ndarray:
    """uint8 images → the size a captioner's own encoder reads (``Preprocessing``): resized, or resized
    to ``pre.resize`` and cropped at the centre."""
    if pre.resize is None:
        return resize_images(images, pre.height, pre.width, pre.resample)
    resized = resize_images(images, pre.resize[0], pre.resize[1], pre.resample)
    top, left = (pre.resize[0] - pre.height) // 2, (pre.resize[1] - pre.width) // 2
    return np.ascontiguousarray(resized[:, top : top + pre.height, left : left + pre.width])


def fixed_dim(manifest: Manifest, model: str, tensor: str, axis: int) -> int | None:
    """The fixed size of ``tensor``'s ``axis`` (manifest dims, batch excluded) or None if variable."""
    for spec in manifest.model(model).inputs:
        if spec.name == tensor and len(spec.dims) > axis and spec.dims[axis] > 0:
            return spec.dims[axis]
    return None


class ModelRunner:
    """Runs a repository's models on a ``Backend`` (see module docstring). ``words``: the repository's
    word vocabulary and ``ranker_tokens`` the rankers' own tokenizers, for ranking captions by text."""

    def __init__(
        self,
        backend: Backend,
        manifest: Manifest,
        words: Vocabulary | None = None,
        ranker_tokens: Mapping[str, SubwordVocabulary] | None = None,
    ) -> None:
        self.backend, self.manifest = backend, manifest
        self.words, self.ranker_tokens = words, dict(ranker_tokens or {})
        vocab = manifest.vocabulary
        self.bos, self.pad = vocab.bos_id, vocab.pad_id  # the word rankers' text
        self._pad = {c.name: c.tokens.pad_id if c.tokens else vocab.pad_id for c in manifest.captioners}
        self._last_token = {c.name: c.reads == "last_token" for c in manifest.captioners}
        self._fixed_t = {c.name: fixed_dim(manifest, c.step, "tokens", 1) for c in manifest.captioners}
        self._eos = {c.name: c.tokens.eos_id if c.tokens else vocab.eos_id for c in manifest.captioners}
        self._vocab = {c.name: self._vocab_size(c) for c in manifest.captioners}
        self._outputs = {
            c.name: [o.name for o in manifest.model(c.step).outputs] for c in manifest.captioners
        }
        # contract v3: the step gathers its rows' states itself (state pool, new states, row index)
        self._v3 = {c.name: manifest.model(c.step).gathers_state for c in manifest.captioners}
        # steps whose graph returns each row's best words (export.packaging.topk): their whole-row outputs and
        # their top-k ones, asked of the backend as a step needs
        self._top_graph: dict[str, tuple[list[str], list[str]]] = {}
        for c in manifest.captioners:
            step = manifest.model(c.step)
            names = [o.name for o in step.outputs]
            if {"top_logprobs", "top_tokens", "eos_logprob"} <= set(names) and "top_k" in {
                i.name for i in step.inputs
            }:
                whole = [n for n in names if n not in ("top_logprobs", "top_tokens", "eos_logprob")]
                self._top_graph[c.name] = (whole, ["top_logprobs", "top_tokens", "eos_logprob", "state_out"])

    def _vocab_size(self, cap: CaptionerEntry) -> int:
        for spec in self.manifest.model(cap.step).outputs:
            if spec.name == "logprobs" and len(spec.dims) == 2 and spec.dims[1] > 0:
                return spec.dims[1]
        return cap.tokens.size if cap.tokens else self.manifest.vocabulary.size

    def gathers_state(self, captioner: str) -> bool:
        """Whether ``<cap>_step`` takes its rows' states by reference (contract v3)."""
        return self._v3[captioner]

    def vocab_size(self, captioner: str) -> int:
        """``V``: the words a ``<cap>_step`` row scores."""
        return self._vocab[captioner]

    def _words(self) -> Vocabulary:
        if self.words is None:
            raise ValueError(
                "ranking a subword captioner's captions by a word ranker needs the word vocabulary"
            )
        return self.words

    def captioner(self, name: str) -> CaptionerEntry:
        return self.manifest.captioner(name)

    # -- images ---------------------------------------------------------------------------------------

    async def encode_images(self, images: np.ndarray) -> np.ndarray:
        """uint8 [I, H, W, 3] → regions float32 [I, R, D]."""
        return (await self.backend.infer("visual_encoder", {"image": images}))["regions"]

    async def init(self, captioner: str, regions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """regions [I, R, D] → (memory float32 [I, M, Dm], state float32 [I, S])."""
        out = await self.backend.infer(self.captioner(captioner).init, {"regions": regions})
        memory = np.ascontiguousarray(out["memory"], dtype=np.float32)
        return memory, np.ascontiguousarray(out["state"], dtype=np.float32)

    async def encode(self, captioner: str, images: np.ndarray) -> Encoded:
        own = self.captioner(captioner).image
        if own is not None:  # its own encoder reads the images (contract v2)
            pixels = await asyncio.to_thread(prepare_images, images, own)
            out = await self.backend.infer(self.captioner(captioner).init, {"image": pixels})
            memory = np.ascontiguousarray(out["memory"], dtype=np.float32)
            state = np.ascontiguousarray(out["state"], dtype=np.float32)
            return Encoded(np.zeros((len(images), 0, 0), dtype=np.float32), memory, state)
        regions = await self.encode_images(images)
        memory, state = await self.init(captioner, regions)
        return Encoded(regions, memory, state)

    # -- decoding -------------------------------------------------------------------------------------

    def step_inputs(
        self, captioner: str, rows: StepInput, top_k: int | None = None
    ) -> dict[str, np.ndarray | DeviceArray]:
        """Inputs of ``<cap>_step`` for ``rows``; states by reference (``StateRows``) become a v3 step's
        ``state``, ``state_new`` and ``state_index``, and are gathered here for an older step; for a step
        that returns its top k, ``top_k`` int64 [1] (1 when whole rows are read)."""
        tokens, state = rows.tokens, rows.state
        lengths = np.asarray(rows.lengths, dtype=np.int64)
        if self._last_token[captioner]:  # the LSTM reads only the last real token: T = 1
            tokens = tokens[np.arange(tokens.shape[0]), lengths - 1][:, None]
            lengths = np.ones_like(lengths)
        else:
            fixed = self._fixed_t[captioner]
            if fixed is not None and tokens.shape[1] < fixed:
                padded = np.full((tokens.shape[0], fixed), self._pad[captioner], dtype=np.int64)
                padded[:, : tokens.shape[1]] = tokens
                tokens = padded
        inputs: dict[str, np.ndarray | DeviceArray] = {
            "memory": np.ascontiguousarray(rows.memory, dtype=np.float32),
            "image_index": np.asarray(rows.image_index, dtype=np.int64),
            "tokens": np.ascontiguousarray(tokens, dtype=np.int64),
            "length": lengths,
        }
        if self._v3[captioner]:
            feed = pooled_feed(state if isinstance(state, StateRows) else state_rows(state))
            pool = feed["state"]
            inputs["state"] = (
                pool if isinstance(pool, DeviceArray) else np.ascontiguousarray(pool, np.float32)
            )
            inputs["state_new"] = np.ascontiguousarray(feed["state_new"], dtype=np.float32)
            inputs["state_index"] = np.asarray(feed["state_index"], dtype=np.int64)
        else:
            host = state.host() if isinstance(state, StateRows) else state
            inputs["state"] = np.ascontiguousarray(host, dtype=np.float32)
        if captioner in self._top_graph:
            inputs["top_k"] = np.array([top_k or 1], dtype=np.int64)
        return inputs

    async def step(self, captioner: str, rows: StepInput, top_k: int | None = None) -> StepOutput:
        """One ``<cap>_step`` call for ``rows`` (``step_inputs``). ``top_k``: each row's ``top_k`` best
        words and end-token log-prob (``RowTopK``) instead of whole rows — from the step graph where it
        returns them (only they leave the device), else taken here from the whole rows. A v3 step's
        ``state_out`` stays where the backend keeps it (``DeviceArray``), for the next call's ``state``."""
        inputs = self.step_inputs(captioner, rows, top_k)
        model = self.captioner(captioner).step
        graph = self._top_graph.get(captioner)
        keep = ("state_out",) if self._v3[captioner] else ()
        if graph is not None:
            names = graph[0] if top_k is None else graph[1]
            out = await infer_outputs(self.backend, model, inputs, names, keep)
            if top_k is not None:
                top = RowTopK(
                    out["top_logprobs"], out["top_tokens"], out["eos_logprob"], self._vocab[captioner]
                )
                return StepOutput(top, out["state_out"], None)
        elif keep:
            out = await infer_outputs(self.backend, model, inputs, self._outputs[captioner], keep)
        else:
            out = await self.backend.infer(model, inputs)  # type: ignore[arg-type]  # host arrays only
        logprobs: np.ndarray | RowTopK = out["logprobs"]
        if top_k is not None:
            logprobs = row_top_k(out["logprobs"], top_k, self._eos[captioner])
        return StepOutput(logprobs, out["state_out"], out.get("attention"))

    # -- ranking --------------------------------------------------------------------------------------

    async def embed_images(self, ranker: RankerEntry, regions: np.ndarray) -> np.ndarray:
        """regions [I, R, D] → L2-normalised float32 [I, J]."""
        out = await self.backend.infer(ranker.image, {"regions": regions})
        return np.asarray(out["embedding"], dtype=np.float32)

    async def embed_captions(self, ranker: RankerEntry, captions: Sequence[Sequence[int]]) -> np.ndarray:
        """Word ids (no BOS/EOS) → L2-normalised float32 [C, J]."""
        tokens, length = text_batch(
            captions, self.bos, self.pad, fixed_dim(self.manifest, ranker.text, "tokens", 0)
        )
        out = await self.backend.infer(ranker.text, {"tokens": tokens, "length": length})
        return np.asarray(out["embedding"], dtype=np.float32)

    async def embed_pixels(self, ranker: RankerEntry, images: np.ndarray) -> np.ndarray:
        """uint8 images → L2-normalised float32 [I, J] by a ranker that reads the image itself."""
        assert ranker.image_preprocessing is not None
        pixels = await asyncio.to_thread(prepare_images, images, ranker.image_preprocessing)
        out = await self.backend.infer(ranker.image, {"image": pixels})
        return np.asarray(out["embedding"], dtype=np.float32)

    async def embed_texts(self, ranker: RankerEntry, texts: Sequence[str]) -> np.ndarray:
        """Caption texts → L2-normalised float32 [C, J] by a ranker with its own tokenizer: BOS t1..tn
        EOS right-padded with its PAD, ``length`` = n + 2 (cut to the model's fixed T where it has one)."""
        assert ranker.tokens is not None
        vocab = self.ranker_tokens[ranker.name]
        spec = ranker.tokens
        limit = fixed_dim(self.manifest, ranker.text, "tokens", 0) or spec.max_tokens
        ids = [vocab.encode(t)[: (limit - 2) if limit else None] for t in texts]
        width = 2 + max((len(x) for x in ids), default=0)
        tokens = np.full((len(ids), width), spec.pad_id, dtype=np.int64)
        length = np.zeros((len(ids), 1), dtype=np.int64)
        for row, seq in enumerate(ids):
            tokens[row, : len(seq) + 2] = [spec.bos_id, *seq, spec.eos_id]
            length[row, 0] = len(seq) + 2
        out = await self.backend.infer(ranker.text, {"tokens": tokens, "length": length})
        return np.asarray(out["embedding"], dtype=np.float32)

    async def ranker_images(
        self, ranker: str, regions: np.ndarray, images: np.ndarray | None = None
    ) -> np.ndarray:
        """L2-normalised image embeddings float32 [I, J] by ``ranker``: of the ``regions`` [I, R, D], of
        the shared encoder's regions of ``images`` where ``regions`` are empty (a captioner with its own
        encoder), or of ``images`` themselves for a ranker that reads pixels."""
        entry = self.manifest.ranker(ranker)
        if entry.reads == "pixels":
            assert images is not None
            return await self.embed_pixels(entry, images)
        if not regions.size:
            assert images is not None
            regions = await self.encode_images(images)
        return await self.embed_images(entry, regions)

    async def ranker_texts(
        self, ranker: str, captions: Sequence[Sequence[int]], texts: Sequence[str] | None = None
    ) -> np.ndarray:
        """L2-normalised caption embeddings float32 [C, J] by ``ranker``: of word ids without BOS/EOS
        (``captions``, any length >= 1: partial captions too), or of their ``texts`` (for a ranker with
        its own tokenizer, and a word ranker of a subword captioner's captions, which reads them as
        words)."""
        entry = self.manifest.ranker(ranker)
        if entry.tokens is not None:
            assert texts is not None
            return await self.embed_texts(entry, texts)
        words = captions if texts is None else [self._words().encode(t) for t in texts]
        return await self.embed_captions(entry, words)

    async def rank(
        self,
        ranker: str,
        regions: np.ndarray,
        captions: Sequence[Sequence[Sequence[int]]],
        images: np.ndarray | None = None,
        texts: Sequence[Sequence[str]] | None = None,
    ) -> list[list[float]]:
        """Cosine between each image and each of its captions: one image call for all images
        (``ranker_images``), one text call for all captions (per image, word ids without BOS/EOS in
        ``captions``, or their ``texts``: ``ranker_texts``)."""
        flat = [c for per_image in captions for c in per_image]
        if not flat:
            return [[] for _ in captions]
        flat_texts = [t for per_image in texts for t in per_image] if texts is not None else None
        owner = np.repeat(np.arange(len(captions)), [len(c) for c in captions])
        image_emb, text_emb = await asyncio.gather(
            self.ranker_images(ranker, regions, images), self.ranker_texts(ranker, flat, flat_texts)
        )
        scores = np.einsum("cj,cj->c", text_emb, image_emb[owner])
        out: list[list[float]] = []
        start = 0
        for per_image in captions:
            out.append([float(s) for s in scores[start : start + len(per_image)]])
            start += len(per_image)
        return out
