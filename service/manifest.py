"""The model contract: ``model_repo/manifest.json``, written by ``export.packaging.triton_repo`` (and
``compcap import``) and read by the service.

Tensor dims exclude the implicit batch dimension for models with ``max_batch_size > 0`` and use -1 for
variable sizes, as in Triton's ``config.pbtxt``.

Version 2 adds what an imported captioner has of its own (README, "Bring your own model"): its visual
encoder (``init`` names a ``captioner_encoder`` model that reads the image, not the shared
``visual_encoder``'s regions) with the image preprocessing it was trained with (``image``), and its
subword tokenizer (``tokens``: a ``tokenizer.json``, ids of its start, end and padding tokens).
Without them a captioner is read as in version 1, so repositories written before load unchanged.

Version 3 of a step (inputs ``state_new`` and ``state_index`` beside ``state``): the step gathers each
row's decoder state from the previous call's ``state_out`` and the new images' initial states itself
(``export.packaging.state_gather``), so that the state can stay on the model's device; the engine reads which
a step takes from its inputs, and serves a step without them as before (``compcap upgrade`` rewrites
a repository's steps).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal, Protocol, TypeVar, get_args

from pydantic import BaseModel, Field, model_validator

MANIFEST_NAME = "manifest.json"
# the probe sets written into an already built repository (``compcap probesets``/``probeset --repo``) are
# listed here, beside them, not in manifest.json: registering them leaves the repository's own files (and
# a checkout of the shipped one) unchanged
PROBE_INDEX = "probes/index.json"
FORMAT_VERSION = 1  # what a build writes: every captioner on the shared encoder and the word vocabulary
FORMAT_VERSIONS = (1, 2)  # 2: with captioners of their own encoder or tokenizer (compcap import)

Role = Literal[
    "visual_encoder",
    "captioner_init",
    "captioner_encoder",
    "captioner_step",
    "ranker_image",
    "ranker_pixels",
    "ranker_text",
]
DType = Literal["UINT8", "FP32", "INT64"]

# The tensors each role exchanges with the runner (``service.engine.runner``): inputs, outputs it reads.
# A model may output more (a step model's ``attention`` is optional); it must not take other inputs.
ROLE_TENSORS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "visual_encoder": (("image",), ("regions",)),
    "captioner_init": (("regions",), ("memory", "state")),
    "captioner_encoder": (("image",), ("memory", "state")),
    "captioner_step": (("memory", "image_index", "tokens", "length", "state"), ("logprobs", "state_out")),
    "ranker_image": (("regions",), ("embedding",)),
    "ranker_pixels": (("image",), ("embedding",)),
    "ranker_text": (("tokens", "length"), ("embedding",)),
}
# Inputs a model of a role may take besides: a step's ``top_k`` (it returns each row's best words,
# ``export.packaging.topk``), and version 3's ``state_new`` and ``state_index`` (it gathers its rows'
# decoder states itself from the last call's ``state_out``, ``export.packaging.state_gather``; the two come
# together).
ROLE_OPTIONAL_INPUTS: dict[str, tuple[str, ...]] = {"captioner_step": ("top_k", "state_new", "state_index")}


class _Named(Protocol):
    @property
    def name(self) -> str: ...


N = TypeVar("N", bound=_Named)


def named(entries: Iterable[N], name: str) -> N:
    """The first of ``entries`` called ``name`` (``KeyError`` when none is)."""
    for entry in entries:
        if entry.name == name:
            return entry
    raise KeyError(name)


class TensorSpec(BaseModel):
    name: str
    dtype: DType
    dims: list[int]


class ModelEntry(BaseModel):
    """One ONNX model in the repository: ``<repo>/<name>/1/model.onnx`` + ``config.pbtxt``."""

    name: str
    role: Role
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    max_batch_size: int = Field(ge=0)
    owner: str = Field(description="the captioner or ranker this model belongs to ('' for shared)")
    program: str | None = Field(
        default=None,
        description="its torch.export program (same tensors; the encoder's takes float32 pixels), "
        "relative to the repository: what gradient explanations run (``service.explain``)",
    )

    def path(self, repo: str | Path) -> Path:
        return Path(repo) / self.name / "1" / "model.onnx"

    @property
    def gathers_state(self) -> bool:
        """A step of version 3: it takes its rows' decoder states by reference (``state_index``)."""
        return any(spec.name == "state_index" for spec in self.inputs)


class HeldOutPair(BaseModel):
    kind: Literal["adjective", "verb"]
    modifier: str
    noun: str


EXTERNAL_SPLIT = "external"  # an imported model's split: what it was trained on is not known here


