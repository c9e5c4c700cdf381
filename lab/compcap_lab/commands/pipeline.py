"""The research lab's ``compcap-lab`` commands of the training pipeline: world, train, build, splits,
models. Light at import (argparse only); each command imports its module when it runs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from export.commands import PRESETS
from service.cli import blocks
from service.cli.args import writable_dir
from service.cli.table import Command, CommandTable


def _world_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=writable_dir, required=True, help="folder of the dataset (created)")
    blocks.images(parser, "images to generate", 1000)
    blocks.seed(parser, "the world's seed")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def _world(args: argparse.Namespace) -> int:
    from sceneworld.dataset import write_dataset

    summary = write_dataset(Path(args.out), images=args.images, seed=args.seed, progress=not args.quiet)
    print(json.dumps(summary, indent=2))
    return 0


def _train_arguments(parser: argparse.ArgumentParser) -> None:
    blocks.dataset(parser, "a SceneWorld dataset folder", required=True)
    parser.add_argument("--preset", choices=PRESETS, default="default", help="model and training sizes")
    parser.add_argument("--out", type=writable_dir, required=True, help="folder for checkpoints")
    blocks.seed(parser, "training seed")


def _train(args: argparse.Namespace) -> int:
    from compcap_lab.pipeline.build import train_models

    train_models(data=Path(args.data), preset=args.preset, out=Path(args.out), seed=args.seed)
    return 0


def _build_arguments(parser: argparse.ArgumentParser) -> None:
    blocks.build_sizes(parser, PRESETS, "model_repo", "the repository to write")
    parser.add_argument(
        "--quantize",
        action="store_true",
        help="then write and gate INT8 variants of its models, as `compcap quantize --repo OUT` does",
    )


def _build(args: argparse.Namespace) -> int:
    from compcap_lab.pipeline.build import build_repo

    manifest = build_repo(Path(args.out), preset=args.preset, seed=args.seed, work=args.work)
    print(
        f"wrote {args.out}: captioners {[c.name for c in manifest.captioners]}, "
        f"rankers {[r.name for r in manifest.rankers]}"
    )
    if args.quantize:
        from export.quantize import quantize_repo, report_lines

        print("\n".join(report_lines(quantize_repo(Path(args.out), seed=args.seed))))
    return 0


def _models_arguments(parser: argparse.ArgumentParser) -> None:
    blocks.build_sizes(parser, PRESETS, "model_zoo", "the zoo repository to write")


def _models(args: argparse.Namespace) -> int:
    from compcap_lab.pipeline.zoo import build_zoo

    manifest = build_zoo(Path(args.out), preset=args.preset, seed=args.seed, work=args.work)
    print(f"wrote {args.out}: captioners {[c.name for c in manifest.captioners]}")
    return 0


def _splits_arguments(parser: argparse.ArgumentParser) -> None:
    blocks.dataset(parser, "folder with captions.json (SceneWorld or COCO format)", required=True)
    blocks.split_kind(parser, "--kind", "which split")
    blocks.held_out_group_choice(parser, "--kind systematicity")
    blocks.productivity_measure(parser)
    parser.add_argument(
        "--out",
        type=writable_dir,
        default=None,
        help="folder for split.json (default: <data>/splits/<kind>[_<group>], where compcap evaluate looks)",
    )


def _splits(args: argparse.Namespace) -> int:
    blocks.require_group(args.kind, args.group, "--kind")
    from export.data.splits import run_splits_cli

    out = Path(args.out) if args.out else None
    run_splits_cli(Path(args.data), args.kind, args.group, out, by=args.by)  # prints its summary
    return 0


COMMANDS: CommandTable = {
    "world": Command("generate a SceneWorld COCO-format dataset", _world_arguments, _world),
    "train": Command("train the encoder, captioners and rankers on a dataset", _train_arguments, _train),
    "build": Command(
        "generate data, train, export ONNX and write a Triton repository", _build_arguments, _build
    ),
    "splits": Command("build a compositional split of a COCO-format dataset", _splits_arguments, _splits),
    "models": Command("train and package the model zoo (make models)", _models_arguments, _models),
}
