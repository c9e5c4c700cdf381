"""The service's ``compcap`` commands: ``serve`` (the HTTP gateway), ``triton`` (a local Triton),
``probe`` (a live probe on a running gateway, through ``compcap_client``) and ``caption`` (one-off
captions of image files, ``service.cli.caption_files``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from service.cli import blocks
from service.cli.args import (
    existing_dir,
    existing_file,
    port,
    positive_float,
    positive_int,
)
from service.cli.errors import UsageError
from service.cli.table import Command, CommandTable

if TYPE_CHECKING:
    from compcap_client import ProbeJob
    from service.settings import Settings

SERVE_FLAGS = ("host", "port", "repo", "device", "precision", "api_processes")


def _serve_arguments(parser: argparse.ArgumentParser) -> None:
    # No defaults here: a flag overrides its COMPCAP_* variable only when given (service/settings.py).
    parser.add_argument("--host", default=None, help="bind address (default: COMPCAP_HOST, else 127.0.0.1)")
    parser.add_argument(
        "--port", type=port, default=None, help="port, 0 = any free port (default: COMPCAP_PORT, else 8080)"
    )
    parser.add_argument(
        "--repo", default=None, help="model repository (default: COMPCAP_REPO, else model_repo)"
    )
    parser.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default=None,
        help="where the embedded backend runs the models (default: COMPCAP_DEVICE, else auto: CUDA where "
        "it can be used, else the CPU); cuda where CUDA cannot be used exits 2 naming the reason",
    )
    parser.add_argument(
        "--precision",
        default=None,
        help="fp32, or a precision whose variants passed their gate: int8, fp16, tf32 (default: "
        "COMPCAP_PRECISION, else fp32)",
    )
    parser.add_argument(
        "--api-processes",
        type=positive_int,
        default=None,
        help="HTTP processes on the port (default: COMPCAP_API_PROCESSES, else 1); above 1 the models run "
        "in one engine core process that every HTTP process calls",
    )
    parser.epilog = (
        "Every other setting is a COMPCAP_* environment variable (service/settings.py); logs are "
        "human-readable on a terminal and JSON otherwise (COMPCAP_LOG_FORMAT=auto|json|text)."
    )


def check_repo(given: str | None) -> Path:
    """The repository ``compcap serve`` will read (``--repo``, else COMPCAP_REPO, else ./model_repo),
    refused in one line pointing at ``--repo`` unless it has a manifest."""
    from_env = os.environ.get("COMPCAP_REPO")
    repo = Path(given or from_env or "model_repo")
    if (repo / "manifest.json").is_file():
        return repo
    source = "--repo" if given else ("COMPCAP_REPO" if from_env else "the default")
    if repo.is_dir():
        raise UsageError(
            f"{repo} ({source}) is not a model repository: it has no manifest.json (give --repo a built "
            f"one, or build it: compcap-lab build --out {repo})"
        )
    raise UsageError(
        f"no model repository at {repo} ({source}): give --repo DIR (or COMPCAP_REPO), e.g. the "
        "model_repo folder of a CompCap checkout"
    )


def serve_settings(args: argparse.Namespace) -> Settings:
    """The gateway's settings: ``COMPCAP_*`` (else the defaults), overridden by the flags given."""
    from service.settings import load_settings

    given = {name: getattr(args, name) for name in SERVE_FLAGS if getattr(args, name) is not None}
    return load_settings(**given)


def _serve(args: argparse.Namespace) -> int:
    from service.gateway.server import serve

    check_repo(args.repo)
    serve(serve_settings(args))
    return 0


def _triton_arguments(parser: argparse.ArgumentParser) -> None:
    blocks.repository(parser, "model repository to serve")
    parser.add_argument("--host", default="127.0.0.1", help="bind address")
    parser.add_argument("--http-port", type=port, default=8000, help="HTTP port, 0 = any free port")
    parser.add_argument("--grpc-port", type=port, default=8001, help="gRPC port, 0 = any free port")
    parser.add_argument("--metrics-port", type=port, default=8002, help="metrics port, 0 = any free port")
    blocks.work_folder(parser, "keep the mirror and tritonserver.log here (default: a temp dir)")
    parser.add_argument(
        "--venv", type=existing_dir, default=None, help="venv with nvidia-pytriton (default: .venv-triton)"
    )
    parser.add_argument(
        "--threads", type=positive_int, default=1, help="onnxruntime intra-op threads per model"
    )
    parser.add_argument(
        "--ready-timeout", type=positive_float, default=120.0, help="seconds to wait for the models to load"
    )


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


