"""``compcap-lab compositional``: compositional rankers for a built zoo (``compcap-lab models``). Per held-out
group, ``comp_g<group>``: VSE++ trained with SceneWorld's counterfactual hard negatives
(``compcap_lab.training.compositional``) on the same split, regions and vocabulary as the zoo's
``vsepp_g<group>`` and with its seed (same initialisation and batch order: only the loss differs); for one
group also on more training seeds (``comp_g<group>_seed<N>``, seeded as ``compcap-lab seeds`` seeds that
group's VSE++ on training seed N).

What the zoo trained on is reloaded with the zoo's own loaders (``compcap_lab.pipeline.build`` and
``.zoo``): the training world under ``<zoo>.work/data/train`` and its systematicity splits, the frozen
visual encoder from ``<zoo>.work/checkpoints`` (checked against the repository's ``visual_encoder`` on
onnxruntime), the repository's vocabulary. The rankers are exported by the product's export path
(``export.packaging.package.export_repository``: ONNX, parity, torch programs, Triton configs) and
written, with everything the zoo holds, into a new repository ``--out`` beside the zoo
(``<zoo>.comp`` by default), which serves them as ``rerank=comp_g<group>``; the zoo itself is not
changed. Trained rankers are kept under ``<out>.work/checkpoints`` (keyed by what they were trained
from), so a rerun that was cut off trains only what is missing. ``compositional_report.json`` in the new
repository records the negatives and each ranker's training.

With ``evaluate``, the rankers are evaluated exactly as the reproduction's control rows
(``compcap_lab.studies.compositional``): BUTD's 100 beams of each group re-ranked by the group's VSE++ and
by its compositional ranker(s) with the reproduction's λ, beside BUTD and BUTR+RR, on the zoo's evaluation
world; intervals, paired tests (Holm), the beam ceiling and the targets, written as ``compositional.json``
(with the per-case first ranks they rest on), ``compositional.md`` and ``compositional.png`` into the
report folder.

``compcap-lab compositional --repo model_zoo --out model_zoo.comp --seeds 1 2 --evaluate --report reports``
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console

from compcap_lab.pipeline.build import (
    _is_current,
    install_repository,
    training_record,
    training_summary,
    training_worlds,
)
from compcap_lab.pipeline.zoo import EVAL_SEED, ensure_eval_world, resumable_encoder
from compcap_lab.training.compositional import (
    ARCHITECTURE,
    Counterfactuals,
    Negatives,
    hard_negatives,
    train_compositional,
)
from compcap_lab.training.resume import Checkpoints, fingerprint
from compcap_lab.training.train import TrainLog, extract_regions
from export.data.splits import Split, load_split, split_path_for
from export.models.architectures import ARCHITECTURES
from export.models.visual_encoder import VisualEncoder
from export.models.vsepp import VSEPP
from export.packaging.onnx import parity
from export.packaging.package import PARITY_TOLERANCE, TrainedCaptioner, TrainedRanker, export_repository
from export.presets import Preset, get_preset
from export.probesets.repo import write_manifest
from sceneworld.dataset import TEST_SEED_OFFSET
from service.evaluation.recall import PairsFn
from service.manifest import Manifest, Training, load_manifest
from service.text.vocabulary import Vocabulary

PREFIX = "comp"
REPORT = "compositional_report.json"
STAGING_CAPTIONER = "staging_only"  # export_repository packages a captioner too; this one is not kept
console = Console(stderr=True)


def ranker_name(group: int, seed: int | None = None) -> str:
    """``comp_g<group>``, or ``comp_g<group>_seed<seed>`` for another training seed."""
    return f"{PREFIX}_g{group}" + ("" if seed is None else f"_seed{seed}")


def default_out(zoo: Path) -> Path:
    """``<zoo>.comp`` beside the zoo."""
    return zoo.with_name(zoo.name + ".comp")


def zoo_preset(name: str) -> Preset:
    """The preset as ``build_zoo`` trains with it (its captioners' epoch cap; the encoder's checkpoint is
    keyed by it)."""
    return replace(get_preset(name), caption_epochs=get_preset(name).zoo_caption_epochs)


@dataclass
class ZooTraining:
    """What a zoo's rankers were trained on: the training world (images uint8 [N, H, W, 3], captions,
    scene graphs, ids), the frozen encoder and its regions [N, R, D], the vocabulary, the zoo's seeds and
    its groups in training order."""

    zoo: Path
    work: Path
    preset: Preset
    seed: int
    train_seed: int
    groups: tuple[int, ...]
    images: np.ndarray
    captions: list[list[str]]
    graphs: list[dict[str, Any]]
    ids: list[int]
    test_images: np.ndarray
    encoder: VisualEncoder
    regions: torch.Tensor
    vocab: Vocabulary
    manifest: Manifest
    build: dict[str, Any]

    @property
    def dataset(self) -> str:
        """The training record's dataset, as ``build_zoo`` names it."""
        return f"sceneworld(seed={self.seed}, images={len(self.images)})"

    def split(self, group: int) -> Split:
        """The zoo's systematicity split of ``group`` (``<work>/data/train/splits/systematicity_<group>``)."""
        return load_split(split_path_for(self.work / "data" / "train", "systematicity", group))

    def rows(self, split: Split) -> np.ndarray:
        """Rows of the training world (of ``images``, ``regions``...) of the split's train set."""
        position = {image_id: k for k, image_id in enumerate(self.ids)}
        return np.array([position[i] for i in split.sets["train"]], dtype=np.int64)

    def vsepp_seed(self, group: int) -> int:
        """The seed ``build_zoo`` trained ``vsepp_g<group>`` with."""
        return self.train_seed + 3 + 100 * self.groups.index(group)


