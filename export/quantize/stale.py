"""Variant sets after a model changes under them: a captioner or ranker imported again (or for the first
time) into a repository that ``compcap quantize`` already quantized.

A variant was made from, timed against and gated with the FP32 model it names. Once that model is
replaced, the variant is stale: it would serve the old weights at ``COMPCAP_PRECISION=int8`` (or
fp16). So the owner's variants leave every set (their models leave the manifest, their folders the
repository), its models are listed as ``skipped`` (they serve FP32 at every precision until ``compcap
quantize`` runs again), and the gate's runs that decoded through the old models are dropped, with a
note saying why. The rest of the set, and its verdict, stand: the other models did not change.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from service.manifest import Manifest, PrecisionVariant

REASON = "{owner} was imported after the variants were made: `compcap quantize --repo REPO` makes its variant"


def _without(
    variant_set: PrecisionVariant, owner: str, replaced: set[str], skipped: Iterable[str]
) -> PrecisionVariant:
    """``variant_set`` without the variants of ``replaced`` (``owner``'s FP32 models, before and after),
    ``skipped`` (its models now) listed as skipped, and no gate run through ``owner``."""
    reason = REASON.format(owner=owner)
    update: dict[str, Any] = {
        "models": {s: v for s, v in variant_set.models.items() if s not in replaced},
        "methods": {s: m for s, m in variant_set.methods.items() if s not in replaced},
        "speed": {s: t for s, t in variant_set.speed.items() if s not in replaced},
        "skipped": {
            **{s: r for s, r in variant_set.skipped.items() if s not in replaced},
            **dict.fromkeys(sorted(skipped), reason),
        },
    }
    gate = variant_set.gate
    if gate is not None:
        mine = sorted({run for run in [*gate.runs, *gate.systematicity] if owner in run.split("+")})
        if mine:
            update["gate"] = gate.model_copy(
                update={
                    "runs": {k: v for k, v in gate.runs.items() if k not in mine},
                    "systematicity": {k: v for k, v in gate.systematicity.items() if k not in mine},
                    "notes": [*gate.notes, f"runs {', '.join(mine)} measured the earlier {owner}: dropped"],
                }
            )
    return variant_set.model_copy(update=update)


def stale_variants(manifest: Manifest, owner: str) -> list[str]:
    """The variant models made from ``owner``'s FP32 models (names): they go when ``owner`` changes."""
    sources = {m.name for m in manifest.models if m.owner == owner}
    return sorted(
        v for p in manifest.precision_variants.values() for s, v in p.models.items() if s in sources
    )


def drop_owner_variants(manifest: Manifest, owner: str, models: Iterable[str]) -> dict[str, Any]:
    """``manifest.precision_variants`` (dumped) once ``owner`` is imported again with ``models`` (its new
    FP32 model names): ``owner``'s variants out of every set, ``models`` skipped. The caller leaves the
    variants' entries out of ``models`` (they have ``owner`` as their owner) and their folders out of
    the repository (``stale_variants``)."""
    models = list(models)
    replaced = {m.name for m in manifest.models if m.owner == owner} | set(models)
    return {
        precision: _without(variant_set, owner, replaced, models).model_dump()
        for precision, variant_set in manifest.precision_variants.items()
    }