class Training(BaseModel):
    split: str = Field(description="'full', e.g. 'systematicity/1', or 'external' (an imported model)")
    held_out_pairs: list[HeldOutPair] = []
    held_out_declared: bool = Field(
        default=False,
        description="an imported model's held_out_pairs were declared (--held-out-pairs), even as none",
    )
    dataset: str = ""
    images: int = 0
    epochs: int = Field(default=0, description="epochs run")
    seconds: float = 0.0
    max_epochs: int | None = Field(default=None, description="the epoch cap")
    selected_epoch: int | None = Field(
        default=None, description="1-based epoch whose weights were kept, by validation BLEU-4"
    )
    val_bleu4: list[float] = Field(default_factory=list, description="greedy val BLEU-4 after each epoch")
    val_images: int = 0

    @property
    def held_out_known(self) -> bool:
        """Whether the pairs its training held out — and so those it saw — are known: always for a model
        trained here, for an imported one only when its import declared them (``--held-out-pairs``)."""
        return self.split != EXTERNAL_SPLIT or self.held_out_declared or bool(self.held_out_pairs)


class TokenizerSpec(BaseModel):
    """A subword captioner's tokens (version 2): ``file`` a ``tokenizers`` ``tokenizer.json`` relative to
    the repository; every prefix starts with ``bos_id`` (the decoder start token), a caption ends at
    ``eos_id``, ``pad_id`` pads. Caption text is the tokenizer's decoding."""

    kind: Literal["subword"] = "subword"
    file: str
    size: int = Field(gt=0)
    bos_id: int = Field(ge=0)
    eos_id: int = Field(ge=0)
    pad_id: int = Field(ge=0)
    max_tokens: int | None = Field(
        default=None, gt=2, description="the longest sequence its model reads, start and end included"
    )


class Preprocessing(BaseModel):
    """A captioner's own image preprocessing (version 2): images are resized to ``height`` × ``width``
    with ``resample`` (or first to ``resize`` and then cropped to ``height`` × ``width`` at the centre,
    an image processor's shortest-edge resize and centre crop) before its encoder; the rescale and
    mean/std normalisation (from the snapshot's image processor, recorded here) run inside the encoder
    graph."""

    height: int = Field(gt=0)
    width: int = Field(gt=0)
    resize: list[int] | None = Field(default=None, description="[height, width] before a centre crop")
    resample: Literal["nearest", "bilinear", "bicubic"] = "bilinear"
    rescale: float = 1 / 255
    mean: list[float] = Field(default_factory=lambda: [0.0, 0.0, 0.0])
    std: list[float] = Field(default_factory=lambda: [1.0, 1.0, 1.0])


class DomainSpec(BaseModel):
    """Where a captioner's ``in_domain`` calibration is (``service.engine.domain``), and on what."""

    file: str = Field(description="the calibration arrays, relative to the repository (domain/<name>.npz)")
    quantile: float = Field(gt=0, lt=0.5, description="each test flags this share of its held-out images")
    fit_images: int = Field(ge=2)
    held_images: int = Field(ge=2)
    source: str = Field(description="the validation images, e.g. 'sceneworld(seed=123456)' or a folder")


class CaptionerEntry(BaseModel):
    name: str
    architecture: str
    init: str = Field(description="its captioner_init model (regions) or captioner_encoder model (images)")
    step: str
    reads: Literal["last_token", "prefix"] = Field(description="what <cap>_step reads from `tokens`")
    memory_dims: list[int] = Field(description="[M, Dm]")
    state_dim: int
    max_length: int = Field(
        description="longest caption the model was trained for: words, or tokens for a subword captioner"
    )
    ranker: str | None = Field(default=None, description="jointly trained ranking head, if any")
    training: Training
    quality: dict[str, float] = Field(default_factory=dict, description="BLEU-4, CIDEr-D, ... on test")
    image: Preprocessing | None = Field(
        default=None, description="version 2: its own encoder's preprocessing (None: the shared encoder)"
    )
    tokens: TokenizerSpec | None = Field(
        default=None, description="version 2: its subword tokenizer (None: the repository's word vocabulary)"
    )
    source: str = Field(
        default="", description="where it came from: '' (trained here) or the snapshot it was imported from"
    )
    search: Literal["compcap", "transformers"] = Field(
        default="compcap",
        description="version 2: which beam search it decodes with: CompCap's (as in the papers) or that of "
        "transformers' generate() (an imported captioner: its captions are those of its own library)",
    )
    early_stopping: bool = Field(default=False, description="transformers search: its early_stopping")
    image_cache: bool = Field(
        default=False,
        description="version 2: its step does not project the cross-attention keys and values once per row: "
        "once per image of a call, or (kv_cache) not at all (the same outputs; kept at import where measured "
        "faster)",
    )
    kv_cache: bool = Field(
        default=False,
        description="version 3: its step (one with a state_index input) carries each row's self-attention "
        "keys and values in its state (state_dim = layers x 2 x heads x max tokens x head_dim), runs the "
        "decoder on the row's last token only, and folds the cross-attention into its query and output (the "
        "same outputs; kept at import where measured faster)",
    )
    single_caption_ms: float | None = Field(
        default=None,
        gt=0,
        description="version 2: one image's caption (beam 5, its longest caption) through the engine when it "
        "was imported, on the machine that imported it: its requests' deadline scales with it",
    )
    memory_grid: int | None = Field(
        default=None,
        description="version 2: its memory slots from memory_offset on are a g × g row-major grid over the "
        "image its encoder reads (a ViT's patches; the slots before, e.g. its class token, are not)",
    )
    memory_offset: int = Field(default=0, ge=0)
    domain: DomainSpec | None = Field(
        default=None, description="its typicality calibration (compcap calibrate)"
    )