def load_zoo(zoo: Path, work: Path | None = None) -> ZooTraining:
    """Reload what the zoo at ``zoo`` trained on from its work folder (default ``<zoo>.work``), writing
    nothing there; raises ``FileNotFoundError`` where the zoo is not built (or its worlds were rendered
    again since), ``ValueError`` where the encoder found is not the one the repository serves."""
    zoo = Path(zoo)
    work = Path(work) if work else zoo.with_name(zoo.name + ".work")
    report = zoo / "build_report.json"
    checkpoint = work / "checkpoints" / "visual_encoder.pt"
    for needed in (report, checkpoint):
        if not needed.is_file():
            raise FileNotFoundError(f"{needed} is missing: build the zoo first (compcap-lab models)")
    build = json.loads(report.read_text(encoding="utf-8"))
    p = zoo_preset(build["preset"])
    seed = int(build["seed"])
    for folder, images_in, world_seed in (  # training_worlds would render a stale world again: refuse
        (work / "data" / "train", p.train_images, seed),
        (work / "data" / "test", p.test_images, seed + TEST_SEED_OFFSET),
    ):
        if not _is_current(folder, images_in, world_seed):
            raise FileNotFoundError(f"{folder} is not the world the zoo at {zoo} was trained on")
    (images, captions, graphs, ids), (test_images, *_) = training_worlds(work, p, seed)
    with tempfile.TemporaryDirectory() as scratch:  # a copy: nothing is ever written beside the zoo's
        shutil.copy2(checkpoint, scratch)
        encoder, _ = resumable_encoder(Path(scratch), images, graphs, p, seed)
    manifest = load_manifest(zoo)
    served = next(m for m in manifest.models if m.role == "visual_encoder")
    diff = parity(encoder, encoder.forward, served.path(zoo), {"image": torch.from_numpy(test_images[:8])})
    if diff > PARITY_TOLERANCE:
        raise ValueError(f"{checkpoint} is not the encoder {zoo} serves (max abs diff {diff:.2e})")
    groups = tuple(int(g) for g in build.get("splits", {}) if g != "full")
    return ZooTraining(
        zoo=zoo,
        work=work,
        preset=p,
        seed=seed,
        train_seed=int(build.get("train_seed", seed)),
        groups=groups,
        images=images,
        captions=captions,
        graphs=graphs,
        ids=ids,
        test_images=test_images,
        encoder=encoder,
        regions=extract_regions(encoder, images),
        vocab=Vocabulary.load(zoo / manifest.vocabulary.file),
        manifest=manifest,
        build=build,
    )


@dataclass(frozen=True)
class Options:
    """How the rankers are trained: ``weight`` of the counterfactual hinges, at most ``per_image``
    counterfactual images per training image."""

    weight: float = 1.0
    per_image: int = 3


