"""Running one probe: load the probe set's images, decode them through the engine at background
priority (the same ``caption_many`` path the offline studies use), parse, score. Each kind reports
progress (images decoded of the total) and, where it has one, a partial result as it goes."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from service.engine.engine import CaptionEngine
from service.engine.params import SearchParams
from service.engine.request import Priority
from service.probes.parser import PairParser, lookup
from service.probes.productivity import productivity_result
from service.probes.sets import ProbeSet
from service.probes.spec import ProbeSpec
from service.probes.substitutivity import chosen_images, substituted_words, substitutivity_result
from service.probes.systematicity import KS, systematicity_result
from service.text.concepts import ConceptPair


@dataclass
class Progress:
    """What a running probe reports: images decoded of ``total``, and a partial result."""

    total: int = 0
    done: int = 0
    partial: dict[str, Any] | None = None
    timings_s: dict[str, float] = field(default_factory=dict)

    def advance(self, n: int) -> None:
        self.done += n


def _cap(ids: Sequence[int], n: int | None) -> list[int]:
    return list(ids if n is None else ids[:n])


async def decode(
    engine: CaptionEngine, probe_set: ProbeSet, ids: Sequence[int], params: SearchParams, progress: Progress
) -> dict[int, list[str]]:
    """Image id -> captions in final order, decoded at background priority."""
    if not ids:
        return {}
    image = engine.manifest.image
    pixels = await asyncio.to_thread(probe_set.images, list(ids), image.height, image.width)
    out = await engine.caption_many(pixels, params, priority=Priority.BACKGROUND, progress=progress.advance)
    return {i: [c.text for c in per] for i, per in zip(ids, out, strict=True)}


async def systematicity(
    engine: CaptionEngine, spec: ProbeSpec, probe_set: ProbeSet, parser: PairParser, progress: Progress
) -> dict[str, Any]:
    """Group by group: decode its Test-Comb images (every pair of the group, as ``compcap evaluate``
    does) and the Test-no-Comb images of the reported pairs, parse, score; partial result after each."""
    entries = probe_set.pairs()
    wanted = set(spec.pairs) if spec.pairs is not None else {e.pair.label for e in entries}
    reported = [e for e in entries if e.pair.label in wanted]
    groups = sorted({e.group for e in reported})
    members = {g: [e for e in entries if e.group == g] for g in groups}
    comb = {g: sorted({i for e in members[g] for i in _cap(e.comb, spec.images)}) for g in groups}
    no_comb = {e.pair.label: _cap(e.no_comb, spec.images) for e in reported}
    progress.total = sum(len(comb[g]) for g in groups) + sum(len(v) for v in no_comb.values())
    held_out = [
        ConceptPair(p.kind, p.modifier, p.noun)
        for p in engine.manifest.captioner(spec.model).training.held_out_pairs
    ]
    generated: dict[int, list[str]] = {}
    parsed: dict[str, frozenset[ConceptPair]] = {}
    result: dict[str, Any] = {}
    for n, g in enumerate(groups, 1):
        group_reported = [e.pair for e in reported if e.group == g]
        ids = [i for i in dict.fromkeys([*comb[g], *(i for p in group_reported for i in no_comb[p.label])])]
        generated.update(
            await decode(engine, probe_set, [i for i in ids if i not in generated], spec.params, progress)
        )
        done_groups = groups[:n]
        texts = [c for i in ids for c in generated[i][: KS[-1]]]
        texts += [r for i in comb[g] for r in probe_set.captions[i]]
        parsed.update(await parser.pairs([t for t in texts if t not in parsed]))
        result = systematicity_result(
            {g2: [e.pair for e in members[g2]] for g2 in done_groups},
            {g2: comb[g2] for g2 in done_groups},
            no_comb,
            [e.pair for e in reported if e.group in done_groups],
            held_out,
            generated,
            probe_set.captions,
            lookup(parsed),
        )
        if n < len(groups):
            progress.partial = result
    return result


async def productivity(
    engine: CaptionEngine, spec: ProbeSpec, probe_set: ProbeSet, parser: PairParser, progress: Progress
) -> dict[str, Any]:
    buckets = {
        by: {name: _cap(ids, spec.images) for name, ids in probe_set.buckets(by).items()}
        for by in ("density", "length")
        if probe_set.info.get(by) is not None
    }
    ids = sorted({i for named in buckets.values() for v in named.values() for i in v})
    progress.total = len(ids)
    generated = await decode(engine, probe_set, ids, spec.params, progress)
    top1 = {i: caps[0] if caps else "" for i, caps in generated.items()}
    # every bucket draws from the decoded images: a cap per bucket keeps both bucketings' images
    return productivity_result(buckets, top1, probe_set.captions, probe_set.objects(), probe_set.cider())


async def substitutivity(
    engine: CaptionEngine, spec: ProbeSpec, probe_set: ProbeSet, parser: PairParser, progress: Progress
) -> dict[str, Any]:
    """O for every image; S (``synonym_substitution`` on the S1 words O generated, restricted to the
    model's vocabulary) for the images whose O holds one; Table 6 rows."""
    ids = sorted({i for _, _, images in probe_set.substitution_pairs() for i in _cap(images, spec.images)})
    progress.total = len(ids)
    original = {
        i: caps[0] for i, caps in (await decode(engine, probe_set, ids, spec.params, progress)).items()
    }
    words = set(engine.vocab.index)
    table = [(a, b) for a, b in probe_set.substitutions() if a in words and b in words]
    kept = substituted_words(original, table)
    mapping = {a: b for a, b in table if a in kept}
    chosen = chosen_images(original, set(mapping))
    progress.total += len(chosen)
    substituted: dict[int, str] = {}
    if chosen:
        hook = {"name": "synonym_substitution", "params": {"pairs": [[a, b] for a, b in mapping.items()]}}
        s_params = engine.resolve(
            model=spec.params.model,
            beam_size=spec.params.beam_size,
            n_best=spec.params.n_best,
            rerank=spec.params.ranker or False,
            rerank_weight=spec.params.rerank_weight,
            hooks=[hook],
        )
        decoded = await decode(engine, probe_set, chosen, s_params, progress)
        substituted = {i: caps[0] for i, caps in decoded.items()}
    result = await asyncio.to_thread(
        substitutivity_result, original, substituted, mapping, probe_set.captions, probe_set.cider()
    )
    return {**result, "table": [[a, b] for a, b in table], "generated_counts": kept}


KIND_RUNNERS = {
    "systematicity": systematicity,
    "productivity": productivity,
    "substitutivity": substitutivity,
}


async def run_probe(
    engine: CaptionEngine, spec: ProbeSpec, probe_set: ProbeSet, parser: PairParser, progress: Progress
) -> dict[str, Any]:
    """The probe's result (see the kind's module for its shape)."""
    return await KIND_RUNNERS[spec.kind](engine, spec, probe_set, parser, progress)


__all__ = ["KIND_RUNNERS", "Progress", "run_probe"]
