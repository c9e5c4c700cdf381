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


def _splits(args: argparse.Namespace) -> int:
    from export.data.splits import run_splits_cli

    summary = run_splits_cli(Path(args.data), args.kind, args.group, Path(args.out), by=args.by)
    print(json.dumps(summary, indent=2, default=str))
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from export.evaluate import run_evaluate_cli

    split_path = Path(args.split_file) if args.split_file else None
    json_out = Path(args.json) if args.json else None
    return run_evaluate_cli(
        Path(args.repo),
        Path(args.data),
        split_path,
        args.split,
        args.group,
        json_out,
        set_name=args.set,
        rerank_beam_size=args.rerank_beam_size,
        rerank_weight=args.rerank_weight,
    )


def _models(args: argparse.Namespace) -> int:
    from export.zoo import build_zoo

    manifest = build_zoo(Path(args.out), preset=args.preset, seed=args.seed, work=args.work)
    print(f"wrote {args.out}: captioners {[c.name for c in manifest.captioners]}")
    return 0


def _report(args: argparse.Namespace) -> int:
    import json

    from export.presets import get_preset
    from export.report import write_report
    from export.zoo import EVAL_SEED, ensure_eval_world

    work = Path(args.zoo + ".work")
    groups = [int(g) for g in args.groups.split(",")]
    if args.data:
        data = Path(args.data)
    else:  # render and split the evaluation world if this zoo has not met it yet
        build = json.loads((Path(args.zoo) / "build_report.json").read_text(encoding="utf-8"))
        data = ensure_eval_world(work, get_preset(build["preset"]), EVAL_SEED, build.get("seed", 0), groups)
    dev = Path(args.dev_data) if args.dev_data else work / "data" / "train"
    write_report(
        Path(args.zoo),
        data,
        Path(args.out),
        groups=groups,
        reuse=args.reuse,
        sweep=args.rerank_sweep,
        dev_data=dev if (dev / "splits").is_dir() else None,
    )
    print(f"wrote {Path(args.out) / 'reproduction.md'}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    from service.api.server import serve

    serve(host=args.host, port=args.port, repo=args.repo)
    return 0


def _triton(args: argparse.Namespace) -> int:
    from service.tritonlocal.server import LocalTriton, serve_forever

    triton = LocalTriton(
        Path(args.repo),
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        host=args.host,
        work=args.work,
        venv=args.venv,
        intra_op_threads=args.threads,
    )
    return serve_forever(triton, ready_timeout=args.ready_timeout)


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

    splits = sub.add_parser("splits", help="build a compositional split of a COCO-format dataset")
    splits.add_argument("--data", required=True, help="folder with captions.json (SceneWorld or COCO format)")
    splits.add_argument(
        "--kind", required=True, choices=["systematicity", "productivity", "substitutivity", "full"]
    )
    splits.add_argument("--group", type=int, default=None, help="held-out pair group 1-4 (systematicity)")
    splits.add_argument("--by", default="length", choices=["length", "density"], help="productivity measure")
    splits.add_argument("--out", required=True)
    splits.set_defaults(func=_splits)

    evaluate = sub.add_parser("evaluate", help="evaluate every captioner of a repository on a split")
    evaluate.add_argument("--repo", required=True)
    evaluate.add_argument("--data", required=True)
    evaluate.add_argument(
        "--split", required=True, choices=["systematicity", "productivity", "substitutivity", "full"]
    )
    evaluate.add_argument("--group", type=int, default=None)
    evaluate.add_argument(
        "--split-file", default=None, help="split.json (default: <data>/splits/<kind>[_<group>])"
    )
    evaluate.add_argument("--json", default=None, help="write the results JSON here")
    evaluate.add_argument(
        "--set",
        default="test",
        help="set of the split: test, test_no_comb, test_rich, test_base, test_dense, val",
    )
    evaluate.add_argument(
        "--rerank-beam-size", type=int, default=100, help="beams a re-ranked run re-ranks (B; default 100)"
    )
    evaluate.add_argument(
        "--rerank-weight",
        type=float,
        default=0.0,
        help="re-ranked order = cosine + weight × normalised log-prob (default 0: the ranker alone)",
    )
    evaluate.set_defaults(func=_evaluate)

    models = sub.add_parser("models", help="train and package the model zoo (make models)")
    models.add_argument("--preset", choices=["tiny", "default"], default="default")
    models.add_argument("--out", default="model_zoo")
    models.add_argument("--seed", type=int, default=0)
    models.add_argument("--work", default=None)
    models.set_defaults(func=_models)

    report = sub.add_parser("report", help="evaluate the zoo and write reports/reproduction.md")
    report.add_argument("--zoo", default="model_zoo")
    report.add_argument(
        "--data", default=None, help="evaluation world (default: <zoo>.work/data/eval_<seed>)"
    )
    report.add_argument("--groups", default="1,2,3,4")
    report.add_argument("--out", default="reports")
    report.add_argument("--reuse", action="store_true", help="re-render from reports/reproduction.json")
    report.add_argument(
        "--rerank-sweep",
        action="store_true",
        help="also BUTR+RR Recall@5 for B = 5..100 and both targets against the re-ranking weight",
    )
    report.add_argument(
        "--dev-data",
        default=None,
        help="world whose held-out halves choose BUTR+RR's re-ranking weight "
        "(default: <zoo>.work/data/train)",
    )
    report.set_defaults(func=_report)

    serve = sub.add_parser("serve", help="serve the HTTP gateway")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--repo", default="model_repo")
    serve.set_defaults(func=_serve)

    triton = sub.add_parser(
        "triton", help="run a local Triton server (CPU, python-backend mirror) for a repository"
    )
    triton.add_argument("--repo", default="model_repo")
    triton.add_argument("--host", default="127.0.0.1")
    triton.add_argument("--http-port", type=int, default=8000, help="0 = any free port")
    triton.add_argument("--grpc-port", type=int, default=8001, help="0 = any free port")
    triton.add_argument("--metrics-port", type=int, default=8002, help="0 = any free port")
    triton.add_argument(
        "--work", default=None, help="keep the mirror and tritonserver.log here (default: a temp dir)"
    )
    triton.add_argument("--venv", default=None, help="venv with nvidia-pytriton (default: .venv-triton)")
    triton.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads per model")
    triton.add_argument("--ready-timeout", type=float, default=120.0)
    triton.set_defaults(func=_triton)

    subst = sub.add_parser(
        "substitutivity", help="seed 001 substitutivity test: O vs S captions under synonym substitution"
    )
    subst.add_argument("--zoo", default="model_zoo")
    subst.add_argument("--data", required=True, help="evaluation world folder (with splits/full)")
    subst.add_argument("--train", required=True, help="the captioner's training world folder")
    subst.add_argument("--captioner", default="butd_full")
    subst.add_argument("--images", type=int, default=2000)
    subst.add_argument("--out", default="reports")
    subst.add_argument("--no-meteor", action="store_true")
    subst.set_defaults(func=_substitutivity)

    prod = sub.add_parser(
        "productivity", help="seed 001 productivity test: BUTD trained without the long/dense tail"
    )
    prod.add_argument("--train-data", required=True, help="the training world folder")
    prod.add_argument("--eval-data", required=True, help="the evaluation world folder")
    prod.add_argument("--by", default="length", choices=["length", "density"])
    prod.add_argument("--zoo", default="model_zoo", help="visual encoder, vocabulary and FULL BUTD")
    prod.add_argument("--out", default="reports")
    prod.add_argument("--work", default=None, help="default: <zoo>.work/productivity_<by>")
    prod.add_argument("--no-meteor", action="store_true")
    prod.set_defaults(func=_productivity)

    bench = sub.add_parser("bench", help="benchmark the engine and the gateway (loadtests/bench.py)")
    _bench_arguments(bench)
    bench.set_defaults(func=_bench)
    return parser


def _substitutivity(args: argparse.Namespace) -> int:
    from export.substitutivity import run_substitutivity

    result = run_substitutivity(
        Path(args.zoo),
        Path(args.data),
        Path(args.train),
        Path(args.out),
        captioner=args.captioner,
        images=args.images,
        meteor=not args.no_meteor,
    )
    print(f"{result['images']} images substituted; wrote {Path(args.out) / 'substitutivity.md'}")
    return 0


def _productivity(args: argparse.Namespace) -> int:
    from export.productivity import run_productivity

    run_productivity(
        Path(args.train_data),
        Path(args.eval_data),
        args.by,
        Path(args.out),
        work=Path(args.work) if args.work else None,
        zoo=Path(args.zoo),
        meteor=not args.no_meteor,
    )
    print(f"wrote {Path(args.out) / f'productivity_{args.by}.md'}")
    return 0


def _bench_arguments(parser: argparse.ArgumentParser) -> None:
    from loadtests.bench import add_arguments

    add_arguments(parser)


def _bench(args: argparse.Namespace) -> int:
    from loadtests.bench import bench

    return bench(args)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
