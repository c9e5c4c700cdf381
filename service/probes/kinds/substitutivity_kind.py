"""The substitutivity probe (Pantazopoulos et al., 2022, §4.3, Table 6): each image's caption O, and S
decoded with the ``synonym_substitution`` hook on the S1 words O generated; the maths is
``service.probes.scoring.substitutivity``."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry

from service.evaluation.intervals import SEED
from service.probes.kinds.bounds import BoundedGauge
from service.probes.kinds.record import KindRun, cap, decode, module_kind
from service.probes.kinds.tables import cell, fixed, get, table, with_bounds
from service.probes.kinds.view import Figure
from service.probes.scoring.substitutivity import (
    chosen_images,
    compare,
    substituted_words,
    substitutivity_result,
)
from service.probesets import builtin
from service.text.synonyms import distinct_first_tokens, vocabulary_words


async def run(job: KindRun) -> dict[str, Any]:
    """O for every image; S (``synonym_substitution`` on the S1 words O generated, restricted to the
    words the captioner's tokens can write, ``vocabulary_words``, and for a subword captioner to S1
    words that start with distinct tokens, ``distinct_first_tokens``) for the images whose O holds one;
    Table 6 rows."""
    engine, spec, probe_set, progress = job.engine, job.spec, job.probe_set, job.progress
    chosen_pairs = builtin.substitution_pairs(probe_set)
    ids = sorted({i for _, _, images in chosen_pairs for i in cap(images, spec.images)})
    progress.total = len(ids)
    original = {
        i: caps[0] for i, caps in (await decode(engine, probe_set, ids, spec.params, progress)).items()
    }
    vocab = engine.vocabs[spec.params.model]  # the captioner's own tokens: a subword one's words too
    words = vocabulary_words(vocab)
    pairs = [(a, b) for a, b in builtin.substitutions(probe_set) if a in words and b in words]
    kept = substituted_words(original, pairs)
    # of generated S1 words that start with the same token only the first (the hook would refuse both)
    mapping = dict(distinct_first_tokens([(a, b) for a, b in pairs if a in kept], vocab))
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
        substitutivity_result,
        original,
        substituted,
        mapping,
        probe_set.captions,
        probe_set.cider(),
        seed=SEED,
    )
    return {**result, "table": [[a, b] for a, b in pairs], "generated_counts": kept}


class Gauges:
    """BLEU-4 of S against O, with its interval's bounds (``_low`` / ``_high``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.bleu4 = BoundedGauge(
            "compcap_probe_substitution_bleu4",
            "Live substitutivity probe: BLEU-4 of S against O (Pantazopoulos et al., 2022, Table 6, O vs S)",
            ["model", "ranker"],
            registry,
        )

    def record(self, model: str, ranker: str, result: Mapping[str, Any]) -> None:
        bleu = get(result, "rows", "O vs S", "bleu4")
        if bleu is not None:
            self.bleu4.set((model, ranker), bleu, get(result, "rows", "O vs S", "bleu4_interval"))

    def accept(self, model: str, ranker: str, result: Mapping[str, Any]) -> None:
        """No baseline gauge yet."""


def lines(result: Mapping[str, Any]) -> list[str]:
    """Table 6's rows (BLEU-4, METEOR, CIDEr-D; BLEU-4 and CIDEr-D with their 95% intervals), then how
    many images were substituted."""
    rows = [
        [
            cell(name),
            with_bounds(get(r, "bleu4"), get(r, "bleu4_interval"), 100),
            cell(get(r, "meteor"), 100),
            with_bounds(get(r, "cider_d"), get(r, "cider_d_interval"), 100),
            cell(int(r["images"]) if isinstance(get(r, "images"), float) else get(r, "images")),
        ]
        for name, r in (result.get("rows") or {}).items()
    ]
    exact = with_bounds(result.get("exact_replacement"), result.get("exact_replacement_interval"), 100)
    return [
        "O: captions without substitution, S: with it, t: after the first substituted word (x100) "
        "[95% interval]",
        table(["", "BLEU-4", "METEOR", "CIDEr-D", "images"], rows),
        f"images {cell(result.get('images'))}, substituted {cell(result.get('substituted'))}, "
        f"exact replacement {exact}%",
    ]


def summary(result: Mapping[str, Any]) -> str:
    """Images substituted, exact replacements, CIDEr-D of O and S against the references."""
    rows = result.get("rows") or {}

    def cider(name: str) -> str:
        return fixed(get(rows, name, "cider_d"), 3) if name in rows else "—"

    return (
        f"substituted {result.get('substituted') or 0}/{result.get('images') or 0} images"
        f" · S = O with words replaced: {fixed(result.get('exact_replacement'), 2)}"
        f" · CIDEr-D O vs GT {cider('O vs GT')}, S vs GT {cider('S vs GT')}"
    )


FIELDS = {
    "images": "images captioned (O)",
    "substituted": "images decoded again with substitution (S)",
    "words": "the S1 -> S2 words substituted",
    "rows": "Table 6's rows (O vs GT, S vs GT, O vs S, Ot vs St): bleu4, meteor, cider_d, images",
    "images_with_tails": "images scored in the Ot vs St row",
    "exact_replacement": "share of substituted images whose S is O with the words replaced",
    "exact_replacements": "how many",
    "examples": "up to 8 images with their O and S",
    "per_image": "per image: exact replacement, per row CIDEr-D and BLEU statistics (the intervals' units)",
    "table": "the substitution table the captioner's words allow",
    "generated_counts": "S1 words O generated, with their counts",
    "intervals": "how the intervals were drawn",
}
FIGURES = (
    Figure("rows.*.bleu4", "BLEU-4 {}"),
    Figure("rows.*.cider_d", "CIDEr-D {}"),
    Figure("exact_replacement", "exact replacement"),
)

KIND = module_kind(
    globals(),
    name="substitutivity",
    description="Pantazopoulos et al., 2022: captions O next to S, decoded with fine-grained words replaced "
    "by their synonyms",
    compare=compare,
)
