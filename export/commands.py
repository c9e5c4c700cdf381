"""The product's ``compcap`` commands of ``export``: what a user or operator does to a model repository
(calibrate, import, quantize, upgrade) and its probe sets (probeset, probesets). The lab's (SceneWorld,
training, the zoo) are ``compcap_lab.commands.pipeline``. Light at import (argparse only); each command
imports its module when it runs."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from service.cli import blocks
from service.cli.args import (
    existing_dir,
    existing_file,
    fraction,
    one_of,
    positive_int,
)
from service.cli.errors import UsageError
from service.cli.table import Command, CommandTable

PRESETS = ("tiny", "default")
PROBE_KINDS = ("systematicity", "productivity", "substitutivity")


def _probeset_arguments(parser: argparse.ArgumentParser) -> None:
    blocks.dataset(
        parser, "COCO-format folder (captions.json, images, optional instances.json)", required=True
    )
    parser.add_argument("--kind", required=True, choices=PROBE_KINDS, help="which probe")
    parser.add_argument(
        "--out",
        default=None,
        help="folder of the probe set (replaced); with --repo a folder of <repo>/probes/ (default <name>)",
    )
    blocks.repository(
        parser,
        "a model repository: write the set into it and list it in its probe index (the gateway's probes "
        "serve it as probe_set <name>; a set of the same name is replaced)",
        default=None,
    )
    parser.add_argument(
        "--per-pair",
        type=positive_int,
        default=50,
        help="images per pair (comb and no_comb each) or per object count",
    )
    blocks.seed(parser, "seed of the splits and the image choice")
    parser.add_argument(
        "--min-count", type=positive_int, default=200, help="substitutivity: synonym words' training count"
    )
    parser.add_argument(
        "--name",
        default=None,
        help="name in probe.json and, with --repo, in the manifest (default: the kind)",
    )


def _probeset(args: argparse.Namespace) -> int:
    if args.out is None and args.repo is None:
        raise UsageError("give --out DIR, or --repo REPO to add the set to a repository")
    from export.probesets.coco import run_probeset_cli

    try:
        run_probeset_cli(
            Path(args.data),
            args.kind,
            Path(args.out) if args.out else None,
            args.per_pair,
            args.seed,
            args.min_count,
            args.name,
            repo=Path(args.repo) if args.repo else None,
        )  # prints the manifest entry
    except (ValueError, FileNotFoundError) as exc:
        print(f"compcap probeset: {exc}", file=sys.stderr)
        return 2
    return 0


def _probesets_arguments(parser: argparse.ArgumentParser) -> None:
    blocks.repository(parser, "a built repository (compcap-lab build / compcap-lab models)", required=True)
    blocks.work_folder(parser, "its work folder (default: <repo>.work)")
    blocks.value_list(
        parser,
        "--kind",
        "KIND",
        "only these kinds (default: " + ", ".join(PROBE_KINDS) + "; counterfactual: the minimal "
        "pairs of the default captioner's held-out pairs, only when named)",
        default=PROBE_KINDS,
        item=one_of(*PROBE_KINDS, "counterfactual"),
    )
    parser.add_argument(
        "--preset", choices=PRESETS, default=None, help="sizes (default: the repository's preset)"
    )


def _probesets(args: argparse.Namespace) -> int:
    from export.probesets.repo import add_probe_sets

    work = Path(args.work) if args.work else None
    add_probe_sets(Path(args.repo), work, args.kind, args.preset)  # prints a summary
    return 0


def _import_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", choices=["hf"], help="hf: a Hugging Face transformers snapshot")
    parser.add_argument(
        "snapshot", type=existing_dir, help="the snapshot directory (what save_pretrained wrote)"
    )
    parser.add_argument("--name", required=True, help="the captioner's name in the repository")
    blocks.repository(parser, "the model repository to add it to", required=True)
    parser.add_argument(
        "--role",
        choices=["captioner", "ranker"],
        default=None,
        help="what the snapshot must be (default: what its config.json says: CLIP is a ranker)",
    )
    parser.add_argument(
        "--held-out-pairs",
        type=existing_file,
        default=None,
        help="a JSON file, a list of {kind, modifier, noun}: concept pairs its training data never showed "
        "([] declares that none were held out; default: not declared)",
    )
    parser.add_argument(
        "--step",
        choices=["auto", "plain", "cached", "kv"],
        default="auto",
        help="a cross-attention captioner's step graph: plain reads each row's whole prefix; cached "
        "projects the image's keys and values once per image instead of once per row; kv also carries "
        "each row's self-attention keys and values in the state and reads one new token per row (model "
        "contract v3; ViT + GPT-2 and BLIP); auto times them and keeps the fastest",
    )
    switches = {  # auto: the importer decides
        "--top-k": "the step graph also returns each row's best words, so that a GPU hands beam search "
        "k + 1 numbers per row instead of the whole vocabulary; auto: for a vocabulary of 4 096 words or "
        "more",
        "--fuse": "run the encoder and step graphs (ViT + GPT-2, BLIP) through onnxruntime's transformer "
        "optimizer (attention, layer-norm, GELU and bias fusions), check them against the unfused graphs "
        "and time both: auto keeps the fused graph where it is at least 3%% faster, on wherever it is "
        "correct, off does not try (default: auto)",
    }
    for flag, text in switches.items():
        parser.add_argument(flag, choices=["auto", "on", "off"], default="auto", help=text)
    parser.add_argument(
        "--no-programs",
        action="store_true",
        help="skip the torch programs of gradient explanations (saliency, guided backprop, integrated "
        "gradients then answer 501; attention works): a faster import",
    )


def _import(args: argparse.Namespace) -> int:
    import sys

    from export.hf.architectures import read_snapshot
    from export.hf.importer import HfImportError, import_hf
    from export.hf.snapshot import SnapshotError

    try:
        if args.role is not None and (found := read_snapshot(args.snapshot)).role != args.role:
            raise HfImportError(
                f"--role {args.role}: {args.snapshot} is a {found.role} ({found.architecture})"
            )
        held = Path(args.held_out_pairs) if args.held_out_pairs else None
        report = import_hf(
            args.snapshot,
            args.name,
            args.repo,
            held,
            step_form=args.step,
            programs=not args.no_programs,
            top_k={"auto": None, "on": True, "off": False}[args.top_k],
            fuse=args.fuse,
        )
    except (SnapshotError, HfImportError, FileNotFoundError) as exc:
        print(f"compcap import: {exc}", file=sys.stderr)
        return 2
    print(f"imported {report.name} ({report.architecture}) into {args.repo}")
    for graph, diff in report.parity.items():
        print(f"  {graph}: transformers vs onnxruntime max abs diff {diff:.1e}")
    if report.step is not None:
        print(f"  step: {report.step.summary()}")
    for fusion in report.fusions:
        print(f"  {fusion.summary()}")
    if report.single_caption_ms is not None:
        print(f"  one caption (beam 5, longest): {report.single_caption_ms:.0f} ms on this machine")
    print("  files: " + ", ".join(report.files))
    return 0


def _calibrate_arguments(parser: argparse.ArgumentParser) -> None:
    blocks.repository(parser, required=True)
    blocks.value_list(parser, "--model", "MODEL", "captioners (default: all)")
    blocks.dataset(parser, "a folder of the captioner's own validation images (default: SceneWorld images)")
    blocks.images(parser, "SceneWorld validation images", 1500)
    blocks.seed(parser, "the repository's training seed")
    parser.add_argument(
        "--quantile", type=fraction, default=0.025, help="share each test flags of its images"
    )
    blocks.json_output(parser, "the figures")


def _calibrate(args: argparse.Namespace) -> int:
    from export.packaging.calibrate import calibrate_repo

    figures = calibrate_repo(
        Path(args.repo),
        args.model,
        Path(args.data) if args.data else None,
        args.images,
        args.seed,
        args.quantile,
    )
    text = json.dumps(figures, indent=2)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


def _quantize_arguments(parser: argparse.ArgumentParser) -> None:
    blocks.repository(parser, required=True)
    parser.add_argument(
        "--precision",
        choices=["int8", "fp16", "tf32"],
        default="int8",
        help="int8 (CPU: dropped where not faster here), fp16 (GPU tensor cores: "
        "convert_float_to_float16 with FP32 inputs and outputs; timed here but never dropped for speed "
        "on a CPU) or tf32 (FP32 models computed in TF32 by the CUDA provider: made and gated only on a "
        "GPU host). BF16 is not offered: onnxruntime's CUDA provider has only partial BF16 kernels",
    )
    blocks.value_list(
        parser, "--models", "MODEL", "FP32 models to quantize (default: all); the others serve FP32"
    )
    parser.add_argument(
        "--method",
        choices=["auto", "dynamic", "static"],
        default="auto",
        help="int8: dynamic (weights INT8, activations at run time), static (QDQ calibrated on "
        "training-world images), or auto: static for convolutional encoders, a recurrent step's LSTM "
        "kernels dynamic, dynamic for the rest; fp16 takes auto only",
    )
    parser.add_argument(
        "--calibration-images", type=positive_int, default=64, help="training-world images to calibrate on"
    )
    parser.add_argument(
        "--eval-images",
        type=positive_int,
        default=None,
        help="evaluation-world images of the gate (default: the preset's, as the build's quality)",
    )
    parser.add_argument(
        "--probe-images",
        type=positive_int,
        default=None,
        help="at most this many systematicity probe images per pair (default: all)",
    )
    parser.add_argument(
        "--no-systematicity", action="store_true", help="gate without the systematicity probe"
    )
    parser.add_argument(
        "--min-speedup",
        type=float,
        default=1.0,
        help="drop a variant not this much faster than its FP32 model (0: keep every variant; fp16 "
        "timed on a CPU is never dropped)",
    )
    parser.add_argument(
        "--max-cider-change",
        type=float,
        default=None,
        help="gate: CIDEr-D, relative (default: int8 0.02, fp16 0.01)",
    )
    parser.add_argument(
        "--min-top1",
        type=fraction,
        default=None,
        help="gate: top-1 caption agreement (default: int8 0.90, fp16 0.95)",
    )
    parser.add_argument(
        "--max-recall-points",
        type=float,
        default=None,
        help="gate: systematicity mean Recall@5, points (default 1.0)",
    )
    blocks.seed(parser, "training world seed (default: the build's)", None)
    blocks.json_output(parser, "the manifest entry")


def _quantize(args: argparse.Namespace) -> int:
    from export.quantize import quantize_repo, report_lines, spec_for

    try:
        spec = spec_for(args.precision)
        result = quantize_repo(
            Path(args.repo),
            args.models,
            args.method,
            spec.with_thresholds(args.max_cider_change, args.min_top1, args.max_recall_points),
            calibration_images=args.calibration_images,
            eval_images=args.eval_images,
            probe_images=args.probe_images,
            systematicity=not args.no_systematicity,
            min_speedup=args.min_speedup,
            seed=args.seed,
            precision=args.precision,
        )
    except ValueError as exc:
        print(f"compcap quantize: {exc}", file=sys.stderr)
        return 2
    print("\n".join(report_lines(result)))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(result.variant.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return 0 if result.variant.passed else 1


def _upgrade_arguments(parser: argparse.ArgumentParser) -> None:
    blocks.repository(parser, "repository to upgrade", default=Path("model_repo"))


def _upgrade(args: argparse.Namespace) -> int:
    from export.packaging.state_gather import upgrade_repository

    changed = upgrade_repository(Path(args.repo))
    if changed:
        print(f"{args.repo}: {', '.join(changed)} now gather their decoder states (model contract v3)")
    else:
        print(f"{args.repo}: every step already gathers its decoder states (model contract v3)")
    return 0


COMMANDS: CommandTable = {
    "calibrate": Command(
        "calibrate each captioner's in_domain test on validation images and measure it",
        _calibrate_arguments,
        _calibrate,
    ),
    "import": Command(
        "add your own transformers captioner (a local snapshot) to a repository", _import_arguments, _import
    ),
    "probeset": Command(
        "write a probe set of a COCO-format folder (systematicity, productivity, substitutivity)",
        _probeset_arguments,
        _probeset,
    ),
    "quantize": Command(
        "write INT8 (or FP16) variants of a repository's models, gate them on quality, list them in its "
        "manifest",
        _quantize_arguments,
        _quantize,
    ),
    "upgrade": Command(
        "rewrite a repository's steps to keep the decoder state on the device (model contract v3)",
        _upgrade_arguments,
        _upgrade,
    ),
    "probesets": Command(
        "(re)write the SceneWorld probe sets of a built repository and list them in its probe index",
        _probesets_arguments,
        _probesets,
    ),
}