def train_rankers(
    zoo: ZooTraining,
    groups: Sequence[int],
    seeds: Sequence[int] = (),
    seeds_group: int = 1,
    options: Options = Options(),
    checkpoints: Path | None = None,
) -> tuple[list[TrainedRanker], dict[str, TrainLog], dict[str, Any]]:
    """``comp_g<group>`` for each of ``groups`` and ``comp_g<seeds_group>_seed<N>`` for each of ``seeds``;
    their training logs; and what was made: each ranker's seed, each group's negatives, the counterfactual
    images and the time spent rendering and encoding them. ``checkpoints``: a folder where trained
    rankers are kept and found again (default ``<work>/checkpoints/comp``)."""
    unknown = sorted(set(groups) - set(zoo.groups))
    if unknown:
        raise ValueError(f"group {unknown[0]} is not one of the zoo's groups {list(zoo.groups)}")
    if seeds and seeds_group not in groups:
        raise ValueError(f"--seeds retrain group {seeds_group}, which is not among the groups {list(groups)}")
    p = zoo.preset
    counterfactuals = Counterfactuals(partial(extract_regions, zoo.encoder), zoo.seed, p.image_size)
    regions_hash = hashlib.sha256(zoo.regions.numpy().tobytes()).hexdigest()[:16]
    store = Checkpoints(
        checkpoints or zoo.work / "checkpoints" / PREFIX,
        fingerprint(
            preset=p,
            seed=zoo.seed,
            train_seed=zoo.train_seed,
            regions=regions_hash,
            vocab=zoo.vocab.words,
            options=options,
        ),
    )
    rankers: list[TrainedRanker] = []
    logs: dict[str, TrainLog] = {}
    made: dict[str, Any] = {"ranker_seeds": {}, "negatives": {}}
    empty = partial(VSEPP, len(zoo.vocab), zoo.regions.size(-1), p.word_dim, p.hidden_dim, p.joint_dim)
    for group in groups:
        group_set = _GroupSet(zoo, zoo.split(group), counterfactuals, options)
        runs = [(ranker_name(group), zoo.vsepp_seed(group))]
        runs += [(ranker_name(group, s), s + 3) for s in seeds if group == seeds_group]
        for name, seed in runs:
            model, log = store.made(name, empty, partial(group_set.train, name, seed))
            logs[name] = log
            made["ranker_seeds"][name] = seed
            record = training_record(group_set.split, len(group_set.rows), log, zoo.dataset)
            rankers.append(TrainedRanker(name, ARCHITECTURE, model, record))
        if group_set.made is not None:
            made["negatives"][f"group{group}"] = group_set.made.counts
    made["counterfactual_images"] = len(counterfactuals.rows)
    made["render_encode_seconds"] = round(counterfactuals.seconds, 1)
    return rankers, logs, made


class _GroupSet:
    """One group's training set and its negatives, made the first time a ranker of it trains."""

    def __init__(self, zoo: ZooTraining, split: Split, counterfactuals: Counterfactuals, options: Options):
        self.zoo, self.split, self.counterfactuals, self.options = zoo, split, counterfactuals, options
        self.rows = zoo.rows(split)
        self.captions = [zoo.captions[r] for r in self.rows]
        self.made: Negatives | None = None

    def negatives(self) -> Negatives:
        if self.made is None:
            self.made = hard_negatives(
                [self.zoo.graphs[r] for r in self.rows],
                self.captions,
                self.split.pairs,
                self.counterfactuals,
                self.zoo.vocab,
                self.zoo.preset.max_length,
                self.zoo.seed,
                per_image=self.options.per_image,
            )
        return self.made

    def train(self, name: str, seed: int) -> tuple[VSEPP, TrainLog]:
        regions = self.zoo.regions[self.rows]
        return train_compositional(
            regions,
            self.captions,
            self.negatives(),
            self.zoo.vocab,
            self.zoo.preset,
            seed,
            weight=self.options.weight,
            desc=name,
        )


