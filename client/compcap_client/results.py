"""Typed answers of the gateway: frozen dataclasses mirroring the response schemas of
``service.api.schemas`` (captions, models), ``service.explain.schemas`` (``Explanation``),
``service.compare.schemas`` (``Comparison``) and the probes' (``ProbeJob``, ``ProbeKindInfo``), read
with ``from_json`` — tolerant of fields a newer gateway adds. Plain dataclasses, so that the client
imports neither pydantic nor the server.

A probe job's ``result`` stays the kind's own JSON: the client knows no kind. It reads any result the
same way, offline too (a job saved as JSON and read back with ``ProbeJob.from_json``): ``interval(*path)``
finds a figure's 95% interval by the results' naming convention, and ``figures()`` lists every figure
that has one. With the kind's record (``ProbeKindInfo``, from ``GET /v1/probe-kinds``: the client's
``probe_kind(name)`` fetches it once), ``figures(kind)`` gives the kind's own headline figures under
their labels, with the intervals where the record says they are.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, TypeVar

TERMINAL_STATUSES = frozenset({"succeeded", "failed", "cancelled"})
D = TypeVar("D")


def _known(cls: type[D], d: Mapping[str, Any], **converted: Any) -> D:
    """``cls`` from the keys of ``d`` it has a field for (others ignored), ``converted`` overriding."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in d.items() if k in names and k not in converted}, **converted)


@dataclass(frozen=True)
class Caption:
    """One caption of an answer."""

    text: str
    tokens: list[int]
    logprob: float
    normalized_logprob: float
    ranker_score: float | None
    beam_rank: int  # 1 = best by normalised log-prob

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Caption:
        return cls(
            text=d["text"],
            tokens=list(d.get("tokens", [])),
            logprob=float(d["logprob"]),
            normalized_logprob=float(d["normalized_logprob"]),
            ranker_score=None if d.get("ranker_score") is None else float(d["ranker_score"]),
            beam_rank=int(d["beam_rank"]),
        )


@dataclass(frozen=True)
class ImageCaptions:
    """One image's captions in final order (ranker order when re-ranked); ``original_*``: the captions
    without substitution when the ``synonym_substitution`` hook ran; ``in_domain``/``domain_score``
    when the captioner is calibrated for out-of-domain images."""

    index: int
    caption: str
    captions: list[Caption]
    original_caption: str | None = None
    original_captions: list[Caption] | None = None
    in_domain: bool | None = None  # like the captioner's validation images (None: not calibrated)
    domain_score: float | None = None  # typicality distance over the calibrated threshold (<= 1: in)

    @property
    def texts(self) -> list[str]:
        return [c.text for c in self.captions]

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ImageCaptions:
        original = d.get("original_captions")
        return cls(
            index=int(d["index"]),
            caption=d["caption"],
            captions=[Caption.from_json(c) for c in d["captions"]],
            original_caption=d.get("original_caption"),
            original_captions=None if original is None else [Caption.from_json(c) for c in original],
            in_domain=d.get("in_domain"),
            domain_score=None if d.get("domain_score") is None else float(d["domain_score"]),
        )


@dataclass(frozen=True)
class Timings:
    decode_images: float
    encode: float
    decode: float
    rerank: float
    total: float

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Timings:
        return cls(
            **{
                name: float(d.get(name, 0.0))
                for name in ("decode_images", "encode", "decode", "rerank", "total")
            }
        )


@dataclass(frozen=True)
class CaptionResult:
    """``POST /v1/captions``: the parameters the gateway resolved and one ``ImageCaptions`` per image."""

    model: str
    ranker: str | None
    beam_size: int
    n_best: int
    max_length: int
    length_penalty: float
    rerank_weight: float
    hooks: list[str]
    results: list[ImageCaptions]
    timings_ms: Timings

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CaptionResult:
        return cls(
            model=d["model"],
            ranker=d.get("ranker"),
            beam_size=int(d["beam_size"]),
            n_best=int(d["n_best"]),
            max_length=int(d["max_length"]),
            length_penalty=float(d["length_penalty"]),
            rerank_weight=float(d["rerank_weight"]),
            hooks=list(d.get("hooks", [])),
            results=[ImageCaptions.from_json(r) for r in d["results"]],
            timings_ms=Timings.from_json(d.get("timings_ms", {})),
        )


