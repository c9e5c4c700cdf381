"""The probe routes (``/v1/probes``, ``/v1/probe-sets``, ``/v1/probe-kinds``): thin — validate, hand
to ``ProbeService``, shape the job. Key-protected when ``COMPCAP_API_KEYS`` is set."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from fastapi import Depends, Response
from pydantic import BaseModel, ConfigDict, Field

from service.api.deps import EngineDep, from_state
from service.api.errors import ApiError
from service.api.feature import error_responses, feature_router
from service.api.requestlog import annotate
from service.probes.jobs.manager import ProbeJob
from service.probes.jobs.probe_service import NotComparable, ProbeService
from service.probes.kinds import KINDS, kind_names


class ProbeRequest(BaseModel):
    """A live compositional probe of a served captioner on one of the repository's probe sets."""

    model_config = ConfigDict(extra="forbid")

    kind: str = Field(
        max_length=64,
        description="probe kind (GET /v1/probe-kinds)",
        json_schema_extra=lambda schema: schema.update(enum=list(kind_names())),
    )
    model: str | None = Field(default=None, description="captioner (default: the repository's default)")
    rerank: str | bool | None = Field(
        default=None, description="ranker name, or false for plain beam search (default: the captioner's own)"
    )
    beam_size: int | None = Field(
        default=None, ge=1, description="beams (BUTR+RR in Nikolaus et al., 2019: 100)"
    )
    n_best: int | None = Field(
        default=None, ge=1, description="captions kept per image (Recall@K reads K of them)"
    )
    rerank_weight: float = Field(
        default=0.0, ge=0.0, description="weight of the normalised log-prob in re-ranking"
    )
    probe_set: str | None = Field(
        default=None, description="probe set name (default: the first of this kind)"
    )
    pairs: list[Annotated[str, Field(max_length=64)]] | None = Field(
        default=None,
        max_length=64,
        description="kinds that take pairs: pair labels to report, e.g. 'black cat'",
    )
    images: int | None = Field(default=None, ge=1, description="at most this many images per pair / bucket")


class ProbeProgress(BaseModel):
    done: int = Field(description="images decoded")
    total: int = Field(description="images the probe decodes")


class ProbeJobResponse(BaseModel):
    """A probe job (``partial`` and ``result`` are left out of listings)."""

    id: str
    kind: str
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"]
    error: str | None = Field(description="why a failed or cancelled job ended")
    params: dict[str, Any] = Field(description="the probe's resolved parameters")
    probe_set: str | None
    progress: ProbeProgress
    timings_s: dict[str, float]
    created_at: float
    started_at: float | None
    finished_at: float | None
    accepted_at: float | None = Field(
        default=None, description="when the result was accepted as the baseline alerts compare with"
    )
    replica: str = Field(default="", description="the gateway replica that runs (ran) the job")
    scheduled: bool = Field(default=False, description="started by the probe schedule")
    cancel_requested: bool = Field(
        default=False, description="a cancel was asked for and the job's replica has not ended it yet"
    )
    summary: str | None = Field(
        default=None, description="the kind's one-line summary of the result (or of the result so far)"
    )
    partial: dict[str, Any] | None = Field(default=None, description="the result so far, while it runs")
    result: dict[str, Any] | None = Field(
        default=None,
        description="the result (see README, Live probes): every figure X beside its X_interval (an "
        "Interval, or a mapping of them shaped as X), the per-image data they are drawn from "
        "(systematicity: first_hit / no_comb_first_hit per pair; productivity and substitutivity: "
        "per_image) and 'intervals' (how)",
    )


class Interval(BaseModel):
    """A figure with its 95% interval. Every figure ``X`` of a probe result has a sibling ``X_interval``
    of the same shape holding one of these where ``X`` holds a number (``null`` where ``X`` is null);
    the result's ``intervals`` says how they were drawn (level, resamples, seed, unit order)."""

    estimate: float = Field(description="the figure: the mean over groups of each group's mean")
    low: float = Field(description="lower bound of the 95% percentile bootstrap interval")
    high: float = Field(description="upper bound of the 95% percentile bootstrap interval")
    se: float = Field(description="bootstrap standard error")
    groups: int = Field(description="groups resampled (pairs; 1 for a per-pair or per-bucket figure)")
    units: int = Field(description="units resampled within the groups (images)")


