"""The ``ranker_guided`` decoding hook on the default repository: tuned on a development world, reported
on the test world.

Worlds (as ``rerank_select``): the **development** world is the training world's held-out halves of the
systematicity split the default captioner was trained on (its ``test`` — Test Comb — and
``test_no_comb`` images, which no captioner trained or was selected on); the **test** world is the zoo's
evaluation world (seed ``EVAL_SEED``), the same split and group. Per configuration (a captioner, its beam
size, whether its finished beams are re-ranked, and the hook's parameters):

* held-out Recall@5 on Test Comb (``service.evaluation.recall``), with its 95% two-stage bootstrap
  interval over pairs and their images (``service.evaluation.intervals``);
* CIDEr-D of the top caption on Test no Comb (in-distribution images), with a bootstrap interval over
  the images;
* false composition at 5: per held-out pair, the share of its images whose scene holds both constituents
  but no object carrying the pair (so no reference mentions it) on which one of the top-5 captions
  attaches the pair anyway; mean over the pairs, with its interval. Test no Comb has no such image (its
  scenes hold no constituent of a held-out pair), so they come from the world's sets no captioner
  trained on: Test Comb and val on the development world, and also the (unused) train set on the test
  world, at most ``FC_PER_PAIR`` per pair.

``choose`` is the selection rule, fixed before the development run: the highest development Recall@5
among the configurations whose CIDEr-D is at least 90% of BUTD's and whose false composition at 5 is at
most ``FC_LIMIT``; else the highest Recall@5 among those within the CIDEr-D bound; else the best
CIDEr-D. Run: ``python -m compcap_lab.studies.search_hook --work <folder with data/train and
data/eval_<seed>> --out reports`` (``--stage dev``, ``--stage test`` or both)."""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from compcap_lab.studies.evaluate import load_images
from compcap_lab.studies.report.family import PERMUTATIONS, VERDICTS, p_phrase, verdict
from export.data.splits import load_split, split_path_for
from export.packaging.decoding import open_engine
from service.engine.engine import CaptionEngine
from service.evaluation.cider import CiderD
from service.evaluation.intervals import bootstrap_interval, paired_test
from service.evaluation.recall import CachedPairs, PairsFn, recall_at_k
from service.manifest import load_manifest
from service.text.concepts import ConceptPair

K = 5
CIDER_TOLERANCE = 0.10  # within 10% of BUTD's CIDEr-D
FC_LIMIT = 0.044  # false composition at 5
RR_WEIGHT = 0.05  # BUTR+RR's re-ranking weight (chosen on the development world, reproduction report)


@dataclass(frozen=True)
class Config:
    """One decoding configuration: ``guide`` the ``ranker_guided`` params (None: no hook)."""

    name: str
    captioner: str = "butr"
    beam: int = 20
    rerank: bool | str = True
    rerank_weight: float = RR_WEIGHT
    guide: Mapping[str, Any] | None = None

    def options(self) -> dict[str, Any]:
        hooks = [{"name": "ranker_guided", "params": dict(self.guide)}] if self.guide is not None else None
        return {
            "model": self.captioner,
            "beam_size": self.beam,
            "n_best": min(K, self.beam),
            "rerank": self.rerank,
            "rerank_weight": self.rerank_weight if self.rerank is not False else 0.0,
            "hooks": hooks,
        }


BUTD = Config("BUTD", "butd", 5, False)
BUTR_RR = Config("BUTR+RR", "butr", 100, True)
BUTR = Config("BUTR", "butr", 5, False)


def guided(beam: int, weight: float, every: int = 1, pool: int = 5, **extra: Any) -> Config:
    params = {"weight": weight, "every": every, "pool": pool}
    ranker = extra.pop("ranker", None)
    if ranker is not None:
        params["ranker"] = ranker
    name = f"guided b{beam} λ{weight:g} k{every} p{pool}" + (f" {ranker}" if ranker else "")
    rerank = extra.pop("rerank", True)
    return Config(name + ("" if rerank else " no-RR"), "butr", beam, rerank, RR_WEIGHT, params)