class RankerEntry(BaseModel):
    name: str
    architecture: str
    image: str
    text: str
    embedding_dim: int
    text_tokens: Literal["bos_words", "bos_subwords_eos"] = Field(
        default="bos_words",
        description="text input: BOS w1..wn right-padded with PAD, length = n + 1 (the word vocabulary); "
        "or, version 2, its own tokenizer's BOS t1..tn EOS right-padded, length = n + 2",
    )
    joint_with: str | None = None
    training: Training
    reads: Literal["regions", "pixels"] = Field(
        default="regions",
        description="version 2: its image model reads the shared encoder's regions, or the image itself "
        "(a ranker_pixels model, e.g. an imported CLIP) prepared as image_preprocessing says",
    )
    image_preprocessing: Preprocessing | None = None
    tokens: TokenizerSpec | None = Field(default=None, description="version 2: its own tokenizer")
    source: str = ""


class ImageSpec(BaseModel):
    height: int
    width: int


class VocabularySpec(BaseModel):
    file: str = "vocab.json"
    size: int
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    unk_id: int = 3


class ProbeSetEntry(BaseModel):
    """One probe set of the repository: ``<repo>/<path>/probe.json`` + COCO captions + images (the
    on-disk format is ``service.probesets``)."""

    name: str
    kind: str = Field(
        pattern=r"^[a-z][a-z0-9_]*$",
        description="its format: systematicity, productivity, substitutivity, counterfactual, or one a "
        "probe kind registers (service.probesets checks it when the set is loaded)",
    )
    path: str = Field(description="folder relative to the repository, e.g. 'probes/systematicity'")
    images: int = Field(ge=0)
    scene_graphs: bool = False
    source: str = Field(default="", description="'sceneworld(seed=...)' or the COCO folder it came from")
    world_seed: int | None = Field(default=None, description="SceneWorld seed of the probe images")


# the precisions a repository may serve its models at (``COMPCAP_PRECISION``): its FP32 models, or the
# variants ``compcap quantize [--precision int8|fp16]`` wrote beside them (``Manifest.precision_variants``)
Precision = Literal["fp32", "int8", "fp16", "tf32"]
PRECISIONS: tuple[str, ...] = get_args(Precision)


class PrecisionGate(BaseModel):
    """The quality gate of a variant set (``compcap quantize``): the FP32 models and the variants decoded
    through the served engine on the same images. A set that fails it is never served."""

    passed: bool
    thresholds: dict[str, float] = Field(
        default_factory=dict,
        description="cider_d_rel_change (max |relative change|), top1_agreement (min share), "
        "recall5_points (max |change| of the systematicity mean Recall@5, in points)",
    )
    runs: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description="per run (captioner or captioner+ranker) on the evaluation world: cider_d_fp32, "
        "cider_d_<precision> (cider_d_int8, cider_d_fp16), cider_d_rel_change, top1_agreement, images",
    )
    systematicity: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description="per run on the systematicity probe set: mean Recall@5 of the held-out pairs "
        "(recall5_held_out_fp32, recall5_held_out_<precision>, recall5_held_out_delta_points), of the "
        "seen pairs likewise (recall5_seen_...)",
    )
    failures: list[str] = Field(default_factory=list, description="each threshold the set missed")
    notes: list[str] = Field(default_factory=list, description="what was not measured, and why")