class PairedTest(BaseModel):
    """One figure of two jobs on the same images: the difference (first − second) with its interval
    and the two-sided sign-flip permutation p-value."""

    difference: Interval = Field(description="first job's figure − the second's, on the shared images")
    p_value: float = Field(description="two-sided permutation p-value (1 for a job against itself)")
    permutations: int = Field(description="sign-flip permutations drawn")


class ProbeComparison(BaseModel):
    """Paired tests of two succeeded probe jobs of one kind and probe set on the images both scored."""

    a: str = Field(description="the first job's id")
    b: str = Field(description="the second job's id")
    kind: str
    probe_set: str | None
    figures: dict[str, PairedTest | None] = Field(
        description="figure -> its paired test (null: no shared unit). systematicity: "
        "'held_out.recall_at_5', 'seen.recall_at_5', 'all.recall_at_5' (every K), "
        "'false_composition_at_1'; productivity: '<bucketing>.<bucket>.<figure>'; substitutivity: "
        "'exact_replacement', '<row>.cider_d'"
    )
    intervals: dict[str, Any] = Field(description="how the intervals and p-values were drawn")


class ProbeJobList(BaseModel):
    jobs: list[ProbeJobResponse]


class ProbeSetInfo(BaseModel):
    """A probe set, with what its kind's record adds (``set_details``: e.g. its pairs and counts)."""

    model_config = ConfigDict(extra="allow")

    name: str
    kind: str
    images: int
    scene_graphs: bool
    source: str | None
    pairs: list[dict[str, Any]] | None = Field(
        default=None, description="kinds that take pairs: each pair and its image counts"
    )


class ProbeSetList(BaseModel):
    probe_sets: list[ProbeSetInfo]


class SetFormatInfo(BaseModel):
    name: str = Field(description="the format's name, the kind its sets carry in probe.json")
    keys: str = Field(description="its keys of probe.json")
    scene_graphs: bool = Field(description="whether its sets need scene_graphs.json")
    readers: list[str] = Field(description="what a loaded set of it offers (service.probesets)")


class FigureInfo(BaseModel):
    path: str = Field(description="dotted keys into the result, '*' for every key or index there")
    label: str = Field(description="its label, one '{}' per '*'")
    interval: str = Field(description="the path of its interval object")


class GaugeInfo(BaseModel):
    name: str
    help: str


class ProbeKindInfo(BaseModel):
    """A probe kind's record as its readers need it: the web page draws a result from ``view``, the
    client labels its ``figures`` (service.probes.kinds.view documents both)."""

    name: str
    description: str
    probe_sets: str = Field(description="the format of the probe sets it reads")
    takes_pairs: bool = Field(description="whether a request may name pairs")
    set_format: SetFormatInfo | None = Field(default=None, description="that format (null: not registered)")
    fields: dict[str, str] = Field(default_factory=dict, description="its result's keys and what each holds")
    figures: list[FigureInfo] = Field(default_factory=list, description="its headline figures")
    gauges: list[GaugeInfo] = Field(default_factory=list, description="the gauges its results set")
    view: dict[str, Any] = Field(
        default_factory=dict,
        description="how the web page draws a result: images (the launcher's field), sizing, chart "
        "(layout 'sides' or 'bars', its words and the result's keys it reads), shares",
    )


class ProbeKindList(BaseModel):
    kinds: list[ProbeKindInfo]


ProbesDep = Annotated[ProbeService, Depends(from_state("probes"))]
router = feature_router("probes")
_ERRORS = error_responses(
    "probe jobs",
    {
        404: "unknown model, ranker, probe set or job",
        409: "the job has not succeeded (accept)",
        422: "invalid field, or a probe set that does not fit the kind",
        503: "models not loaded yet",
    },
)


async def _job(probes: ProbesDep, job_id: str) -> ProbeJob:
    job = await probes.jobs.get(job_id)
    if job is None:
        raise ApiError(404, "unknown_job", f"no probe job {job_id!r}")
    return job


@router.post("/v1/probes", status_code=202, responses=_ERRORS, response_model=ProbeJobResponse)
async def start_probe(
    body: ProbeRequest, engine: EngineDep, probes: ProbesDep, response: Response
) -> dict[str, Any]:
    """Start a probe job; poll ``GET /v1/probes/{id}`` (also in the ``Location`` header)."""
    search = body.model_dump(include={"model", "rerank", "beam_size", "n_best", "rerank_weight"})
    spec = probes.spec(
        engine, body.kind, search, probe_set=body.probe_set, pairs=body.pairs, images=body.images
    )
    job = await probes.start(engine, spec)
    annotate(model=spec.model, probe=body.kind)
    response.headers["Location"] = f"/v1/probes/{job.id}"
    return job.view()