@dataclass
class World:
    """One world's Test Comb and Test no Comb images of a split, with what the scores need."""

    name: str
    comb: list[int]
    no_comb: list[int]
    images: dict[int, np.ndarray]
    references: dict[int, list[str]]
    pairs: list[ConceptPair]
    fc_images: dict[str, list[int]]  # pair label -> its images with both constituents, none carrying it
    cider: CiderD = field(repr=False)


def carries(scene: Mapping[str, Any], pair: ConceptPair) -> tuple[bool, bool]:
    """(both constituents are in the scene, some object carries the pair)."""
    objects = scene.get("objects", [])
    atoms = {o.get(k) for o in objects for k in ("noun", "colour", "size", "action")}
    both = pair.modifier in atoms and pair.noun in atoms
    held = any(
        o.get("noun") == pair.noun and pair.modifier in (o.get("colour"), o.get("size"), o.get("action"))
        for o in objects
    )
    return both, held


FC_PER_PAIR = 40  # false-composition images per held-out pair at most


def load_world(
    name: str,
    data: Path,
    group: int,
    limit: int | None,
    height: int,
    width: int,
    fc_sets: Sequence[str] = ("test", "val"),
) -> World:
    """``limit`` Test Comb and Test no Comb images each (None: all) of the split's group ``group``; the
    false-composition images of each held-out pair come from the sets ``fc_sets`` (images with both
    constituents in the scene and no object carrying the pair, so no reference mentions it), at most
    ``FC_PER_PAIR`` per pair."""
    from export.data.coco_captions import load_folder

    dataset = load_folder(data)
    split = load_split(split_path_for(data, "systematicity", group))
    comb = [int(i) for i in split.sets["test"]][:limit]
    no_comb = [int(i) for i in split.sets["test_no_comb"]][:limit]
    pool = [int(i) for s in fc_sets for i in split.sets.get(s, [])]
    pairs = list(split.pairs)
    scenes = dataset.scenes or {}
    fc: dict[str, list[int]] = {}
    for pair in pairs:
        found = [i for i in pool if carries(scenes.get(i, {}), pair) == (True, False)]
        fc[pair.label] = found[:FC_PER_PAIR]
    ids = list(dict.fromkeys(comb + no_comb + [i for images in fc.values() for i in images]))
    stack = load_images(Path(dataset.root), [dataset.file_names[i] for i in ids], height, width)
    train = [int(i) for i in split.sets.get("train", [])]
    return World(
        name,
        comb,
        no_comb,
        dict(zip(ids, stack, strict=True)),
        {i: list(dataset.captions[i]) for i in ids},
        pairs,
        fc,
        CiderD.from_references({i: list(dataset.captions[i]) for i in train}),
    )


async def decode_config(
    engine: CaptionEngine, world: World, config: Config
) -> tuple[dict[int, list[str]], float]:
    """Top-5 captions of every image of ``world`` (in final order), and the seconds it took."""
    params = engine.resolve(**config.options())
    ids = list(world.images)
    start = time.perf_counter()
    out = await engine.caption_many(np.stack([world.images[i] for i in ids]), params)
    seconds = time.perf_counter() - start
    return {i: [c.text for c in per] for i, per in zip(ids, out, strict=True)}, seconds


