"""The productivity test of Pantazopoulos et al. (2022, §4.2): a captioner trained without the long (or dense)
tail, evaluated on it.

The productivity split of the training world (``export.data.splits``, ``by="length"``: the 10% of images
with the longest mean reference caption form ``test_rich``; ``by="density"``: the 10% with most objects
form ``test_dense``; a random ``test_base`` and ``val`` of the same size; the rest trains) gives one BUTD
its training and validation images. It is trained as the zoo trains its captioners (the default
preset's ``zoo_caption_epochs`` cap, greedy val BLEU-4 after each epoch, best epoch kept, patience) on the
regions of the zoo's own visual encoder — rebuilt in torch from the zoo's ONNX graph, so the regions are
the zoo's — with the zoo's vocabulary, and exported into a small repository under the work dir.

The same kind of split of the evaluation world (a world seed never used in training) supplies the test
sets: its tail (Test Rich / Test High Density) and its Test Base. That captioner and the zoo's FULL BUTD
(trained on the training world's "full" split, tail included: the upper reference) decode both sets
through the served engine (``compcap_lab.studies.evaluate.evaluate``, beam 5, no re-ranking). The table
follows Pantazopoulos et al. (2022), Tables 3 and 5 (B1, B4, M, R, C; BERTScore is not computed) with the
generated mean length of its Table 4 (ASL) and the references' mean length beside it.

``compcap-lab productivity --train-data <training world> --eval-data <eval world> --by length --out reports``
"""

from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import numpy_helper
from rich.console import Console
from torch import nn

from compcap_lab.pipeline.build import training_record, validation_set
from compcap_lab.studies.evaluate import evaluate
from compcap_lab.training.train import extract_regions, train_captioner
from export.data.coco_captions import load_folder
from export.data.splits import Split, build_split, write_split
from export.models.architectures import ARCHITECTURES
from export.models.visual_encoder import VisualEncoder
from export.packaging.package import architecture_entries, export_repository
from export.presets import Preset, get_preset
from sceneworld.dataset import load_dataset
from service.text.vocabulary import Vocabulary, tokenize

TAIL = {"length": "test_rich", "density": "test_dense"}
SET_LABEL = {"test_base": "Test Base", "test_rich": "Test Rich", "test_dense": "Test High Density"}
COLUMNS = (
    ("bleu1", "BLEU-1", 100.0),
    ("bleu4", "BLEU-4", 100.0),
    ("meteor", "METEOR", 100.0),
    ("rouge_l", "ROUGE-L", 100.0),
    ("cider_d", "CIDEr-D", 100.0),
    ("asl", "ASL", 1.0),
    ("reference_asl", "ref. ASL", 1.0),
)
console = Console(stderr=True)


# ------------------------------------------------------------------------------------------ helpers
def encoder_from_onnx(path: Path, preset: Preset) -> VisualEncoder:
    """The torch ``VisualEncoder`` of an exported ``visual_encoder`` graph. Export folds each BatchNorm
    into its convolution (weight and a new bias), so each block gets the folded convolution weight and a
    BatchNorm that only adds the folded bias (mean 0, variance 1, scale sqrt(1 + eps))."""
    model = onnx.load(str(path))
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:  # export shares equal initializers through Identity nodes
        if node.op_type == "Identity" and node.input[0] in weights:
            weights[node.output[0]] = weights[node.input[0]]
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    encoder = VisualEncoder(preset.encoder_channels, preset.region_dim, preset.grid, preset.image_size)
    blocks = list(encoder.features)
    if len(convs) != len(blocks) + 1:
        raise ValueError(f"{path}: {len(convs)} Conv nodes, expected {len(blocks) + 1}")

    def tensor(name: str, like: torch.Tensor) -> torch.Tensor:
        value = torch.from_numpy(np.array(weights[name], dtype=np.float32))
        if value.shape != like.shape:
            raise ValueError(f"{path}: {name} has shape {tuple(value.shape)}, expected {tuple(like.shape)}")
        return value

    with torch.no_grad():
        for block, node in zip(blocks, convs[:-1], strict=False):
            assert isinstance(block, nn.Sequential)
            conv, norm = block[0], block[1]
            assert isinstance(conv, nn.Conv2d) and isinstance(norm, nn.BatchNorm2d)
            conv.weight.copy_(tensor(node.input[1], conv.weight))
            norm.bias.copy_(tensor(node.input[2], norm.bias))
            assert norm.running_mean is not None and norm.running_var is not None
            norm.running_mean.zero_()
            norm.running_var.fill_(1.0)
            norm.weight.fill_(math.sqrt(1.0 + norm.eps))
        last = convs[-1]
        encoder.project.weight.copy_(tensor(last.input[1], encoder.project.weight))
        assert encoder.project.bias is not None
        encoder.project.bias.copy_(tensor(last.input[2], encoder.project.bias))
        for name in ("mean", "std"):
            key = next((k for k in weights if k.endswith(f".{name}") or k == name), None)
            if key is not None:
                getattr(encoder, name).copy_(tensor(key, getattr(encoder, name)))
    return encoder.eval()