class PrecisionVariant(BaseModel):
    """A repository's models at another precision (int8, fp16): each a model of its own directory
    (``<name>_<precision>/config.pbtxt`` + ``1/model.onnx``, e.g. ``butr_step_int8``), listed in
    ``Manifest.models`` only while its set passed its gate. Figures of the variants are keyed by the
    precision's name (``int8_ms``, ``cider_d_fp16``), as the first sets (int8) were written."""

    models: dict[str, str] = Field(description="FP32 model name -> the name of its variant model")
    methods: dict[str, str] = Field(
        default_factory=dict, description="FP32 model name -> how it was made (dynamic, static)"
    )
    skipped: dict[str, str] = Field(
        default_factory=dict, description="FP32 model name -> why it has no variant (it serves FP32)"
    )
    speed: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description="per FP32 model: fp32_ms, <precision>_ms (int8_ms, fp16_ms), speedup, batch, timed "
        "on `device`",
    )
    machine: str = Field(default="", description="the CPU the variants were timed and gated on")
    device: str = Field(
        default="cpu",
        description="the device `speed` was timed on: cpu (onnxruntime's CPU provider; every set so far) "
        "or cuda. FP16 timed on a CPU says nothing about a GPU",
    )
    gate: PrecisionGate | None = Field(default=None, description="None: not gated (never served)")

    @property
    def passed(self) -> bool:
        return self.gate is not None and self.gate.passed


class Manifest(BaseModel):
    format_version: int = FORMAT_VERSION
    preset: str
    image: ImageSpec
    vocabulary: VocabularySpec
    default_captioner: str
    models: list[ModelEntry]
    captioners: list[CaptionerEntry]
    rankers: list[RankerEntry]
    probe_sets: list[ProbeSetEntry] = []
    precision_variants: dict[str, PrecisionVariant] = Field(
        default_factory=dict, description="per precision other than fp32 (int8, fp16): its variant models"
    )

    @model_validator(mode="after")
    def _references_resolve(self) -> Manifest:
        names = {m.name for m in self.models}
        if self.format_version not in FORMAT_VERSIONS:
            raise ValueError(f"format_version {self.format_version} is not one of {FORMAT_VERSIONS}")
        roles = {m.name: m.role for m in self.models}
        for cap in self.captioners:
            for ref in (cap.init, cap.step):
                if ref not in names:
                    raise ValueError(f"captioner {cap.name!r} names unknown model {ref!r}")
            wanted = "captioner_encoder" if cap.image is not None else "captioner_init"
            if roles[cap.init] != wanted:
                raise ValueError(f"captioner {cap.name!r}: init model {cap.init!r} must be a {wanted}")
            if (cap.image is not None or cap.tokens is not None) and self.format_version < 2:
                raise ValueError(f"captioner {cap.name!r} has version 2 fields but format_version is 1")
            if cap.ranker is not None and cap.ranker not in {r.name for r in self.rankers}:
                raise ValueError(f"captioner {cap.name!r} names unknown ranker {cap.ranker!r}")
        for rk in self.rankers:
            for ref in (rk.image, rk.text):
                if ref not in names:
                    raise ValueError(f"ranker {rk.name!r} names unknown model {ref!r}")
            wanted = "ranker_pixels" if rk.reads == "pixels" else "ranker_image"
            if roles[rk.image] != wanted:
                raise ValueError(f"ranker {rk.name!r}: image model {rk.image!r} must be a {wanted}")
            if (rk.reads == "pixels") != (rk.image_preprocessing is not None):
                raise ValueError(f"ranker {rk.name!r}: image_preprocessing goes with reads 'pixels'")
            if (rk.text_tokens == "bos_subwords_eos") != (rk.tokens is not None):
                raise ValueError(f"ranker {rk.name!r}: tokens go with text_tokens 'bos_subwords_eos'")
            if (rk.reads == "pixels" or rk.tokens is not None) and self.format_version < 2:
                raise ValueError(f"ranker {rk.name!r} has version 2 fields but format_version is 1")
        if self.default_captioner not in {c.name for c in self.captioners}:
            raise ValueError(f"default_captioner {self.default_captioner!r} is not a captioner")
        if "visual_encoder" not in names:
            raise ValueError("the repository has no visual_encoder")
        probe_names = [p.name for p in self.probe_sets]
        if len(set(probe_names)) != len(probe_names):
            raise ValueError(f"probe set names repeat: {probe_names}")
        self._variants_resolve(roles)
        return self

    def _variants_resolve(self, roles: Mapping[str, str]) -> None:
        """A passed variant is a model of the same role as its FP32 model; a failed one is not served."""
        variants = {v for p in self.precision_variants.values() for v in p.models.values()}
        for precision, variant_set in self.precision_variants.items():
            if precision not in PRECISIONS or precision == "fp32":
                raise ValueError(f"precision_variants: {precision!r} is not one of {PRECISIONS[1:]}")
            for source, variant in variant_set.models.items():
                if source not in roles or source in variants:
                    raise ValueError(f"precision_variants.{precision}: {source!r} is not an FP32 model")
                if variant_set.passed and roles.get(variant) != roles[source]:
                    raise ValueError(
                        f"precision_variants.{precision}: {variant!r} must be a {roles[source]} model "
                        "(its set passed its gate)"
                    )
                if not variant_set.passed and variant in roles:
                    raise ValueError(
                        f"precision_variants.{precision}: {variant!r} failed its gate: it cannot be a model"
                    )

    def served_models(self, precision: str = "fp32") -> dict[str, str]:
        """FP32 model name -> the model that serves it at ``precision`` (``COMPCAP_PRECISION``): its
        variant where the variant set passed its gate, else itself (a model left in FP32). ``ValueError``
        naming the setting when the repository has no passed variants of that precision."""
        variants = {v for p in self.precision_variants.values() for v in p.models.values()}
        names = {m.name: m.name for m in self.models if m.name not in variants}
        if precision == "fp32":
            return names
        found = self.precision_variants.get(precision)
        if precision not in PRECISIONS:
            raise ValueError(f"COMPCAP_PRECISION={precision!r}: expected one of {', '.join(PRECISIONS)}")
        if found is None or not found.passed:
            if found is None:
                why = "has none (`compcap quantize --repo REPO` writes and gates them)"
            elif found.gate is None:
                why = "has a set that was never gated"
            else:
                why = "has a set that failed its quality gate: " + "; ".join(found.gate.failures)
            raise ValueError(
                f"COMPCAP_PRECISION={precision}: the repository serves no {precision} models: it {why}; "
                "serve COMPCAP_PRECISION=fp32"
            )
        return {name: found.models.get(name, name) for name in names}

    def model(self, name: str) -> ModelEntry:
        return named(self.models, name)

    def captioner(self, name: str) -> CaptionerEntry:
        return named(self.captioners, name)

    def ranker(self, name: str) -> RankerEntry:
        return named(self.rankers, name)

    def probe_set(self, name: str) -> ProbeSetEntry:
        return named(self.probe_sets, name)