def unit_hits(world: World, generated: Mapping[int, Sequence[str]], parse: PairsFn) -> dict[str, Any]:
    """Per held-out pair, its Test-Comb images' hits at 5 and its false-composition images' hits at 5
    (1.0 / 0.0, images ascending), and the per-image CIDEr-D of the top caption on Test no Comb."""
    report = recall_at_k(
        {i: list(generated[i]) for i in world.comb},
        {i: world.references[i] for i in world.comb},
        world.pairs,
        parse,
        ks=(K,),
    )
    recall = {
        label: [1.0 if (r is not None and r <= K) else 0.0 for _, r in sorted(p.first_rank.items())]
        for label, p in report.per_pair.items()
    }
    texts = sorted({c for images in world.fc_images.values() for i in images for c in generated[i][:K]})
    parsed = dict(zip(texts, parse(texts), strict=True)) if texts else {}
    by_label = {p.label: p for p in world.pairs}
    fc = {
        label: [1.0 if any(by_label[label] in parsed[c] for c in generated[i][:K]) else 0.0 for i in images]
        for label, images in world.fc_images.items()
    }
    top1 = {i: (generated[i][0] if generated[i] else "") for i in world.no_comb}
    _, per = world.cider.corpus_score({i: world.references[i] for i in world.no_comb}, top1)
    return {"recall": recall, "fc": fc, "cider": [per[i] for i in world.no_comb]}


def summary(hits: Mapping[str, Any]) -> dict[str, Any]:
    """Each figure with its 95% interval (×100)."""

    def iv(groups: Sequence[Sequence[float]]) -> dict[str, float] | None:
        interval = bootstrap_interval(groups)
        if interval is None:
            return None
        return {
            "estimate": round(100 * interval.estimate, 2),
            "low": round(100 * interval.low, 2),
            "high": round(100 * interval.high, 2),
            "groups": interval.groups,
            "units": interval.units,
        }

    pairs = list(hits["recall"])
    return {
        "recall_at_5": iv([hits["recall"][p] for p in pairs]),
        "recall_at_5_per_pair": {
            p: round(100 * float(np.mean(h)), 1) if h else None for p, h in hits["recall"].items()
        },
        "pair_images": {p: len(h) for p, h in hits["recall"].items()},
        "false_composition_at_5": iv([hits["fc"][p] for p in hits["fc"]]),
        "fc_images": {p: len(h) for p, h in hits["fc"].items()},
        "cider_d": iv([hits["cider"]]),
    }


def choose(rows: Mapping[str, Mapping[str, Any]], baseline: str = BUTD.name) -> str:
    """The selection rule (module docstring) over the guided rows of a development run."""
    floor = (1 - CIDER_TOLERANCE) * rows[baseline]["cider_d"]["estimate"]
    candidates = {k: v for k, v in rows.items() if k.startswith("guided")}
    if not candidates:
        raise ValueError("no guided configuration in the rows")

    def recall(k: str) -> float:
        r = candidates[k]["recall_at_5"]
        return float(r["estimate"]) if r else 0.0

    within = [k for k, v in candidates.items() if v["cider_d"]["estimate"] >= floor]
    good = [
        k
        for k in within
        if (candidates[k]["false_composition_at_5"] or {"estimate": 0})["estimate"] <= 100 * FC_LIMIT
    ]
    for pool in (good, within):
        if pool:
            return max(pool, key=recall)
    return max(candidates, key=lambda k: candidates[k]["cider_d"]["estimate"])


def dev_grid() -> list[Config]:
    """Stage A: the weight at beam 20, re-scoring every second word, pool 5 (the weight is in the units
    of BUTR+RR's criterion: 20 orders finished captions as its ``rerank_weight`` 0.05 does)."""
    return [guided(20, w, every=2) for w in (2.0, 5.0, 10.0, 20.0)]


def stage_b(best: Config) -> list[Config]:
    """Stage B, around stage A's choice: wider beams, every word, and the guided order alone."""
    w = float(dict(best.guide or {})["weight"])
    return [
        guided(40, w, every=2),
        guided(100, w, every=2),
        guided(20, w),
        guided(40, w, every=2, rerank=False),
    ]