def add_rankers(
    zoo: ZooTraining, rankers: Sequence[TrainedRanker], out: Path, report: dict[str, Any]
) -> Manifest:
    """Write into ``out`` a repository holding everything the zoo holds plus ``rankers`` (exported by
    ``export_repository``: ONNX with parity, torch programs, configs) and ``report`` as
    ``compositional_report.json``; return its manifest. A ranker of the zoo of the same name is
    replaced."""
    out = Path(out)
    if out.resolve() == zoo.zoo.resolve():
        raise ValueError("--out must be a new folder beside the zoo, not the zoo")
    staging = out.with_name(out.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(zoo.zoo, staging)
    exported = staging / ".rankers"
    p = zoo.preset
    butd = ARCHITECTURES["butd"]
    placeholder = TrainedCaptioner(
        STAGING_CAPTIONER,
        butd.display,
        butd.build(len(zoo.vocab), zoo.regions.size(-1), zoo.regions.size(1), p),
        butd.reads,
        Training(split="full"),
    )
    staged, checks = export_repository(
        exported, p, zoo.encoder, zoo.vocab, [placeholder], rankers, zoo.test_images[:8], STAGING_CAPTIONER
    )
    names = {r.name for r in rankers}
    models = [m for m in staged.models if m.owner in names]
    for model in models:
        for relative in [model.name, *([model.program] if model.program else [])]:
            target = staging / relative
            if target.is_dir():
                shutil.rmtree(target)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(exported / relative), str(target))
    shutil.rmtree(exported)
    manifest = Manifest.model_validate(
        {
            **zoo.manifest.model_dump(),
            "models": [m.model_dump() for m in zoo.manifest.models if m.owner not in names]
            + [m.model_dump() for m in models],
            "rankers": [r.model_dump() for r in zoo.manifest.rankers if r.name not in names]
            + [r.model_dump() for r in staged.rankers if r.name in names],
        }
    )
    write_manifest(staging, manifest)
    parities = {k: v for k, v in checks.items() if k.split(".")[0] in {m.name for m in models}}
    full = {"zoo": str(zoo.zoo), "parity_max_abs_diff": parities, **report}
    (staging / REPORT).write_text(json.dumps(full, indent=2) + "\n", encoding="utf-8")
    install_repository(staging, out)
    return manifest


def run_compositional(
    zoo: Path,
    out: Path | None = None,
    groups: Sequence[int] | None = None,
    seeds: Sequence[int] = (),
    seeds_group: int = 1,
    options: Options = Options(),
    work: Path | None = None,
) -> dict[str, Any]:
    """Train the compositional rankers of a zoo and write the new repository (see the module
    docstring); return what ``compositional_report.json`` holds."""
    started = time.perf_counter()
    out = Path(out) if out else default_out(Path(zoo))
    loaded = load_zoo(Path(zoo), work)
    chosen = list(groups) if groups else list(loaded.groups)
    rankers, logs, made = train_rankers(
        loaded, chosen, seeds, seeds_group, options, out.with_name(out.name + ".work") / "checkpoints"
    )
    report: dict[str, Any] = {
        "groups": chosen,
        "seeds": list(seeds),
        "seeds_group": seeds_group,
        "weight": options.weight,
        "per_image": options.per_image,
        **made,
        "training": training_summary(logs),
    }
    t0 = time.perf_counter()
    add_rankers(loaded, rankers, out, report)
    report["export_seconds"] = round(time.perf_counter() - t0, 1)
    report["seconds"] = round(time.perf_counter() - started, 1)
    console.print(f"[green]wrote {out}[/]: {', '.join(r.name for r in rankers)} in {report['seconds']} s")
    return report


def evaluate_rankers(
    repo: Path,
    zoo: Path,
    groups: Sequence[int],
    out: Path,
    rerank_weight: float,
    data: Path | None = None,
    pairs_fn: PairsFn | None = None,
    meteor: bool = True,
    seeds_group: int = 1,
    weight_source: str = "--rerank-weight",
) -> dict[str, Any]:
    """The rankers of ``repo`` evaluated as the reproduction's control rows
    (``compcap_lab.studies.compositional.evaluate_compositional``: BUTD, BUTD+VSE++, BUTD+comp, BUTR+RR per
    group, B = 100 re-ranked with ``rerank_weight``, paired tests, the beam ceiling, the targets) on the
    evaluation world ``data`` (default: the zoo's, rendered where missing); writes
    ``compositional.{json,md,png}`` into ``out`` and returns the report. ``pairs_fn``, ``meteor``: as
    ``compcap_lab.studies.evaluate.evaluate``'s."""
    from compcap_lab.studies.compositional import evaluate_compositional

    if data is None:
        build = json.loads((Path(zoo) / "build_report.json").read_text(encoding="utf-8"))
        work = Path(zoo).with_name(Path(zoo).name + ".work")
        eval_seed = build.get("eval_seed", EVAL_SEED)
        data = ensure_eval_world(work, get_preset(build["preset"]), eval_seed, build["seed"])
    return evaluate_compositional(
        Path(repo),
        Path(data),
        groups,
        Path(out),
        rerank_weight,
        weight_source,
        seeds_group,
        zoo=Path(zoo),
        pairs_fn=pairs_fn,
        meteor=meteor,
    )


__all__ = [
    "Options",
    "ZooTraining",
    "add_rankers",
    "default_out",
    "evaluate_rankers",
    "load_zoo",
    "ranker_name",
    "run_compositional",
    "train_rankers",
    "zoo_preset",
]
