"""The engine's settings: its own section (``EngineSettings``: the repository, the backend and the
precision, the request defaults and bounds, the scheduler's) and, joined to the backends' sections
(``service.backends.settings``), what loading and running the models reads (``CoreSettings``:
``CaptionEngine.from_settings``, the engine core ``python -m service.engine.core``). Fields keep the flat
names (``COMPCAP_MAX_BEAM_SIZE`` is ``max_beam_size``). Imports nothing of the HTTP kit, the gateway,
the shared state, the image URL policy or the command line (``tests/unit/repo/test_layering.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Self

from pydantic import Field, ValidationInfo, field_validator, model_validator

from service.backends.registry import get_backend
from service.backends.settings import BackendSettings
from service.manifest import MANIFEST_NAME, Precision, load_manifest
from service.sections import Section

MAX_BEAM_SIZE = 100  # re-ranking reads up to 100 candidates (BUTR+RR in Nikolaus et al., 2019: B = 100)


class EngineSettings(Section):
    """The engine's section: the repository, the backend that runs its models and their precision, the
    request defaults and bounds, and the scheduler's. The engine reads these names as they are."""

    title: ClassVar[str] = "Engine"

    repo: Path = Field(default=Path("model_repo"), description="model repository with manifest.json")
    backend: str = Field(
        default="onnxruntime",
        json_schema_extra={"doc_type": "a registered backend: onnxruntime, triton, null"},
        description="what runs the models: onnxruntime (embedded), triton (a Triton server at triton_url), "
        "or null (no models: outputs of the right shapes at zero cost whose captions end but mean "
        "nothing; it measures the gateway's own ceiling, `compcap bench --backend null`); any backend "
        "registered with service.backends.registry",
    )
    precision: Precision = Field(
        default="fp32",
        description="the models' precision: fp32, int8, fp16 or tf32 (the variants `compcap quantize "
        "[--precision fp16|tf32]` wrote and whose quality gate passed; a model without a variant serves "
        "FP32; int8 is for CPUs, fp16 for GPUs' tensor cores, tf32 lets the CUDA provider compute the "
        "admitted FP32 models in TF32, off otherwise). Another precision than fp32 on a repository "
        "without passed variants of it is a settings error",
    )
    default_beam_size: int = Field(
        default=5, ge=1, le=MAX_BEAM_SIZE, description="beam_size of a request that names none"
    )
    max_beam_size: int = Field(
        default=MAX_BEAM_SIZE,
        ge=1,
        le=MAX_BEAM_SIZE,
        description="largest beam_size a request may ask for; a wide request widens the shared beam "
        "batch while it decodes (one beam-100 client cut 32 beam-5 clients' captions/s by 44%)",
    )
    max_length_cap: int = Field(
        default=40, ge=1, le=512, description="upper bound for a request's max_length"
    )
    request_deadline_s: float | None = Field(
        default=None,
        gt=0,
        le=3600,
        json_schema_extra={"doc_type": "seconds, or unset: per captioner"},
        description="a caption request's deadline (504 past it), for every captioner; also the longest a "
        "request body may stop arriving (408) and the drain of a stopping gateway. Unset: 10 s, or for a "
        "captioner whose import measured its single caption, 30 times that where longer (a real-size "
        "import takes about a second per caption on two cores); the drain and uploads keep 10 s",
    )
    cross_request_batching: bool = Field(
        default=True, description="false: every request decodes alone (the benchmark's naive baseline)"
    )
    beam_cohorts: bool = Field(
        default=True,
        description="requests of beam size <= 8, <= 32 and wider keep separate beam arrays fed to the same "
        "step call (false: one array as wide as the widest request, as before)",
    )
    max_rows_per_step: int = Field(
        default=512, ge=1, le=65536, description="most beam rows in one <cap>_step call"
    )
    max_background_rows: int | None = Field(
        default=128,
        ge=1,
        le=65536,
        description="most beam rows background requests (probes, studies) may hold while any user "
        "request is in the scheduler; unset: no cap (offline studies)",
    )
    background_share: float = Field(
        default=0.25,
        gt=0.0,
        le=1.0,
        description="share of the time background requests may hold rows while users decode: after one "
        "held rows for t s, the next waits t × (1/share − 1) s (1 = no pacing; 0.25 kept 8 users' p50 "
        "within 1.03x of their p50 alone under a beam-100 probe, 1.72x without pacing)",
    )
    max_queue: int = Field(
        default=256, ge=1, le=100_000, description="requests waiting for admission before 503"
    )
    max_active_requests: int = Field(
        default=128, ge=1, le=100_000, description="requests decoding at once per captioner"
    )

    @field_validator("repo")
    @classmethod
    def _repo_has_manifest(cls, value: Path) -> Path:
        if not (value / MANIFEST_NAME).is_file():
            raise ValueError(
                f"{value} is not a model repository (no {MANIFEST_NAME}): point --repo or COMPCAP_REPO at one"
            )
        return value

    @field_validator("backend")
    @classmethod
    def _backend_registered(cls, value: str) -> str:
        get_backend(value)  # a ValueError names COMPCAP_BACKEND and the known backends
        return value

    @model_validator(mode="after")
    def _default_beam_within_max(self) -> Self:
        if self.default_beam_size > self.max_beam_size:
            raise ValueError(
                f"default_beam_size ({self.default_beam_size}) exceeds max_beam_size ({self.max_beam_size})"
            )
        return self

    @field_validator("precision")
    @classmethod
    def _precision_served(cls, value: Precision, info: ValidationInfo) -> Precision:
        repo = info.data.get("repo")  # absent when the repository itself is invalid
        if value != "fp32" and repo is not None:  # its variants of that precision passed their gate
            load_manifest(repo).served_models(value)
        return value


class CoreSettings(BackendSettings, EngineSettings):
    """The engine's section and the backends' together: what building the backend and running the
    engine reads (``CaptionEngine.from_settings``, ``CaptionEngine.from_repo``'s overrides, the engine
    core), checked by the chosen backend's record (Triton: ``triton_url``'s form)."""

    @model_validator(mode="after")
    def _backend_settings(self) -> Self:
        """The backend's own check of the settings it reads (Triton: ``triton_url``'s form)."""
        check = get_backend(self.backend).check
        if check is not None:
            check(self)
        return self