async def run_world(
    repo: Path, world: World, configs: Sequence[Config], parse: PairsFn, log: Path | None = None
) -> dict[str, dict[str, Any]]:
    """Decode and score ``configs`` on ``world``: per configuration its figures and seconds, and the
    per-unit hits (``_hits``) for paired tests."""
    out: dict[str, dict[str, Any]] = {}
    async with await open_engine(repo, max_beam_size=100) as engine:
        for config in configs:
            generated, seconds = await decode_config(engine, world, config)
            hits = unit_hits(world, generated, parse)
            row = {"config": asdict(config), "seconds": round(seconds, 1), **summary(hits), "_hits": hits}
            row["examples"] = {str(i): generated[i][:2] for i in world.comb[:3]}
            out[config.name] = row
            brief = {k: row[k] for k in ("seconds", "recall_at_5", "false_composition_at_5", "cider_d")}
            print(world.name, config.name, json.dumps(brief), flush=True)
            if log is not None:
                with log.open("a", encoding="utf-8") as f:
                    f.write(json.dumps({"world": world.name, "name": config.name, **row}) + "\n")
    return out


def paired(rows: Mapping[str, Mapping[str, Any]], a: str, b: str) -> dict[str, Any] | None:
    """Held-out Recall@5 of ``a`` against ``b`` on the same (pair, image) units (×100)."""
    ha, hb = rows[a]["_hits"]["recall"], rows[b]["_hits"]["recall"]
    labels = [p for p in ha if ha[p] and p in hb]
    test = paired_test([ha[p] for p in labels], [hb[p] for p in labels])
    if test is None:
        return None
    d = test.difference
    return {
        "difference": round(100 * d.estimate, 2),
        "low": round(100 * d.low, 2),
        "high": round(100 * d.high, 2),
        "p_value": round(test.p_value, 4),
        "permutations": test.permutations,
    }