@dataclass(frozen=True)
class CaptionerInfo:
    name: str
    architecture: str
    reads: str
    max_length: int
    default_ranker: str | None
    training: dict[str, Any]
    quality: dict[str, float]

    @property
    def trained_on(self) -> str:
        """The split it was trained on: ``full`` or e.g. ``systematicity/1``."""
        return str(self.training.get("split", ""))


@dataclass(frozen=True)
class RankerInfo:
    name: str
    architecture: str
    embedding_dim: int
    joint_with: str | None
    training: dict[str, Any]


@dataclass(frozen=True)
class ModelsInfo:
    """``GET /v1/models``: the captioners and rankers served, and the image size they read."""

    preset: str
    default_captioner: str
    height: int
    width: int
    captioners: list[CaptionerInfo]
    rankers: list[RankerInfo]

    def captioner(self, name: str) -> CaptionerInfo:
        for cap in self.captioners:
            if cap.name == name:
                return cap
        raise KeyError(name)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ModelsInfo:
        return cls(
            preset=d.get("preset", ""),
            default_captioner=d["default_captioner"],
            height=int(d["image"]["height"]),
            width=int(d["image"]["width"]),
            captioners=[
                CaptionerInfo(
                    name=c["name"],
                    architecture=c.get("architecture", ""),
                    reads=c.get("reads", ""),
                    max_length=int(c.get("max_length", 0)),
                    default_ranker=c.get("default_ranker"),
                    training=dict(c.get("training", {})),
                    quality=dict(c.get("quality", {})),
                )
                for c in d["captioners"]
            ],
            rankers=[
                RankerInfo(
                    name=r["name"],
                    architecture=r.get("architecture", ""),
                    embedding_dim=int(r.get("embedding_dim", 0)),
                    joint_with=r.get("joint_with"),
                    training=dict(r.get("training", {})),
                )
                for r in d["rankers"]
            ],
        )


@dataclass(frozen=True)
class ReadyStatus:
    """``GET /readyz``: ``status`` is ``ready``, ``loading`` or ``failed``."""

    status: str
    backend: str | None = None
    error: str | None = None

    @property
    def ready(self) -> bool:
        return self.status == "ready"

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ReadyStatus:
        return cls(str(d.get("status", "")), d.get("backend"), d.get("error"))


@dataclass(frozen=True)
class Interval:
    """A figure with its 95% interval: ``estimate``, the percentile bootstrap bounds ``low``/``high``,
    the bootstrap standard error ``se``, the ``groups`` (pairs) and ``units`` (images) resampled."""

    estimate: float
    low: float
    high: float
    se: float | None = None
    groups: int | None = None
    units: int | None = None
    level: float = 0.95
    resamples: int | None = None

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def __contains__(self, value: float) -> bool:
        return self.low <= value <= self.high

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Interval:
        def opt(key: str, kind: Any) -> Any:
            return None if d.get(key) is None else kind(d[key])

        return cls(
            estimate=float(d["estimate"]),
            low=float(d["low"]),
            high=float(d["high"]),
            se=opt("se", float),
            groups=opt("groups", int),
            units=opt("units", int),
            level=float(d.get("level", 0.95)),
            resamples=opt("resamples", int),
        )


def _interval_at(result: Mapping[str, Any] | None, path: tuple[str | int, ...]) -> Interval | None:
    """The ``Interval`` of the figure at ``path`` of a probe result (its ``X_interval`` sibling)."""
    if not path:
        raise ValueError("path must name a figure, e.g. ('held_out', 'recall', '5')")
    for i in range(len(path) - 1, -1, -1):  # the deepest figure first: X_interval beside X
        owner, key = _walk(result, path[:i]), path[i]
        if not isinstance(owner, Mapping) or not isinstance(key, str):
            continue
        # the convention: X_interval beside X, and for a mapping named in the plural (Xs) X_intervals
        sibling = next((n for n in (f"{key}_interval", f"{key[:-1]}_intervals") if n in owner), None)
        if sibling is not None:
            found = _walk(owner[sibling], path[i + 1 :])
            if isinstance(found, Mapping) and "low" in found and "high" in found:
                estimate = _walk(owner.get(key), path[i + 1 :])
                if "estimate" not in found and isinstance(estimate, (int, float)):
                    found = {**found, "estimate": estimate}
                return Interval.from_json(found) if "estimate" in found else None
            return None
    return None