@router.get("/v1/probes", responses=_ERRORS, response_model=ProbeJobList)
async def list_probes(probes: ProbesDep) -> dict[str, Any]:
    """Recent probe jobs of every replica, newest first (without their results)."""
    return {"jobs": [job.view(full=False) for job in await probes.jobs.recent()]}


@router.get("/v1/probes/{job_id}", responses=_ERRORS, response_model=ProbeJobResponse)
async def get_probe(job_id: str, probes: ProbesDep) -> dict[str, Any]:
    """A probe job: status, progress, partial result while it runs, the result when done."""
    return (await _job(probes, job_id)).view()


@router.delete("/v1/probes/{job_id}", responses=_ERRORS, response_model=ProbeJobResponse)
async def cancel_probe(job_id: str, probes: ProbesDep) -> dict[str, Any]:
    """Cancel a probe job (its decoding requests are dropped and their rows freed); a finished job is
    returned as it is. A job another replica runs is cancelled at that replica's next heartbeat: the
    answer waits for it (a few seconds at most), else shows ``cancel_requested``."""
    await _job(probes, job_id)
    job = await probes.jobs.cancel(job_id)
    if job is None:
        raise ApiError(404, "unknown_job", f"no probe job {job_id!r}")
    return job.view()


@router.post("/v1/probes/{job_id}/accept", responses=_ERRORS, response_model=ProbeJobResponse)
async def accept_probe(job_id: str, probes: ProbesDep) -> dict[str, Any]:
    """Accept a succeeded probe's result as the baseline: its held-out and seen mean Recall@K become
    ``compcap_probe_accepted_recall_at_k_mean``, which the probe alert compares later runs with. Kept
    in the shared state, so every replica, and a restarted one, keeps the baseline."""
    try:
        return (await probes.accept(await _job(probes, job_id))).view()
    except ValueError as exc:
        raise ApiError(409, "job_not_succeeded", str(exc)) from None


_COMPARE_ERRORS = error_responses(
    "probe jobs",
    {
        404: "unknown job",
        409: "a job has not succeeded, or the jobs are not comparable (kind, probe set, no shared image)",
    },
)


@router.get(
    "/v1/probes/{job_id}/compare/{other_id}", responses=_COMPARE_ERRORS, response_model=ProbeComparison
)
async def compare_probes(job_id: str, other_id: str, probes: ProbesDep) -> dict[str, Any]:
    """Paired tests of two succeeded probe jobs of one kind and probe set on the images both scored:
    per headline figure (e.g. held-out Recall@5) the difference ``job_id`` − ``other_id`` with its 95%
    bootstrap interval and the sign-flip permutation p-value."""
    a, b = await _job(probes, job_id), await _job(probes, other_id)
    try:
        return await asyncio.to_thread(probes.compare, a, b)
    except NotComparable as exc:
        raise ApiError(409, exc.code, str(exc)) from None


@router.get(
    "/v1/probe-sets", responses=_ERRORS, response_model=ProbeSetList, response_model_exclude_none=True
)
async def probe_sets(probes: ProbesDep) -> dict[str, Any]:
    """The repository's probe sets: kind, images, whether they carry scene graphs, their pairs."""
    out = []
    for s in probes.sets().values():
        entry: dict[str, Any] = {
            "name": s.name,
            "kind": s.kind,
            "images": len(s.image_ids),
            "scene_graphs": s.has_scene_graphs,
            "source": s.info.get("source"),
        }
        for kind in KINDS.values():
            if kind.sets == s.kind and kind.set_details is not None:
                entry.update(kind.set_details(s))
        out.append(entry)
    return {"probe_sets": out}


@router.get("/v1/probe-kinds", responses=_ERRORS, response_model=ProbeKindList)
async def probe_kinds() -> dict[str, Any]:
    """The kinds of probe this gateway runs: name, what it measures, the probe sets it reads and their
    format, whether a request may name pairs, its result's fields, headline figures and gauges, and how
    the web page draws its result."""
    return {"kinds": [kind.describe() for kind in KINDS.values()]}