def _probe_arguments(parser: argparse.ArgumentParser) -> None:
    blocks.gateway_url(parser, "the gateway, e.g. http://127.0.0.1:8080", required=True)
    parser.add_argument(
        "--kind",
        required=True,
        help="probe kind: systematicity, productivity, substitutivity or one the gateway adds "
        "(GET /v1/probe-kinds)",
    )
    blocks.captioner(parser, "the gateway's default")
    blocks.reranking(parser)
    blocks.beam_size(parser, "beam size (default: the kind's own)")
    parser.add_argument(
        "--n-best", type=positive_int, default=None, help="captions kept per image (default: the kind's own)"
    )
    blocks.rerank_weight(parser, None, "default: the gateway's")
    parser.add_argument("--probe-set", default=None, help="probe set name (default: the first of the kind)")
    blocks.value_list(
        parser,
        "--pairs",
        "PAIR",
        "kinds that take pairs (systematicity): e.g. --pairs 'black cat' 'red bus' (default: all)",
    )
    blocks.images(parser, "at most N images per pair / bucket (default: all)")
    blocks.api_key(parser)
    blocks.json_output(parser, "the finished job (with its result)")
    parser.add_argument("--poll", type=positive_float, default=1.0, help="seconds between progress polls")
    parser.add_argument(
        "--timeout",
        type=positive_float,
        default=None,
        help="give up waiting after S seconds (default: never)",
    )


def _probe(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from compcap_client import CompCapClient, CompCapError

    rerank: str | bool | None = args.rerank
    pairs = args.pairs or None
    with CompCapClient(args.url, api_key=args.api_key) as client:
        try:
            job = client.start_probe(
                args.kind,
                model=args.model,
                rerank=rerank,  # type: ignore[arg-type]  # a name, False or None
                beam_size=args.beam_size,
                n_best=args.n_best,
                rerank_weight=args.rerank_weight,
                probe_set=args.probe_set,
                pairs=pairs,
                images=args.images,
            )
        except CompCapError as exc:
            print(f"compcap probe: {exc}", file=sys.stderr)
            return 2
        with tqdm(total=job.total or None, desc=f"probe {job.id} ({job.kind})", unit="img") as bar:

            def progress(update: ProbeJob) -> None:
                bar.total = update.total or None
                bar.n = update.done
                bar.set_postfix_str(update.status, refresh=False)
                bar.refresh()

            try:
                job = client.wait_probe(
                    job.id, poll_s=args.poll, timeout_s=args.timeout, on_progress=progress
                )
            except KeyboardInterrupt:
                job = client.cancel_probe(job.id)
                print(f"compcap probe: interrupted; job {job.id} is {job.status}", file=sys.stderr)
                return 130
            except TimeoutError as exc:
                print(f"compcap probe: {exc}", file=sys.stderr)
                return 1
            except CompCapError as exc:
                print(f"compcap probe: {exc}", file=sys.stderr)
                return 2
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(job.to_json(), indent=2) + "\n", encoding="utf-8")
    print(probe_summary(job.to_json()))
    if args.json:
        print(f"wrote {args.json}")
    return 0 if job.succeeded else 1


# -- probe result tables (plain text; any missing figure prints "-") --------------------------------


def probe_summary(job: Mapping[str, Any]) -> str:
    """A finished job's header line and its result's table (the kind's ``table``, ``service.probes.kinds``;
    JSON for a kind this install does not know; anything missing is "-")."""
    params = job.get("params") or {}
    started, finished = job.get("started_at"), job.get("finished_at")
    took = (
        f" in {finished - started:.1f} s"
        if isinstance(started, float | int) and isinstance(finished, float | int)
        else ""
    )
    rerank = params.get("rerank")
    model = f"{params.get('model') or '-'}" + (f"+{rerank}" if isinstance(rerank, str) else "")
    lines = [
        f"probe {job.get('id')}: {job.get('kind')} of {model} on {job.get('probe_set') or '-'}: "
        f"{job.get('status')}{took}"
    ]
    if job.get("error"):
        lines.append(f"error: {job['error']}")
    result = job.get("result")
    if isinstance(result, Mapping):
        from service.probes.kinds import KINDS

        kind = KINDS.get(str(job.get("kind")))
        lines += kind.table(result) if kind is not None and kind.table else [json.dumps(result, indent=2)]
    return "\n".join(lines)


def _caption_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("images", nargs="+", type=existing_file, metavar="IMAGE", help="image files")
    blocks.gateway_source(
        parser,
        "decode in process from this model repository (default: model_repo)",
        "post to the gateway at this URL instead (compcap serve)",
    )
    blocks.captioner(parser)
    blocks.beam_size(parser, "beam size (default: COMPCAP_DEFAULT_BEAM_SIZE)")
    blocks.reranking(parser)
    blocks.api_key(parser, with_url=True)
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the API's answer for each image (one JSON object per line): every caption, its "
        "scores and whether the image is in domain",
    )


def _caption(args: argparse.Namespace) -> int:
    from service.cli.caption_files import caption_files

    return caption_files(args)


COMMANDS: CommandTable = {
    "serve": Command("serve the HTTP gateway", _serve_arguments, _serve),
    "triton": Command(
        "run a local Triton server (CPU, python-backend mirror) for a repository", _triton_arguments, _triton
    ),
    "probe": Command(
        "run a live probe (systematicity, productivity, substitutivity...) on a gateway, print its table",
        _probe_arguments,
        _probe,
    ),
    "caption": Command(
        "caption image files (in process on a repository, or on a gateway with --url)",
        _caption_arguments,
        _caption,
    ),
}