def _walk(node: Any, keys: tuple[str | int, ...]) -> Any:
    """``node[k1][k2]...`` through mappings (string keys) and lists (indices); None where it ends."""
    for key in keys:
        if isinstance(node, Mapping):
            node = node.get(str(key))
        elif isinstance(node, list) and isinstance(key, int) and -len(node) <= key < len(node):
            node = node[key]
        else:
            return None
    return node


def _expand(node: Any, pattern: tuple[str, ...]) -> list[tuple[str | int, ...]]:
    """Every path of ``node`` that ``pattern`` names, ``*`` standing for each key (or index) there."""
    if not pattern:
        return [()]
    head, rest = pattern[0], pattern[1:]
    if head != "*":
        return [(head, *tail) for tail in _expand(_walk(node, (head,)), rest)]
    if isinstance(node, Mapping):
        keys: list[str | int] = [str(k) for k in node]
    elif isinstance(node, list):
        keys = list(range(len(node)))
    else:
        return []
    return [(key, *tail) for key in keys for tail in _expand(_walk(node, (key,)), rest)]


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class ProbeFigure:
    """One figure of a probe result: where it is (``path``), its ``label`` (the kind's, or the dotted
    path), its ``value`` (None: not defined, e.g. no images) and its 95% ``interval`` (None: none)."""

    path: tuple[str | int, ...]
    label: str
    value: float | None
    interval: Interval | None = None


@dataclass(frozen=True)
class FigureInfo:
    """A kind's headline figure as its record declares it: ``path``, dotted keys into the result with
    ``*`` for every key (or index) there; ``label``, one ``{}`` per ``*``; ``interval``, the path of its
    interval object (the same ``*``)."""

    path: str
    label: str
    interval: str = ""


@dataclass(frozen=True)
class SetFormatInfo:
    """The format of the probe sets a kind reads: its keys of ``probe.json``, whether its sets carry
    scene graphs, and what a loaded set of it offers (``service.probesets``)."""

    name: str
    keys: str = ""
    scene_graphs: bool = False
    readers: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ProbeKindInfo:
    """A probe kind as its record describes it (``GET /v1/probe-kinds``; ``client.probe_kind(name)``):
    what it measures, the probe sets it reads and their ``set_format``, whether a request may name
    pairs, its result's ``fields`` (key -> what it holds), its headline ``figures`` (which
    ``ProbeJob.figures(kind)`` reads), the ``gauges`` its results set (name, help) and ``view``, how the
    web page draws a result (``service.probes.kinds.view``)."""

    name: str
    description: str = ""
    probe_sets: str = ""
    takes_pairs: bool = False
    set_format: SetFormatInfo | None = None
    fields: dict[str, str] = field(default_factory=dict)
    figures: list[FigureInfo] = field(default_factory=list)
    gauges: list[dict[str, str]] = field(default_factory=list)
    view: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ProbeKindInfo:
        fmt = d.get("set_format")
        return _known(
            cls,
            d,
            set_format=None if fmt is None else _known(SetFormatInfo, fmt),
            fields={str(k): str(v) for k, v in (d.get("fields") or {}).items()},
            figures=[_known(FigureInfo, f) for f in d.get("figures") or []],
            gauges=[dict(g) for g in d.get("gauges") or []],
            view=dict(d.get("view") or {}),
        )


