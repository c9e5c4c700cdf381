"""The productivity probe (Pantazopoulos et al., 2022, §4.2): the top-1 caption's length, nouns, object
coverage and CIDEr-D per density (objects in the scene) and length bucket; the maths is
``service.probes.scoring.productivity``."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry

from service.probes.kinds.bounds import BoundedGauge
from service.probes.kinds.record import KindRun, cap, decode, invalid, module_kind
from service.probes.kinds.tables import cell, fixed, get, table, with_bounds
from service.probes.kinds.view import Figure
from service.probes.scoring.productivity import compare, productivity_result
from service.probesets import builtin

if TYPE_CHECKING:
    from service.probesets import ProbeSet


async def run(job: KindRun) -> dict[str, Any]:
    """Decode every bucket's images once, score each bucket's top-1 captions."""
    spec, probe_set = job.spec, job.probe_set
    buckets = {
        by: {name: cap(ids, spec.images) for name, ids in builtin.buckets(probe_set, by).items()}
        for by in ("density", "length")
        if probe_set.info.get(by) is not None
    }
    ids = sorted({i for named in buckets.values() for v in named.values() for i in v})
    job.progress.total = len(ids)
    generated = await decode(job.engine, probe_set, ids, spec.params, job.progress)
    top1 = {i: caps[0] if caps else "" for i, caps in generated.items()}
    # every bucket draws from the decoded images: a cap per bucket keeps both bucketings' images
    return await asyncio.to_thread(
        productivity_result, buckets, top1, probe_set.captions, builtin.objects(probe_set), probe_set.cider()
    )


def check(probe_set: ProbeSet, pairs: tuple[str, ...] | None) -> None:
    """Object coverage needs each scene's objects."""
    if builtin.objects(probe_set) is None:
        raise invalid(
            f"probe set {probe_set.name!r} has no scene graphs (nor instance annotations): productivity's "
            "object coverage needs the objects of each scene",
            "probe_set",
        )


class Gauges:
    """CIDEr-D of the top-1 caption per bucket, with its interval's bounds (``_low`` / ``_high``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.cider = BoundedGauge(
            "compcap_probe_productivity_cider_d",
            "Live productivity probe: CIDEr-D of the top-1 caption per density / length bucket",
            ["model", "ranker", "by", "bucket"],
            registry,
        )

    def record(self, model: str, ranker: str, result: Mapping[str, Any]) -> None:
        for by, buckets in result.get("by", {}).items():
            for bucket, figures in buckets.items():
                if figures.get("cider_d") is not None:
                    self.cider.set(
                        (model, ranker, by, bucket), figures["cider_d"], figures.get("cider_d_interval")
                    )

    def accept(self, model: str, ranker: str, result: Mapping[str, Any]) -> None:
        """No baseline gauge yet."""


def lines(result: Mapping[str, Any]) -> list[str]:
    """One table per bucketing: length, nouns, coverage and CIDEr-D of each bucket, each with its 95%
    interval."""
    out: list[str] = []
    for by, buckets in (result.get("by") or {}).items():
        rows = [
            [
                cell(name),
                cell(get(b, "images")),
                with_bounds(get(b, "length"), get(b, "length_interval"), digits=2),
                cell(get(b, "reference_length"), digits=2),
                with_bounds(get(b, "nouns"), get(b, "nouns_interval"), digits=2),
                with_bounds(get(b, "coverage"), get(b, "coverage_interval"), 100),
                with_bounds(get(b, "cider_d"), get(b, "cider_d_interval"), 100),
            ]
            for name, b in (buckets or {}).items()
        ]
        if out:
            out.append("")
        out.append(f"by {by}: top-1 length, nouns named, object coverage (%), CIDEr-D (x100) [95% interval]")
        out.append(table([by, "images", "length", "ref length", "nouns", "coverage", "CIDEr-D"], rows))
    return out or ["no buckets"]


def summary(result: Mapping[str, Any]) -> str:
    """Coverage (or CIDEr-D) per density bucket."""
    buckets = get(result, "by", "density") or {}
    if not buckets:
        return ""
    parts = [
        f"{name}: {fixed(b.get('coverage') if b.get('coverage') is not None else b.get('cider_d'), 2)}"
        for name, b in buckets.items()
    ]
    first = next(iter(buckets.values()))
    metric = "coverage" if first.get("coverage") is not None else "CIDEr-D"
    return f"{metric} by objects in the image — {', '.join(parts)}"


FIELDS = {
    "by": "bucketing (density, length) -> bucket -> images, length, reference_length, nouns, coverage, "
    "cider_d of the top-1 captions",
    "cider_df": "whether CIDEr-D used the training references' document frequencies",
    "per_image": "figure -> image -> its value, the units of the intervals",
    "bucket_images": "'<bucketing>/<bucket>' -> its image ids",
    "intervals": "how the intervals were drawn",
}
FIGURES = tuple(
    Figure(f"by.*.*.{name}", f"{label} by {{}} {{}}")
    for name, label in (
        ("length", "length"),
        ("nouns", "nouns"),
        ("coverage", "coverage"),
        ("cider_d", "CIDEr-D"),
    )
)

KIND = module_kind(
    globals(),
    name="productivity",
    description="Pantazopoulos et al., 2022: length, nouns, object coverage and CIDEr-D of the top-1 caption "
    "per scene density",
    compare=compare,
)
