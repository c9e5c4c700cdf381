"""The training pipeline's ``compcap`` commands: world, train, build, models, splits. Light at import
(argparse only); each command imports its module when it runs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from service.cli_table import Command, CommandTable

PRESETS = ("tiny", "default")
SPLIT_KINDS = ("systematicity", "productivity", "substitutivity", "full")


def _world_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True)
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", action="store_true")


def _world(args: argparse.Namespace) -> int:
    from export.world.dataset import write_dataset

    summary = write_dataset(Path(args.out), images=args.images, seed=args.seed, progress=not args.quiet)
    print(json.dumps(summary, indent=2))
    return 0


def _train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True, help="a SceneWorld dataset folder")
    parser.add_argument("--preset", choices=PRESETS, default="default")
    parser.add_argument("--out", required=True, help="folder for checkpoints")
    parser.add_argument("--seed", type=int, default=0)


def _train(args: argparse.Namespace) -> int:
    from export.build import train_models

    train_models(data=Path(args.data), preset=args.preset, out=Path(args.out), seed=args.seed)
    return 0


def _build_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", choices=PRESETS, default="default")
    parser.add_argument("--out", default="model_repo")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", default=None, help="folder for data and checkpoints (default: <out>/.work)")


def _build(args: argparse.Namespace) -> int:
    from export.build import build_repo

    manifest = build_repo(Path(args.out), preset=args.preset, seed=args.seed, work=args.work)
    print(
        f"wrote {args.out}: captioners {[c.name for c in manifest.captioners]}, "
        f"rankers {[r.name for r in manifest.rankers]}"
    )
    return 0


def _models_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", choices=PRESETS, default="default")
    parser.add_argument("--out", default="model_zoo")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", default=None)


def _models(args: argparse.Namespace) -> int:
    from export.zoo import build_zoo

    manifest = build_zoo(Path(args.out), preset=args.preset, seed=args.seed, work=args.work)
    print(f"wrote {args.out}: captioners {[c.name for c in manifest.captioners]}")
    return 0


def _splits_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True, help="folder with captions.json (SceneWorld or COCO format)")
    parser.add_argument("--kind", required=True, choices=SPLIT_KINDS)
    parser.add_argument("--group", type=int, default=None, help="held-out pair group 1-4 (systematicity)")
    parser.add_argument("--by", default="length", choices=["length", "density"], help="productivity measure")
    parser.add_argument(
        "--out",
        default=None,
        help="folder for split.json (default: <data>/splits/<kind>[_<group>], where compcap evaluate looks)",
    )


def _splits(args: argparse.Namespace) -> int:
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