def _declared_figures(result: Mapping[str, Any], kind: ProbeKindInfo) -> dict[str, ProbeFigure]:
    """``kind``'s headline figures found in ``result``, by label."""
    out: dict[str, ProbeFigure] = {}
    for figure in kind.figures:
        pattern = tuple(figure.path.split("."))
        where = tuple(figure.interval.split(".")) if figure.interval else ()
        for path in _expand(result, pattern):
            stars = [key for key, part in zip(path, pattern) if part == "*"]
            value = _walk(result, path)
            if value is not None and _number(value) is None:
                continue
            label = figure.label
            for key in stars:
                label = label.replace("{}", str(key), 1)
            found = iter(stars)
            iv_path = tuple(next(found, "*") if part == "*" else part for part in where)
            iv = _walk(result, iv_path) if iv_path else None
            interval = None
            if (
                isinstance(iv, Mapping)
                and _number(iv.get("low")) is not None
                and _number(iv.get("high")) is not None
            ):
                estimate = iv.get("estimate", value)
                if _number(estimate) is not None:
                    interval = Interval.from_json({**iv, "estimate": estimate})
            out[label] = ProbeFigure(path, label, _number(value), interval)
    return out


def _every_figure(result: Any, path: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """The paths of every number of ``result`` outside the intervals themselves."""
    if isinstance(result, Mapping):
        return [
            p
            for k, v in result.items()
            if not str(k).endswith(("_interval", "_intervals"))
            for p in _every_figure(v, (*path, str(k)))
        ]
    if isinstance(result, list):
        return [p for n, v in enumerate(result) for p in _every_figure(v, (*path, n))]
    return [path] if _number(result) is not None else []


@dataclass(frozen=True)
class PairedTest:
    """One figure of two probe jobs on the same images: ``difference`` (first − second) with its
    interval, and the two-sided sign-flip permutation ``p_value``."""

    difference: Interval
    p_value: float
    permutations: int

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PairedTest:
        return cls(Interval.from_json(d["difference"]), float(d["p_value"]), int(d["permutations"]))


@dataclass(frozen=True)
class ProbeComparison:
    """``GET /v1/probes/{a}/compare/{b}``: paired tests of two succeeded jobs of one kind and probe set
    on the images both scored; ``figures`` maps a figure (``"held_out.recall_at_5"``, ...) to its
    test (``None``: no shared unit)."""

    a: str
    b: str
    kind: str
    probe_set: str | None
    figures: dict[str, PairedTest | None]
    intervals: dict[str, Any] = field(default_factory=dict)  # how the intervals were drawn

    def __getitem__(self, figure: str) -> PairedTest | None:
        return self.figures[figure]

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ProbeComparison:
        figures = {str(k): None if v is None else PairedTest.from_json(v) for k, v in d["figures"].items()}
        return _known(cls, d, figures=figures, intervals=dict(d.get("intervals") or {}))


@dataclass(frozen=True)
class ProbeJob:
    """A live probe job (``GET /v1/probes/{id}``). ``partial`` and ``result`` are the kind's result
    dicts (``None`` in listings, and until there is one)."""

    id: str
    kind: str
    status: str
    error: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    probe_set: str | None = None
    done: int = 0
    total: int = 0
    partial: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    summary: str | None = None  # the kind's one-line summary of the result (so far)
    timings_s: dict[str, Any] = field(default_factory=dict)
    created_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    accepted_at: float | None = None  # when the result was accepted as the alerts' baseline
    replica: str = ""  # the gateway replica that runs (ran) the job
    scheduled: bool = False  # started by the probe schedule
    cancel_requested: bool = False  # a cancel was asked for and the job's replica has not ended it yet

    @property
    def finished(self) -> bool:
        """Succeeded, failed or cancelled: nothing will change any more."""
        return self.status in TERMINAL_STATUSES

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"

    def interval(self, *path: str | int) -> Interval | None:
        """The 95% interval of the result's figure at ``path`` (keys and list indices), which the
        gateway answers as the figure's sibling ``<name>_interval`` of the same shape:
        ``job.interval("held_out", "recall", "5")`` reads ``result["held_out"]["recall_interval"]["5"]``.
        ``None`` where the result has no interval there (no result yet, a running job's partial
        figures, a figure without units)."""
        return _interval_at(self.result, path)

    def figures(self, kind: ProbeKindInfo | None = None) -> dict[str, ProbeFigure]:
        """The result's figures, by label (empty without a result).

        With ``kind`` (``client.probe_kind(job.kind)``): the kind's headline figures as its record
        declares them, labelled in its words ("held-out Recall@5"), each with its interval where the
        record says it is — a figure the result lacks is left out. Without (offline, no request): every
        number of the result that has an interval by the results' convention (``interval``), labelled
        by its dotted path ("held_out.recall.5", "pairs.0.recall.5")."""
        if not isinstance(self.result, Mapping):
            return {}
        if kind is not None:
            return _declared_figures(self.result, kind)
        out = {}
        for path in _every_figure(self.result):
            interval = _interval_at(self.result, path)
            if interval is not None:
                label = ".".join(str(key) for key in path)
                out[label] = ProbeFigure(path, label, _number(_walk(self.result, path)), interval)
        return out

    def to_json(self) -> dict[str, Any]:
        """The job in the gateway's JSON shape."""
        body = asdict(self)
        body["progress"] = {"done": body.pop("done"), "total": body.pop("total")}
        return body

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ProbeJob:
        progress = d.get("progress") or {}

        def opt_float(key: str) -> float | None:
            return None if d.get(key) is None else float(d[key])

        return cls(
            id=str(d["id"]),
            kind=str(d.get("kind", "")),
            status=str(d["status"]),
            error=d.get("error"),
            params=dict(d.get("params") or {}),
            probe_set=d.get("probe_set"),
            done=int(progress.get("done", 0)),
            total=int(progress.get("total", 0)),
            partial=d.get("partial"),
            result=d.get("result"),
            summary=d.get("summary"),
            timings_s=dict(d.get("timings_s") or {}),
            created_at=opt_float("created_at"),
            started_at=opt_float("started_at"),
            finished_at=opt_float("finished_at"),
            accepted_at=opt_float("accepted_at"),
            replica=str(d.get("replica") or ""),
            scheduled=bool(d.get("scheduled", False)),
            cancel_requested=bool(d.get("cancel_requested", False)),
        )


# -- explanations (POST /v1/explain) ------------------------------------------------------------------


@dataclass(frozen=True)
class UnderArgmax:
    """What lies under a word's highest-valued region (scene-graph images only)."""

    labels: list[str]
    object: dict[str, Any] | None = None


@dataclass(frozen=True)
class ExplainedWord:
    """One caption word: its attribution map ``values`` (the grid ``[g][g]``, or one value per region),
    the region it looked at most and, on a probe image, whether that is the object it names."""

    index: int
    word: str
    noun: str | None
    logprob: float | None
    values: list[Any]
    argmax_region: int
    argmax_box: list[float] | None = None
    overlay_png: str | None = None  # base64 PNG: the map over the image
    under_argmax: UnderArgmax | None = None
    pointing: bool | None = None
    pointing_chance: float | None = None
    grounded: bool | None = None

    @property
    def overlay(self) -> bytes | None:
        """The heat-map overlay as PNG bytes (``None`` when asked for without overlays)."""
        return None if self.overlay_png is None else base64.b64decode(self.overlay_png)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ExplainedWord:
        under = d.get("under_argmax")
        return _known(cls, d, under_argmax=None if under is None else _known(UnderArgmax, under))


@dataclass(frozen=True)
class IntegratedGradientsInfo:
    n_steps: int
    baseline: str
    delta: list[float]  # per word: sum of attributions - (S_w(x) - S_w(baseline))
    score_gap: list[float]
    mean_abs_delta: float
    mean_relative_delta: float


@dataclass(frozen=True)
class GuidedBackpropInfo:
    relu_modules: int  # ReLUs whose negative gradients are stopped (0: a plain gradient)
    note: str


@dataclass(frozen=True)
class GroundingInterval:
    """GroundingScore's 95% bootstrap interval at one δ, over the caption's ``nouns``."""

    low: float
    high: float
    nouns: int


@dataclass(frozen=True)
class Explanation:
    """``POST /v1/explain``: the caption explained (``source``: ``engine``, its best caption, or
    ``client``, the caption given) and one map per word over the image regions; with a probe image
    (``ProbeImage``) the grounding score by δ (``"0"``, ``"1"``, ``"3"``, ``"5"``, ``"inf"``)."""

    model: str
    method: str
    attribute_to: str
    caption: str
    source: str
    grid: list[int] | None
    grid_area: list[float]
    image_size: list[int]
    scene_graph: bool
    words: list[ExplainedWord]
    grounding_score: dict[str, float] | None
    logprob: float | None = None
    normalized_logprob: float | None = None
    ranker_score: float | None = None
    integrated_gradients: IntegratedGradientsInfo | None = None
    guided_backprop: GuidedBackpropInfo | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)
    # by δ: GroundingScore's 95% interval over the caption's nouns (None: no scene graph or noun)
    grounding_score_interval: dict[str, GroundingInterval] | None = None

    @property
    def texts(self) -> list[str]:
        """The words explained, in order."""
        return [w.word for w in self.words]

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Explanation:
        ig, gb = d.get("integrated_gradients"), d.get("guided_backprop")
        return _known(
            cls,
            d,
            words=[ExplainedWord.from_json(w) for w in d["words"]],
            grounding_score=d.get("grounding_score"),
            grounding_score_interval=None
            if d.get("grounding_score_interval") is None
            else {
                str(delta): GroundingInterval(float(iv["low"]), float(iv["high"]), int(iv["nouns"]))
                for delta, iv in d["grounding_score_interval"].items()
            },
            integrated_gradients=None if ig is None else _known(IntegratedGradientsInfo, ig),
            guided_backprop=None if gb is None else _known(GuidedBackpropInfo, gb),
        )


