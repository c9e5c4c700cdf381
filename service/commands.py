"""The service's ``compcap`` commands: ``serve`` (the HTTP gateway), ``triton`` (a local Triton) and
``probe`` (a live probe on a running gateway, through ``service.client``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from service.cli_table import Command, CommandTable

if TYPE_CHECKING:
    from service.client import ProbeJob
    from service.settings import Settings

SERVE_FLAGS = ("host", "port", "repo")


def _serve_arguments(parser: argparse.ArgumentParser) -> None:
    # No defaults here: a flag overrides its COMPCAP_* variable only when given (service/settings.py).
    parser.add_argument("--host", default=None, help="bind address (default: COMPCAP_HOST, else 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="port (default: COMPCAP_PORT, else 8080)")
    parser.add_argument(
        "--repo", default=None, help="model repository (default: COMPCAP_REPO, else model_repo)"
    )


def serve_settings(args: argparse.Namespace) -> Settings:
    """The gateway's settings: ``COMPCAP_*`` (else the defaults), overridden by the flags given."""
    from service.settings import load_settings

    given = {name: getattr(args, name) for name in SERVE_FLAGS if getattr(args, name) is not None}
    return load_settings(**given)


def _serve(args: argparse.Namespace) -> int:
    from service.gateway.server import serve

    serve(serve_settings(args))
    return 0


def _triton_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repo", default="model_repo")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--http-port", type=int, default=8000, help="0 = any free port")
    parser.add_argument("--grpc-port", type=int, default=8001, help="0 = any free port")
    parser.add_argument("--metrics-port", type=int, default=8002, help="0 = any free port")
    parser.add_argument(
        "--work", default=None, help="keep the mirror and tritonserver.log here (default: a temp dir)"
    )
    parser.add_argument("--venv", default=None, help="venv with nvidia-pytriton (default: .venv-triton)")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads per model")
    parser.add_argument("--ready-timeout", type=float, default=120.0)


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
    parser.add_argument("--url", required=True, help="the gateway, e.g. http://127.0.0.1:8080")
    parser.add_argument(
        "--kind",
        required=True,
        help="probe kind: systematicity, productivity, substitutivity or one the gateway adds "
        "(GET /v1/probe-kinds)",
    )
    parser.add_argument("--model", default=None, help="captioner (default: the gateway's default)")
    parser.add_argument(
        "--rerank", default=None, help="ranker name, or 'none' for plain beam search (default: its own)"
    )
    parser.add_argument("--beam-size", type=int, default=None)
    parser.add_argument("--n-best", type=int, default=None)
    parser.add_argument("--rerank-weight", type=float, default=None)
    parser.add_argument("--probe-set", default=None, help="probe set name (default: the first of the kind)")
    parser.add_argument(
        "--pairs", default=None, help="kinds that take pairs (systematicity): e.g. 'black cat,red bus'"
    )
    parser.add_argument("--images", type=int, default=None, help="at most N images per pair / bucket")
    parser.add_argument(
        "--api-key",
        default=os.environ.get("COMPCAP_API_KEY"),
        help="sent as 'Authorization: Bearer KEY' (default: COMPCAP_API_KEY)",
    )
    parser.add_argument("--json", default=None, help="write the finished job (with its result) here")
    parser.add_argument("--poll", type=float, default=1.0, help="seconds between progress polls")
    parser.add_argument("--timeout", type=float, default=None, help="give up waiting after S seconds")


def _probe(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from service.client import CompCapClient, CompCapError

    rerank: str | bool | None = args.rerank
    if isinstance(rerank, str) and rerank.strip().lower() in ("none", "false", "off", "no"):
        rerank = False
    pairs = [p.strip() for p in args.pairs.split(",") if p.strip()] if args.pairs else None
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
}