def onnx_regions_diff(encoder: VisualEncoder, path: Path, images: np.ndarray) -> float:
    """Max abs difference between the rebuilt encoder's regions and the ONNX graph's on ``images``."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: images})[0]
    encoder.eval()
    with torch.no_grad():
        expected = encoder(torch.from_numpy(images)).numpy()
    return float(np.abs(np.asarray(got) - expected).max())


def reference_asl(captions: dict[int, list[str]], ids: list[int]) -> float:
    """Mean length in tokens of the reference captions of ``ids`` (all references, pooled)."""
    lengths = [len(tokenize(c)) for i in ids for c in captions[i]]
    return float(np.mean(lengths)) if lengths else 0.0


def gaps(rows: list[dict[str, Any]], tail: str) -> dict[str, dict[str, float | None]]:
    """Per model, tail minus Test Base of each metric (``None`` where either is missing)."""
    by = {(r["model"], r["set"]): r for r in rows}
    out: dict[str, dict[str, float | None]] = {}
    for model in dict.fromkeys(r["model"] for r in rows):
        base, rich = by.get((model, "test_base")), by.get((model, tail))
        if base is None or rich is None:
            continue
        out[model] = {
            key: None if base.get(key) is None or rich.get(key) is None else rich[key] - base[key]
            for key, _, _ in COLUMNS
        }
    return out


# ------------------------------------------------------------------------------------------ pipeline
def _split(folder: Path, by: str, seed: int, out: Path) -> Split:
    split = build_split(load_folder(folder), "productivity", by=by, seed=seed)
    write_split(split, out)
    return split


def run_productivity(
    train_data: Path,
    eval_data: Path,
    by: str,
    out: Path,
    work: Path | None = None,
    zoo: Path = Path("model_zoo"),
    reference: str = "butd_full",
    preset: str = "default",
    seed: int = 0,
    meteor: bool = True,
    limit: int | None = None,
) -> dict[str, Any]:
    if by not in TAIL:
        raise ValueError(f"by must be one of {sorted(TAIL)}, got {by!r}")
    train_data, eval_data, out, zoo = Path(train_data), Path(eval_data), Path(out), Path(zoo)
    work_dir = Path(work) if work is not None else zoo.with_name(zoo.name + ".work") / f"productivity_{by}"
    tail, name = TAIL[by], f"butd_productivity_{by}"
    timings: dict[str, float] = {}
    started = t0 = time.perf_counter()
    p = get_preset(preset)
    p = replace(p, caption_epochs=p.zoo_caption_epochs)
    train_split = _split(train_data, by, seed, work_dir / "splits" / "train")
    eval_split = _split(eval_data, by, seed, work_dir / "splits" / "eval")
    timings["splits"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    encoder_path = zoo / "visual_encoder" / "1" / "model.onnx"
    encoder = encoder_from_onnx(encoder_path, p)
    images, captions, _, ids = load_dataset(train_data)
    encoder_diff = onnx_regions_diff(encoder, encoder_path, images[:64])
    regions = extract_regions(encoder, images)
    vocab = Vocabulary.load(zoo / "vocab.json")
    position = {image_id: i for i, image_id in enumerate(ids)}
    rows = np.array([position[i] for i in train_split.sets["train"]])
    val = validation_set(train_split, position, regions, captions, p.val_images)
    timings["regions"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    torch.manual_seed(seed)
    arch = ARCHITECTURES["butd"]
    model = arch.build(len(vocab), regions.size(-1), regions.size(1), p)
    log = train_captioner(
        model,
        regions[rows],
        [captions[i] for i in rows],
        vocab,
        p,
        seed,
        name,
        rank=arch.ranks,
        learning_rate=arch.learning_rate(p),
        val=val,
    )
    dataset = f"sceneworld({train_data}, images={len(images)})"
    training = training_record(train_split, len(rows), log, dataset).model_copy(
        update={"split": f"productivity/{by}"}
    )
    timings["train"] = time.perf_counter() - t0

    entry, rankers = architecture_entries(arch, name, model, training)  # BUTD: no ranker

    t0 = time.perf_counter()
    repo = work_dir / "repo"
    shutil.rmtree(repo, ignore_errors=True)
    repo.mkdir(parents=True)
    eval_images = load_dataset(eval_data)[0][:8]
    _, parity = export_repository(
        repo,
        p,
        encoder,
        vocab,
        [entry],
        rankers,
        eval_images,
        default_captioner=name,
        programs=False,
    )
    timings["export"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    eval_ds = load_folder(eval_data)
    split_file = work_dir / "splits" / "eval" / "split.json"
    results: list[dict[str, Any]] = []
    for model_repo, captioner, label in ((repo, name, "BUTD (no tail)"), (zoo, reference, "FULL BUTD")):
        for set_name in (tail, "test_base"):
            r = evaluate(
                model_repo,
                eval_data,
                split_file,
                "productivity",
                None,
                None,
                set_name=set_name,
                limit=limit,
                captioners=[captioner],
                meteor=meteor,
                fallback_ranker=False,
            )
            ids_used = eval_split.sets[set_name][:limit] if limit else eval_split.sets[set_name]
            row = {k: v for k, v in r["results"][0].items() if v is not None or k == "meteor"}
            row.update(
                model=label,
                repo=str(model_repo),
                set=set_name,
                images=r["images"],
                reference_asl=round(reference_asl(eval_ds.captions, ids_used), 6),
            )
            results.append(row)
    timings["evaluate"] = time.perf_counter() - t0
    timings["total"] = time.perf_counter() - started

    result: dict[str, Any] = {
        "by": by,
        "tail": tail,
        "train_data": str(train_data),
        "eval_data": str(eval_data),
        "zoo": str(zoo),
        "repo": str(repo),
        "preset": p.name,
        "seed": seed,
        "meteor": meteor,
        "train_split": {k: len(v) for k, v in train_split.sets.items()},
        "train_split_mean_score": train_split.info["mean_score"],
        "eval_split": {k: len(v) for k, v in eval_split.sets.items()},
        "eval_split_mean_score": eval_split.info["mean_score"],
        "score": train_split.info["score"],
        "threshold": {"train": train_split.info["threshold"], "eval": eval_split.info["threshold"]},
        "captioner": {
            "name": name,
            "training": training.model_dump(),
            "encoder_regions_max_abs_diff_vs_zoo": encoder_diff,
            "parity_max_abs_diff": parity,
        },
        "rows": results,
        "gaps": gaps(results, tail),
        "timings_s": {k: round(v, 1) for k, v in timings.items()},
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / f"productivity_{by}.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (out / f"productivity_{by}.md").write_text(markdown(result), encoding="utf-8")
    console.print(f"[green]productivity ({by})[/] in {timings['total']:.0f} s → {out}/productivity_{by}.md")
    return result


def _cell(value: float | None, scale: float) -> str:
    return "–" if value is None else f"{value * scale:.2f}"


def table(r: dict[str, Any]) -> list[str]:
    """The markdown table: one row per model × set (tail first, as in Pantazopoulos et al., 2022, Tables 3
    and 5)."""
    lines = [
        "| model | set | images | " + " | ".join(label for _, label, _ in COLUMNS) + " |",
        "|---|---|---|" + "---|" * len(COLUMNS),
    ]
    for row in r["rows"]:
        cells = " | ".join(_cell(row.get(key), scale) for key, _, scale in COLUMNS)
        lines.append(
            f"| {row['model']} | {SET_LABEL.get(row['set'], row['set'])} | {row['images']} | {cells} |"
        )
    return lines


def findings(r: dict[str, Any]) -> list[str]:
    """A short reading of the figures (computed, so it stays true when the report is rebuilt)."""
    by = {(row["model"], row["set"]): row for row in r["rows"]}
    tail, label = r["tail"], SET_LABEL[r["tail"]]
    no_tail, full = "BUTD (no tail)", "FULL BUTD"
    if not all((m, s) in by for m in (no_tail, full) for s in (tail, "test_base")):
        return []

    def cider(m: str, s: str) -> float:
        return 100 * float(by[(m, s)]["cider_d"])

    def drop(m: str) -> str:
        base, rich = cider(m, "test_base"), cider(m, tail)
        return f"{base - rich:.1f} CIDEr-D ({100 * (base - rich) / base:.0f}%)" if base else "n/a"

    nt, fu = by[(no_tail, tail)], by[(full, tail)]
    nb, fb = by[(no_tail, "test_base")], by[(full, "test_base")]
    specific = (cider(full, tail) - cider(no_tail, tail)) - (
        cider(full, "test_base") - cider(no_tail, "test_base")
    )
    ref_gain = nt["reference_asl"] - by[(no_tail, "test_base")]["reference_asl"]
    gen_gain = {m: by[(m, tail)]["asl"] - by[(m, "test_base")]["asl"] for m in (no_tail, full)}
    return [
        "What it shows: "
        f"from Test Base to {label} the captioner trained without the tail loses {drop(no_tail)}, the FULL "
        f"BUTD that saw the tail loses {drop(full)}. FULL minus no-tail is "
        f"{100 * (fu['bleu4'] - nt['bleu4']):+.1f} BLEU-4 and "
        f"{cider(full, tail) - cider(no_tail, tail):+.1f} "
        f"CIDEr-D on {label}, against {100 * (fb['bleu4'] - nb['bleu4']):+.1f} BLEU-4 and "
        f"{cider(full, 'test_base') - cider(no_tail, 'test_base'):+.1f} CIDEr-D on Test Base: what is "
        f"specific to the unseen tail is the difference, {specific:+.1f} CIDEr-D. The references of "
        f"{label} are {ref_gain:+.2f} tokens longer than Test Base's; the generated captions grow by "
        f"{gen_gain[no_tail]:+.2f} (no tail) and {gen_gain[full]:+.2f} (FULL) tokens, to "
        f"{nt['asl']:.2f} and {fu['asl']:.2f} against {nt['reference_asl']:.2f}"
        + (
            ": neither model produces captions as long as the tail's references"
            + (
                ", and the one that never saw them stays further below. "
                if gen_gain[no_tail] < gen_gain[full]
                else ". "
            )
            if max(nt["asl"], fu["asl"]) < nt["reference_asl"]
            else ". "
        )
        + "Caveats: one training run per model; FULL also trained on more images (the "
        "full split's train set, the training world's tail included) and was selected on another val "
        "set, so the part of the gap that is productivity proper is the difference between the two "
        "models' drops, not the drop itself; BERTScore is not computed.",
    ]


def markdown(r: dict[str, Any]) -> str:
    tail = SET_LABEL[r["tail"]]
    cap = r["captioner"]
    tr = cap["training"]
    score = r["score"]
    ms_train, ms_eval = r["train_split_mean_score"], r["eval_split_mean_score"]
    lines = [
        f"# Productivity by {r['by']} (Pantazopoulos et al., 2022, §4.2, "
        f"Table {3 if r['by'] == 'length' else 5} shape) on SceneWorld",
        "",
        f"Split of the training world `{r['train_data']}` by {score}: {r['tail']} = the top 10% "
        f"(≥ {r['threshold']['train']}), mean {ms_train[r['tail']]} vs {ms_train['train']} in train; "
        f"sets {r['train_split']}. BUTD (no tail) trains on its train set ({tr['images']} images) with the "
        f"zoo's visual encoder (rebuilt from ONNX, regions max abs diff "
        f"{cap['encoder_regions_max_abs_diff_vs_zoo']:.1e}) and vocabulary, selected on its val set "
        f"(greedy BLEU-4 per epoch {[round(100 * b, 2) for b in tr['val_bleu4']]}, epoch "
        f"{tr['selected_epoch']} of at most {tr['max_epochs']} kept). FULL BUTD is the zoo's `butd_full` "
        "(the training world's full split, tail included: the upper reference).",
        "",
        f"Test sets from the same split of the evaluation world `{r['eval_data']}` (never used in "
        f"training): {tail} (mean {ms_eval[r['tail']]}) and Test Base (mean {ms_eval['test_base']}). "
        "Beam 5, no re-ranking, scores ×100; CIDEr-D document frequencies from the evaluation split's "
        "train references; ASL = mean generated length, ref. ASL = mean reference length. "
        + ("" if r["meteor"] else "METEOR was not computed (--no-meteor). ")
        + "BERTScore (the paper's BS column) is not computed.",
        "",
        *table(r),
        "",
        f"{tail} minus Test Base:",
        "",
    ]
    for model, g in r["gaps"].items():
        parts = [
            f"{label} {value * scale:+.2f}"
            for key, label, scale in COLUMNS
            if (value := g.get(key)) is not None
        ]
        lines.append(f"- {model}: " + ", ".join(parts))
    lines += [
        "",
        *findings(r),
        "",
        "No figure here has an interval: BLEU, METEOR, ROUGE-L and CIDEr-D are corpus figures and the "
        "JSON holds no per-image captions; an interval needs a rerun that stores each image's caption, "
        "then a bootstrap over images re-scoring each resample.",
        "",
        f"Timings (s): {r['timings_s']}.",
        "",
    ]
    return "\n".join(lines)