def repo_version(repo: str | Path) -> str:
    """What a running gateway serves of ``repo``, as 16 hex characters: the sha256 of its manifest.json
    and its probe index (``PROBE_INDEX``; absent = empty). Importing or quantizing a model, or building
    probe sets, changes it."""
    digest = hashlib.sha256((Path(repo) / MANIFEST_NAME).read_bytes())
    index = Path(repo) / PROBE_INDEX
    digest.update(b"\0" + (index.read_bytes() if index.is_file() else b""))
    return digest.hexdigest()[:16]


def same_models(a: Manifest, b: Manifest) -> bool:
    """Whether ``a`` and ``b`` describe the same models (they may list other probe sets)."""
    return a.model_dump(exclude={"probe_sets"}) == b.model_dump(exclude={"probe_sets"})


def load_manifest(repo: str | Path) -> Manifest:
    path = Path(repo) / MANIFEST_NAME
    return Manifest.model_validate_json(path.read_text(encoding="utf-8"))


class ProbeIndex(BaseModel):
    """``<repo>/probes/index.json``: the probe sets registered after the repository was built."""

    format: Literal[1] = 1
    probe_sets: list[ProbeSetEntry] = Field(default_factory=list)


def load_probe_index(repo: str | Path) -> list[ProbeSetEntry]:
    """The probe sets ``<repo>/probes/index.json`` lists (none when it does not exist)."""
    path = Path(repo) / PROBE_INDEX
    if not path.is_file():
        return []
    return ProbeIndex.model_validate_json(path.read_text(encoding="utf-8")).probe_sets


def repo_probe_set_entries(repo: str | Path, manifest: Manifest) -> list[ProbeSetEntry]:
    """Every probe set of the repository: the manifest's (written by its build), then those of its probe
    index; an index entry replaces the manifest's of the same name (the set was rewritten)."""
    registered = load_probe_index(repo)
    names = {e.name for e in registered}
    return [e for e in manifest.probe_sets if e.name not in names] + registered


def repo_probe_set_entry(repo: str | Path, manifest: Manifest, name: str) -> ProbeSetEntry:
    """The repository's probe set ``name`` (``KeyError`` when it has none of that name)."""
    return named(repo_probe_set_entries(repo, manifest), name)