def public(rows: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    return {k: {kk: vv for kk, vv in v.items() if not kk.startswith("_")} for k, v in rows.items()}


def ensure_worlds(repo: Path, work: Path, group: int) -> None:
    """Render the repository's training world (with its systematicity split of ``group``) and the
    evaluation world under ``work/data`` where missing, as ``compcap-lab build`` and ``compcap-lab report``
    do."""
    from compcap_lab.pipeline.build import training_worlds
    from compcap_lab.pipeline.zoo import EVAL_SEED, ensure_eval_world
    from export.data.coco_captions import load_folder
    from export.data.splits import build_split, split_dir_for, write_split
    from export.presets import get_preset

    build = json.loads((repo / "build_report.json").read_text(encoding="utf-8"))
    preset, seed = get_preset(build["preset"]), int(build.get("seed", 0))
    train = work / "data" / "train"
    if not (split_dir_for(train, "systematicity", group) / "split.json").is_file():
        training_worlds(work, preset, seed)
        split = build_split(load_folder(train), "systematicity", group=group, seed=seed)
        write_split(split, split_dir_for(train, "systematicity", group))
    ensure_eval_world(work, preset, EVAL_SEED, seed, (group,))


def parse_config(spec: str) -> Config:
    """``BEAM:WEIGHT:EVERY:POOL[:norr]`` as a guided configuration."""
    parts = spec.split(":")
    if len(parts) not in (4, 5) or (len(parts) == 5 and parts[4] != "norr"):
        raise ValueError(f"a configuration is BEAM:WEIGHT:EVERY:POOL[:norr], got {spec!r}")
    beam, weight, every, pool = int(parts[0]), float(parts[1]), int(parts[2]), int(parts[3])
    return guided(beam, weight, every=every, pool=pool, rerank=len(parts) == 4)


def _p(paired: Mapping[str, Any]) -> str:
    """A stored paired test's (``paired``) p-value as the reports print it — at the permutation floor a
    bound with the number of permutations (``paired_test``'s 10 000 where the count was not stored) —
    and "mixed" where the reports' verdict rule gives it: the p-value, which takes the pairs as given,
    below 0.05 while the interval over pairs spans 0 (or the reverse)."""
    if "p_value" not in paired:
        return "p = nan"
    test = {
        "difference": {"low": paired["low"], "high": paired["high"]},
        "p_value": paired["p_value"],
        "permutations": paired.get("permutations") or PERMUTATIONS,
    }
    label = verdict(test)
    why = VERDICTS["mixed"].removeprefix("not settled: ")
    return p_phrase(test) + (f" — mixed by the reports' verdict rule ({why})" if label == "mixed" else "")


def _iv(figure: Mapping[str, Any] | None) -> str:
    if not figure:
        return "-"
    return f"{figure['estimate']:.1f} [{figure['low']:.1f}, {figure['high']:.1f}]"


def _table(rows: Mapping[str, Mapping[str, Any]], chosen: str | None = None) -> list[str]:
    lines = [
        "| configuration | held-out R@5 | false composition @5 (%) | CIDEr-D (Test no Comb) | seconds |",
        "|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        mark = " **(chosen)**" if name == chosen else ""
        lines.append(
            f"| {name}{mark} | {_iv(r['recall_at_5'])} | {_iv(r['false_composition_at_5'])} | "
            f"{_iv(r['cider_d'])} | {r['seconds']:.0f} |"
        )
    return lines


def render(state: Mapping[str, Any]) -> str:
    """``reports/search_hook.md`` from the study's JSON."""
    dev, test = state.get("dev"), state.get("test")
    lines = [
        "# Search hook: decoding toward what the ranker would choose (`ranker_guided`)",
        "",
        "The default repository's BUTR (trained on split systematicity/1) decodes with",
        "the `ranker_guided` hook: every `every` words each beam's `pool` most likely next words are",
        "re-scored by log-prob + λ × its ranking head's cosine between the partial caption and the image,",
        "so that the search keeps the beams the ranker favours instead of only re-ranking what a",
        "likelihood search left (BUTR+RR). Generated by `lab/compcap_lab/studies/search_hook.py`:",
        "",
        *(f"    {c}" for c in state.get("commands", [])),
        "",
        f"Machine: {state['machine']['platform']}, {state['machine']['cpus']} cores (shared with other",
        "work; seconds are wall time of each configuration's decoding, comparable within a table only).",
        "Every figure ×100 with its 95% interval: a two-stage bootstrap (2000 resamples, seed 0) over the",
        "held-out pairs and their images for Recall@5 and false composition, over the images for CIDEr-D",
        "(`service/evaluation/intervals.py`). Recall@5: the mean over the 6 held-out pairs of group 1 of the",
        "share of each pair's Test-Comb images with the pair attached in one of the top 5 captions.",
        "False composition @5: per held-out pair, the share of its images whose scene holds both",
        "constituents but no object carrying the pair (so no reference mentions it) on which a top-5",
        "caption attaches the pair anyway — Test no Comb holds no constituent of a held-out pair, so these",
        "images come from the world's sets no captioner trained on (development: Test Comb and val of the",
        "training world; test: Test Comb, val and the unused train set of the evaluation world), at most",
        f"{FC_PER_PAIR} per pair. CIDEr-D: the top caption on Test no Comb (in-distribution images), DF",
        "from the split's training references. BUTR+RR: beam 100, re-ranked by cosine + 0.05 × normalised",
        "log-prob (the reproduction's weight); every guided row re-ranks its B finished beams the same way",
        "(`no-RR`: the guided search's own order).",
    ]
    if dev:
        lines += [
            "",
            "## Development world (tuning)",
            "",
            f"World: the training world's held-out halves of systematicity/1 — the first "
            f"{dev['images']['test']} Test Comb and {dev['images']['test_no_comb']} Test no Comb images "
            f"(of 543 each: fewer images to fit the time budget), false-composition images per pair "
            f"{dev['fc_images']}. Rule fixed before the run: the highest Recall@5 among the configurations",
            f"with CIDEr-D ≥ 90% of BUTD's and false composition @5 ≤ {100 * FC_LIMIT:.1f}%. Stage A swept λ",
            "at beam 20, re-scoring every second word (k2), pool 5 (p5) (choice: "
            f"{dev['stage_a_choice']}); stage B tried beams 40 and 100, every word (k1), and the guided",
            "order without the final re-ranking (no-RR) around it. λ is in the units of BUTR+RR's",
            "criterion: a finished caption scores its normalised log-prob + λ × cosine, so λ = 20 orders",
            "finished captions as BUTR+RR's `rerank_weight` 0.05 does.",
            f"Development run: {dev['seconds'] / 60:.0f} min.",
            "",
            *_table(dev["rows"], dev["chosen"]),
        ]
    first = state.get("first_variant")
    if first:
        lines += [
            "",
            "## First variant (development world only; replaced)",
            "",
            "The hook first added λ × cosine to the *sum* of log-probs, so that after the search's length",
            "normalisation a finished caption scored (log-prob + λ·cosine) / words: the ranker's weight",
            "shrank with the caption's length and favoured short captions. On the same development images",
            f"({first['seconds'] / 60:.0f} min) it never beat BUTR+RR's Recall@5, and without the final",
            "re-ranking it recalled almost nothing; the weight that kept CIDEr-D (λ = 5) steered toward",
            "captions the ranker likes but that name the held-out pair no more often than likelihood does.",
            "It was replaced by the normalised form above (what the tables above and below use); its",
            "rows, for the record:",
            "",
            *_table(first["rows"], first.get("chosen")),
        ]
    if test:
        rows = test["rows"]
        chosen = test["chosen"]
        g, rr, bd = rows[chosen], rows[BUTR_RR.name], rows[BUTD.name]
        pt = test.get("paired_vs_butr_rr") or {}
        floor = 0.9 * bd["cider_d"]["estimate"]
        lines += [
            "",
            "## Test world (report)",
            "",
            f"World: the evaluation world (seed 20270313), split systematicity/1: {test['images']['test']}",
            f"Test Comb and {test['images']['test_no_comb']} Test no Comb images, false-composition images",
            f"per pair {test['fc_images']}. The chosen configuration, the baselines on the same images, and",
            "one sensitivity row named on the command line (not chosen by the rule). Test run: "
            f"{test['seconds'] / 60:.0f} min.",
            "",
            *_table(rows, chosen),
            "",
            f"Paired against BUTR+RR on the same (pair, image) units: Recall@5 difference "
            f"{pt.get('difference', float('nan')):+.1f} [{pt.get('low', float('nan')):.1f}, "
            f"{pt.get('high', float('nan')):.1f}], sign-flip permutation {_p(pt)}.",
            "",
            *(
                f"Sensitivity row {name} (not chosen by the rule), paired against BUTR+RR: "
                f"{v['difference']:+.1f} [{v['low']:.1f}, {v['high']:.1f}], {_p(v)}."
                for name, v in (test.get("sensitivity") or {}).items()
                if v
            ),
            "",
            "Recall@5 per held-out pair (images):",
            "",
            "| pair | images | " + " | ".join(rows) + " |",
            "|---|---|" + "---|" * len(rows),
        ]
        for pair, n in g["pair_images"].items():
            cells = " | ".join(f"{r['recall_at_5_per_pair'].get(pair, 0):.1f}" for r in rows.values())
            lines.append(f"| {pair} | {n} | {cells} |")
        lines += [
            "",
            "## Targets",
            "",
            "| target | result | met |",
            "|---|---|---|",
            f"| held-out Recall@5 ≥ 15.8 | {_iv(g['recall_at_5'])} | "
            f"{'yes' if g['recall_at_5']['estimate'] >= 15.8 else 'no'} |",
            f"| CIDEr-D ≥ 97.9 (within 10% of BUTD: ≥ {floor:.1f} here) | {_iv(g['cider_d'])} | "
            f"{'yes' if g['cider_d']['estimate'] >= max(97.9, floor) else 'no'} |",
            f"| false composition @5 ≤ 4.4% | {_iv(g['false_composition_at_5'])} | "
            f"{'yes' if (g['false_composition_at_5'] or {'estimate': 0})['estimate'] <= 4.4 else 'no'} |",
            "",
            f"BUTR+RR on the same images: Recall@5 {_iv(rr['recall_at_5'])}, CIDEr-D {_iv(rr['cider_d'])}.",
            "",
            "## Findings",
            "",
            "- Searching with the ranker raises held-out Recall@5 over BUTR+RR at the same B = 100 on the",
            f"  test world ({_iv(g['recall_at_5'])} against {_iv(rr['recall_at_5'])}) while keeping CIDEr-D",
            f"  ({_iv(g['cider_d'])} against BUTR+RR's {_iv(rr['cider_d'])}) and false composition within",
            "  bounds, but the Recall@5 target (15.8) is not reached: the point estimate is below it and",
            "  the interval is wide (6 held-out pairs).",
            "- The paired figures disagree in strength: the sign-flip permutation p-value flips single",
            "  (pair, image) units and treats the 6 pairs as fixed, so it is small; the bootstrap interval",
            "  of the difference also resamples the pairs and includes 0 when the gain rests on few pairs.",
            "  Read the interval as the uncertainty for other held-out pairs, the p-value for these ones.",
            "- The gain rests on two adjective pairs (per-pair table); the verb pairs stay near 0 in every",
            "  row: a search cannot find what the encoder does not see (the visual encoder's per-cell",
            "  action accuracy is about 35%, `model_repo/build_report.json`).",
            "- A larger λ buys Recall@5 at the cost of CIDEr-D and false composition (the sensitivity row;",
            "  on the development world λ = 5 at B = 100 reached 19.6 but missed the CIDEr-D bound by",
            "  1.7 points), so the target is out of reach within the quality bounds with this captioner:",
            "  pushed harder, the ranker's preference also attaches the pairs where they are absent.",
            "- The guided order alone, without re-ranking the finished beams, recalls little (`no-RR`",
            "  rows): the partial-caption cosine keeps candidates alive, the whole-caption cosine still",
            "  has to pick.",
            f"- Cost: {g['seconds']:.0f} s against {rr['seconds']:.0f} s for BUTR+RR on the same images and",
            "  cores — the ranker's text model embeds beam × (pool + 1) partial captions every second step.",
            "- The targets were derived from the zoo's mean over four groups (BUTR+RR 11.9, FULL",
            "  19.8); on the default repository's own group 1 BUTR+RR is at the figure above, and this",
            "  repository has no FULL captioner to measure the gap against.",
        ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=Path("model_repo"))
    parser.add_argument(
        "--work", type=Path, required=True, help="folder with data/train and data/eval_<seed>"
    )
    parser.add_argument("--group", type=int, default=1)
    parser.add_argument("--dev-images", type=int, default=250, help="Test Comb and no-Comb images each")
    parser.add_argument("--test-images", type=int, default=None, help="default: all")
    parser.add_argument("--stage", choices=["dev", "dev-extra", "test", "both", "render"], default="both")
    parser.add_argument(
        "--extra",
        nargs="*",
        default=[],
        metavar="BEAM:WEIGHT:EVERY:POOL[:norr]",
        help="dev-extra: more guided configurations on the development world (the rule chooses again); "
        "test: configurations reported beside the chosen one (sensitivity, not chosen)",
    )
    parser.add_argument("--out", type=Path, default=Path("reports"))
    args = parser.parse_args(argv)
    from compcap_lab.pipeline.zoo import EVAL_SEED
    from service.text.attachment import AttachmentChecker

    manifest = load_manifest(args.repo)
    h, w = manifest.image.height, manifest.image.width
    if args.stage != "render":
        ensure_worlds(args.repo, args.work, args.group)
    parse = CachedPairs(AttachmentChecker().pairs_batch)
    state_file = args.out / "search_hook.json"
    state: dict[str, Any] = json.loads(state_file.read_text()) if state_file.is_file() else {}
    if args.stage == "render":
        (args.out / "search_hook.md").write_text(render(state), encoding="utf-8")
        return 0
    state.setdefault("machine", {"platform": platform.platform(), "cpus": __import__("os").cpu_count()})
    log = args.out / "search_hook.runs.jsonl"
    if args.stage in ("dev", "both"):
        started = time.perf_counter()
        dev = load_world("dev", args.work / "data" / "train", args.group, args.dev_images, h, w)
        rows = asyncio.run(run_world(args.repo, dev, [BUTD, BUTR_RR, *dev_grid()], parse, log))
        best_a = choose(rows)
        more = [c for c in stage_b(Config(**{**rows[best_a]["config"]})) if c.name not in rows]
        rows.update(asyncio.run(run_world(args.repo, dev, more, parse, log)))
        chosen = choose(rows)
        state["dev"] = {
            "world": str(args.work / "data" / "train"),
            "images": {"test": len(dev.comb), "test_no_comb": len(dev.no_comb)},
            "fc_images": {p: len(v) for p, v in dev.fc_images.items()},
            "stage_a_choice": best_a,
            "chosen": chosen,
            "chosen_config": rows[chosen]["config"],
            "seconds": round(time.perf_counter() - started, 1),
            "rows": public(rows),
        }
        state_file.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
    if args.stage == "dev-extra":
        started = time.perf_counter()
        dev = load_world("dev", args.work / "data" / "train", args.group, args.dev_images, h, w)
        extra = [parse_config(spec) for spec in args.extra]
        rows = asyncio.run(run_world(args.repo, dev, extra, parse, log))
        state["dev"]["rows"].update(public(rows))
        state["dev"]["extra"] = [c.name for c in extra]
        state["dev"]["chosen"] = choose(state["dev"]["rows"])
        state["dev"]["chosen_config"] = state["dev"]["rows"][state["dev"]["chosen"]]["config"]
        state["dev"]["seconds"] = round(state["dev"]["seconds"] + time.perf_counter() - started, 1)
        state_file.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
    if args.stage in ("test", "both"):
        started = time.perf_counter()
        chosen_config = Config(**state["dev"]["chosen_config"])
        test = load_world(  # nobody trained on any image of this world: its train set serves too
            "test",
            args.work / "data" / f"eval_{EVAL_SEED}",
            args.group,
            args.test_images,
            h,
            w,
            ("test", "val", "train"),
        )
        also = [parse_config(spec) for spec in args.extra]  # sensitivity rows, not chosen
        configs = [BUTD, BUTR, BUTR_RR, chosen_config, *also]
        rows = asyncio.run(run_world(args.repo, test, configs, parse, log))
        state["test"] = {
            "world": str(args.work / "data" / f"eval_{EVAL_SEED}"),
            "images": {"test": len(test.comb), "test_no_comb": len(test.no_comb)},
            "fc_images": {p: len(v) for p, v in test.fc_images.items()},
            "chosen": chosen_config.name,
            "paired_vs_butr_rr": paired(rows, chosen_config.name, BUTR_RR.name),
            "sensitivity": {c.name: paired(rows, c.name, BUTR_RR.name) for c in also},
            "seconds": round(time.perf_counter() - started, 1),
            "rows": public(rows),
        }
        state_file.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
    command = "python -m compcap_lab.studies.search_hook " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    state.setdefault("commands", []).append(command)
    state_file.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
    (args.out / "search_hook.md").write_text(render(state), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = [
    "Config",
    "World",
    "carries",
    "choose",
    "ensure_worlds",
    "load_world",
    "main",
    "paired",
    "parse_config",
    "render",
    "summary",
    "unit_hits",
]
