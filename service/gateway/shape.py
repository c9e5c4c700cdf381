"""Engine results and manifest entries shaped into the API's response schemas (the only module that
reads ``CaptionOutput`` / ``Caption`` fields)."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import Field

from service.api.schemas import (
    CaptionerInfo,
    CaptionOut,
    CaptionResponse,
    ImageResult,
    ImageShape,
    ModelsResponse,
    RankerInfo,
    Timings,
)
from service.backends.device import summary as device_summary
from service.engine.engine import Caption, CaptionOutput
from service.manifest import CaptionerEntry, Manifest


class CaptionerListing(CaptionerInfo):
    """A captioner of ``GET /v1/models`` with what a user should know before trusting its captions
    (the web page's notice): where it came from, the images it reads, whether its captions say if an
    image is like those it was made for."""

    source: str = Field(
        description="'' when trained here (compcap-lab build), else the snapshot it came from"
    )
    image: ImageShape = Field(description="the size its encoder reads: images are resized to it")
    domain_calibration: str | None = Field(
        description="the images its in_domain flag was calibrated on (compcap calibrate); null: not "
        "calibrated, and its captions' in_domain is null"
    )


class ModelsListing(ModelsResponse):
    """``GET /v1/models``: ``ModelsResponse`` with each captioner's ``CaptionerListing``."""

    captioners: list[CaptionerListing]  # type: ignore[assignment]  # narrower: validated and documented as such
    precision: str = Field(default="fp32", description="the models' precision (COMPCAP_PRECISION)")
    quantized_models: list[str] = Field(
        default_factory=list,
        description="the models served by their quantized variant at this precision (the rest run FP32)",
    )
    device: str = Field(
        default="none",
        description="where the models run: cuda, cpu, mixed (see devices), or none before they are loaded",
    )
    devices: dict[str, str] = Field(
        default_factory=dict,
        description="model -> the device its calls run on, as the backend found it (the embedded "
        "backend: each onnxruntime session's providers, not the ones asked for; Triton: the instance "
        "kind the server reports)",
    )


def _captions(caps: list[Caption]) -> list[CaptionOut]:
    return [
        CaptionOut(
            text=c.text,
            tokens=c.tokens,
            logprob=c.logprob,
            normalized_logprob=c.normalized_logprob,
            ranker_score=c.ranker_score,
            beam_rank=c.beam_rank,
        )
        for c in caps
    ]


def caption_response(
    out: CaptionOutput,
    original: list[list[Caption]] | None,
    decode_images_ms: float,
    total_ms: float,
) -> CaptionResponse:
    """``original``: synonym_substitution's O captions per image, next to S (``out``)."""
    p = out.params
    results = [
        ImageResult(
            index=i,
            caption=caps[0].text if caps else "",
            captions=_captions(caps),
            original_caption=None if original is None else (original[i][0].text if original[i] else ""),
            original_captions=None if original is None else _captions(original[i]),
            in_domain=None if out.domain is None else out.domain[1][i],
            domain_score=None if out.domain is None else round(out.domain[0][i], 4),
        )
        for i, caps in enumerate(out.results)
    ]
    t = out.timings_ms
    return CaptionResponse(
        model=p.model,
        ranker=p.ranker,
        beam_size=p.beam_size,
        n_best=p.n_best,
        max_length=p.max_length,
        length_penalty=p.length_penalty,
        rerank_weight=p.rerank_weight,
        hooks=list(p.hook_names),
        results=results,
        timings_ms=Timings(
            decode_images=decode_images_ms,
            encode=t.get("encode", 0.0),
            decode=t.get("decode", 0.0),
            rerank=t.get("rerank", 0.0),
            total=total_ms,
        ),
    )


def _captioner(c: CaptionerEntry, m: Manifest) -> CaptionerListing:
    size = c.image or m.image  # its own preprocessing (an imported captioner) or the shared encoder's
    return CaptionerListing(
        name=c.name,
        architecture=c.architecture,
        reads=c.reads,
        max_length=c.max_length,
        default_ranker=c.ranker,
        training=c.training,
        quality=c.quality,
        source=c.source,
        image=ImageShape(height=size.height, width=size.width),
        domain_calibration=c.domain.source if c.domain is not None else None,
    )


def models_response(
    m: Manifest, precision: str = "fp32", devices: Mapping[str, str] | None = None
) -> ModelsListing:
    served = m.served_models(precision)
    devices = dict(devices or {})
    return ModelsListing(
        precision=precision,
        device=device_summary(devices),
        devices=devices,
        quantized_models=sorted(name for name, model in served.items() if model != name),
        preset=m.preset,
        default_captioner=m.default_captioner,
        image=ImageShape(height=m.image.height, width=m.image.width),
        captioners=[_captioner(c, m) for c in m.captioners],
        rankers=[RankerInfo.model_validate(r, from_attributes=True) for r in m.rankers],
    )