# -- comparisons (POST /v1/compare) -------------------------------------------------------------------


@dataclass(frozen=True)
class ResolvedConfiguration:
    model: str
    beam_size: int
    ranker: str | None


@dataclass(frozen=True)
class ComparedConfiguration:
    """A configuration as sent (``options``) and as the gateway resolved it."""

    name: str
    options: dict[str, Any]
    resolved: ResolvedConfiguration


@dataclass(frozen=True)
class PairSimilarity:
    """Two configurations' captions of one image: NGSM (1 = the same caption), its tie-break and its
    per-order NGSM_n, n = 1..4 (None: neither caption has that many words; one 0 makes NGSM 0)."""

    a: str
    b: str
    ngsm: float
    tie_break: float
    orders: list[float | None] = field(default_factory=list)


@dataclass(frozen=True)
class ComparedImage:
    """One image: each configuration's best caption and the pairwise similarities."""

    index: int  # the image's position in the request
    captions: dict[str, str]
    pairs: list[PairSimilarity]
    min_ngsm: float
    min_tie_break: float
    most_discrepant_pair: list[str]

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ComparedImage:
        return _known(cls, d, pairs=[_known(PairSimilarity, p) for p in d["pairs"]])


@dataclass(frozen=True)
class Comparison:
    """``POST /v1/compare``: the configurations and the images, most discrepant first (lowest
    ``min_ngsm``); ``by_index()`` gives them in request order."""

    configurations: list[ComparedConfiguration]
    images: list[ComparedImage]
    timings_ms: dict[str, float] = field(default_factory=dict)

    def by_index(self) -> list[ComparedImage]:
        return sorted(self.images, key=lambda image: image.index)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Comparison:
        return _known(
            cls,
            d,
            configurations=[
                _known(ComparedConfiguration, c, resolved=_known(ResolvedConfiguration, c["resolved"]))
                for c in d["configurations"]
            ],
            images=[ComparedImage.from_json(i) for i in d["images"]],
        )


__all__ = [
    "Caption",
    "CaptionResult",
    "CaptionerInfo",
    "ComparedConfiguration",
    "ComparedImage",
    "Comparison",
    "ExplainedWord",
    "Explanation",
    "FigureInfo",
    "GroundingInterval",
    "GuidedBackpropInfo",
    "ImageCaptions",
    "IntegratedGradientsInfo",
    "Interval",
    "ModelsInfo",
    "PairSimilarity",
    "PairedTest",
    "ProbeComparison",
    "ProbeFigure",
    "ProbeJob",
    "ProbeKindInfo",
    "RankerInfo",
    "ReadyStatus",
    "ResolvedConfiguration",
    "SetFormatInfo",
    "Timings",
    "UnderArgmax",
]
