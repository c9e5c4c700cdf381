"""``compcap`` command line. Offline subcommands import ``export`` (and torch) lazily, so
``compcap serve`` runs without torch."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path


def _world(args: argparse.Namespace) -> int:
    from export.world.dataset import write_dataset

    summary = write_dataset(Path(args.out), images=args.images, seed=args.seed, progress=not args.quiet)
    print(json.dumps(summary, indent=2))
    return 0


def _train(args: argparse.Namespace) -> int:
    from export.build import train_models

    train_models(data=Path(args.data), preset=args.preset, out=Path(args.out), seed=args.seed)
    return 0


def _build(args: argparse.Namespace) -> int:
    from export.build import build_repo

    manifest = build_repo(Path(args.out), preset=args.preset, seed=args.seed, work=args.work)
    print(
        f"wrote {args.out}: captioners {[c.name for c in manifest.captioners]}, "
        f"rankers {[r.name for r in manifest.rankers]}"
    )
    return 0


def _serve(args: argparse.Namespace) -> int:
    from service.api.server import serve

    serve(host=args.host, port=args.port, repo=args.repo)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="compcap", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    world = sub.add_parser("world", help="generate a SceneWorld COCO-format dataset")
    world.add_argument("--out", required=True)
    world.add_argument("--images", type=int, default=1000)
    world.add_argument("--seed", type=int, default=0)
    world.add_argument("--quiet", action="store_true")
    world.set_defaults(func=_world)

    train = sub.add_parser("train", help="train the encoder, captioners and rankers on a dataset")
    train.add_argument("--data", required=True, help="a SceneWorld dataset folder")
    train.add_argument("--preset", choices=["tiny", "default"], default="default")
    train.add_argument("--out", required=True, help="folder for checkpoints")
    train.add_argument("--seed", type=int, default=0)
    train.set_defaults(func=_train)

    build = sub.add_parser("build", help="generate data, train, export ONNX and write a Triton repository")
    build.add_argument("--preset", choices=["tiny", "default"], default="default")
    build.add_argument("--out", default="model_repo")
    build.add_argument("--seed", type=int, default=0)
    build.add_argument("--work", default=None, help="folder for data and checkpoints (default: <out>/.work)")
    build.set_defaults(func=_build)

    serve = sub.add_parser("serve", help="serve the HTTP gateway")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--repo", default="model_repo")
    serve.set_defaults(func=_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
