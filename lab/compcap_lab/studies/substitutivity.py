"""The substitutivity test of Pantazopoulos et al. (2022, §4.3): captions with and without synonym
substitution during beam search.

A captioner trained on the full split decodes the evaluation world's images (O; a world seed never used in
training, so every image is a test image). Following Pantazopoulos et al. (2022): the candidate pairs
(category, fine-grained word) are kept when both words occur at least ``min_train`` (200) times in the
captioner's training captions; images are kept whose O caption contains a fine-grained word (S1) that occurs
at least ``min_generated`` (10) times in the O captions. Those images are decoded again with the
``synonym_substitution`` hook (S: whenever a hypothesis' most likely next word is in S1, its category word
from S2 gets probability 1); O is the plain decode (the same search without the hook, an ordinary request).
Scores (Pantazopoulos et al., 2022, Table 6): O vs GT, S vs GT, O vs S (O as the reference), and Ot vs St, the
sub-captions after the first S1 word of O and after the word that replaced it in S
(``service.probes.scoring.substitutivity.substituted_tails``). High O-vs-S and Ot-vs-St overlap means the
model goes on describing the image the same way after the substitution.

``compcap-lab substitutivity --repo model_zoo --data <eval world> --train <training world> --out reports``
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from compcap_lab.studies.evaluate import load_images
from export.data.coco_captions import load_folder
from export.data.splits import load_split, split_path_for, synonym_counts
from export.packaging.decoding import decode, open_engine
from service.evaluation.cider import CiderD
from service.evaluation.intervals import bootstrap_interval
from service.evaluation.metrics import caption_metrics
from service.manifest import load_manifest
from service.probes.scoring.substitutivity import substituted_tails, substitutivity_result
from service.text.concepts import load_concepts
from service.text.synonyms import candidate_table, plural
from service.text.vocabulary import Vocabulary, tokenize

ROWS = ("O vs GT", "S vs GT", "O vs S", "Ot vs St")
AGREEING = "Ot vs St, S follows O up to the word"
REPORT_METRICS = ("bleu1", "bleu4", "meteor", "rouge_l", "cider_d")


def follows_up_to_the_word(o_words: list[str], s_words: list[str], mapping: dict[str, str]) -> bool | None:
    """Whether S is O word for word before O's first S1 word ``w`` and has ``mapping[w]`` in its place —
    the premise of Ot vs St (O and S decoded alike up to the substitution). Forcing the substitute with
    probability 1 changes the beam's scores, so S's search can leave O's path before ``w``. None when O
    has no S1 word."""
    first = next((n for n, w in enumerate(o_words) if w in mapping), None)
    if first is None:
        return None
    return s_words[:first] == o_words[:first] and s_words[first : first + 1] == [mapping[o_words[first]]]


def agreement(
    o_text: dict[int, str],
    s_text: dict[int, str],
    mapping: dict[str, str],
    cider: CiderD | None,
    meteor: bool,
) -> dict[str, Any]:
    """How often S follows O up to the substituted word (with its 95% bootstrap interval over images),
    and the Ot vs St row scored on those images only (the study's Ot vs St row scores every image with
    both tails, agreeing or not)."""
    follows = {i: follows_up_to_the_word(tokenize(o_text[i]), tokenize(s_text[i]), mapping) for i in o_text}
    judged = [i for i, f in follows.items() if f is not None]
    agreeing = [i for i in judged if follows[i]]
    tails = {
        i: t
        for i in agreeing
        if (t := substituted_tails(tokenize(o_text[i]), tokenize(s_text[i]), mapping)) and t[0] and t[1]
    }
    row = None
    if tails:
        scores = caption_metrics(
            {i: [" ".join(ot)] for i, (ot, _) in tails.items()},
            {i: " ".join(st) for i, (_, st) in tails.items()},
            cider,
            meteor,
        ).to_dict()
        row = {m: scores.get(m) for m in REPORT_METRICS} | {"images": float(len(tails))}
    share = bootstrap_interval([[1.0 if follows[i] else 0.0 for i in judged]])
    return {
        "images": len(judged),
        "follows": len(agreeing),
        "share": None if share is None else share.as_dict(),
        "tails": len(tails),
        "row": row,
    }


def substitution_table(
    train_captions: list[str], vocab_words: set[str], min_train: int
) -> tuple[list[tuple[str, str]], list[dict[str, Any]]]:
    """``(S1 fine word, S2 category word)`` pairs, singular and plural, of the candidate pairs whose two
    words both occur ``min_train`` times in ``train_captions`` and are in the vocabulary; and the counts."""
    concepts = load_concepts()
    counts = synonym_counts(train_captions, candidate_table(concepts), concepts)
    pairs: dict[str, str] = {}
    for c in counts:
        if c["category_count"] < min_train or c["fine_count"] < min_train:
            continue
        for fine, category in (
            (c["fine"], c["category"]),
            (plural(c["fine"], concepts), plural(c["category"], concepts)),
        ):
            if fine != category and fine in vocab_words and category in vocab_words and fine not in pairs:
                pairs[fine] = category
    return sorted(pairs.items()), counts


async def _decode_o_and_s(
    zoo: Path,
    pixels: np.ndarray,
    base: dict[str, Any],
    s1: set[str],
    pairs: list[tuple[str, str]],
    min_generated: int,
) -> tuple[list[str], list[int], list[str], dict[str, int]]:
    """O for every image (the plain search); S (the same search with ``synonym_substitution`` on the
    words generated at least ``min_generated`` times) for the images whose O holds one of them."""
    async with await open_engine(zoo) as engine:
        plain = await decode(engine, pixels, engine.resolve(**base), f"O {base['model']}")
        original = [per[0].text for per in plain]
        generated = Counter(w for text in original for w in set(tokenize(text)) if w in s1)
        kept = {w for w, n in generated.items() if n >= min_generated}
        chosen = [n for n, text in enumerate(original) if kept & set(tokenize(text))]
        hook = {"name": "synonym_substitution", "params": {"pairs": [[a, b] for a, b in pairs if a in kept]}}
        substituted = (
            await decode(engine, pixels[chosen], engine.resolve(**base, hooks=[hook]), "S") if chosen else []
        )
    return original, chosen, [per[0].text for per in substituted], {w: generated[w] for w in kept}


def run_substitutivity(
    zoo: Path,
    data: Path,
    train: Path,
    out: Path,
    captioner: str = "butd_full",
    images: int = 2000,
    min_train: int = 200,
    min_generated: int = 10,
    beam_size: int = 5,
    meteor: bool = True,
) -> dict[str, Any]:
    zoo, data, train, out = Path(zoo), Path(data), Path(train), Path(out)
    manifest = load_manifest(zoo)
    cap = manifest.captioner(captioner)
    vocab = Vocabulary.load(zoo / manifest.vocabulary.file)
    train_ds = load_folder(train)
    kind, _, group = cap.training.split.partition("/")
    train_split = load_split(split_path_for(train, kind, int(group) if group else None))
    train_ids = [int(i) for i in train_split.sets["train"]]
    train_refs = {i: train_ds.captions[i] for i in train_ids}
    pairs, counts = substitution_table(train_ds.subset_captions(train_ids), set(vocab.words), min_train)
    s1 = {a for a, _ in pairs}

    eval_ds = load_folder(data)
    eval_ids = [int(i) for i in eval_ds.image_ids][:images]  # a world the captioner never saw
    pixels = load_images(
        eval_ds.root, [eval_ds.file_names[i] for i in eval_ids], manifest.image.height, manifest.image.width
    )

    base = {"model": captioner, "beam_size": beam_size, "n_best": 1, "rerank": False}
    original, chosen, sub, kept_counts = asyncio.run(
        _decode_o_and_s(zoo, pixels, base, s1, pairs, min_generated)
    )
    orig = [original[n] for n in chosen]  # O: the same search without the hook, an ordinary request
    kept = set(kept_counts)
    mapping = {a: b for a, b in pairs if a in kept}
    ids = [eval_ids[n] for n in chosen]
    o_text, s_text = dict(zip(ids, orig, strict=True)), dict(zip(ids, sub, strict=True))
    scored = substitutivity_result(
        o_text,
        s_text,
        mapping,
        {i: eval_ds.captions[i] for i in ids},
        CiderD.from_references(train_refs),
        meteor,
        metrics=REPORT_METRICS,
    )
    result = {
        "captioner": captioner,
        "trained_on": cap.training.split,
        "eval_data": str(data),
        "eval_images": len(eval_ids),
        "min_train": min_train,
        "min_generated": min_generated,
        "candidates": counts,
        "pairs": [[a, b] for a, b in pairs],
        "substituted_words": {w: kept_counts[w] for w in sorted(kept)},
        "images": len(ids),
        "images_with_tails": scored["images_with_tails"],
        "s_is_o_with_the_word_replaced": scored["exact_replacements"],
        "rows": scored["rows"],
        "agreement": agreement(o_text, s_text, mapping, CiderD.from_references(train_refs), meteor),
        "examples": [{"image_id": i, "O": o_text[i], "S": s_text[i]} for i in ids[:12]],
        "captions": [{"image_id": i, "O": o_text[i], "S": s_text[i]} for i in ids],
        "mapping": dict(sorted(mapping.items())),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "substitutivity.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (out / "substitutivity.md").write_text(markdown(result), encoding="utf-8")
    return result


def markdown(r: dict[str, Any]) -> str:
    words = ", ".join(f"{w} ({n})" for w, n in r["substituted_words"].items()) or "none"
    lines = [
        "# Substitutivity (Pantazopoulos et al., 2022, §4.3, Table 6 shape) on SceneWorld",
        "",
        f"Captioner `{r['captioner']}` (trained on `{r['trained_on']}`), beam 5, no re-ranking, on the "
        f"first {r['eval_images']} images of `{r['eval_data']}` (a world seed never used in training). "
        f"Pairs kept where both words occur ≥ {r['min_train']} times in its training captions; images "
        f"kept whose caption O contains a fine-grained word generated ≥ {r['min_generated']} times: "
        f"{words}. S: the same beam search with `synonym_substitution` (fine-grained word → category, "
        "probability 1). "
        f"{r['images']} images; Ot/St (after the substituted word) on {r['images_with_tails']}. S equals "
        f"O with the word replaced on {r['s_is_o_with_the_word_replaced']} of {r['images']} images.",
        "",
        "| comparison | BLEU-1 | BLEU-4 | METEOR | ROUGE-L | CIDEr-D |",
        "|---|---|---|---|---|---|",
    ]
    agreed = r.get("agreement")
    rows = dict(r["rows"])
    if agreed and agreed.get("row"):
        rows[AGREEING] = agreed["row"]
    for name in (*ROWS, AGREEING):
        row = rows.get(name)
        if row is None:
            continue
        meteor = "–" if row["meteor"] is None else f"{100 * row['meteor']:.2f}"
        lines.append(
            f"| {name} | {100 * row['bleu1']:.2f} | {100 * row['bleu4']:.2f} | {meteor} | "
            f"{100 * row['rouge_l']:.2f} | {100 * row['cider_d']:.2f} |"
        )
    lines += [""]
    if agreed:
        share = agreed["share"]
        within = (
            f" ({100 * share['estimate']:.1f}%, 95% interval {100 * share['low']:.1f}–"
            f"{100 * share['high']:.1f}% over images)"
            if share
            else ""
        )
        lines += [
            f"S follows O word for word up to the substituted word, with the substitute in its place, on "
            f"{agreed['follows']} of {agreed['images']} images{within}: forcing the substitute with "
            "probability 1 changes the beam's scores, so S's search can leave O's path earlier. The "
            f"Ot vs St row scores every image with both tails ({r['images_with_tails']}); the last row "
            f"scores only those where S follows O ({agreed['tails']}).",
        ]
    else:
        lines += [
            "How often S follows O up to the substituted word is not known for this run: its JSON holds "
            "12 example captions, not every image's O and S (a rerun stores them and reports it). The "
            "Ot vs St row scores every image with both tails, agreeing or not.",
        ]
    lines += [
        "",
        "BLEU, METEOR, ROUGE-L and CIDEr-D here are corpus figures, not means of per-image values: an "
        "interval would need a bootstrap over images that re-scores each resample"
        + (
            " (this run's JSON holds every image's O and S, `captions`, for it)."
            if r.get("captions")
            else " (a rerun stores every image's O and S for it)."
        ),
    ]
    lines += ["", "Examples (O → S):", ""]
    lines += [f"- {e['O']} → {e['S']}" for e in r["examples"]]
    for note in r.get("notes") or []:
        lines += ["", note]
    return "\n".join(lines) + "\n"
