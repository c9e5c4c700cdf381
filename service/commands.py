"""The service's ``compcap`` commands: ``serve`` (the HTTP gateway) and ``triton`` (a local Triton)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from service.cli_table import Command, CommandTable

if TYPE_CHECKING:
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
    from service.api.server import serve

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


COMMANDS: CommandTable = {
    "serve": Command("serve the HTTP gateway", _serve_arguments, _serve),
    "triton": Command(
        "run a local Triton server (CPU, python-backend mirror) for a repository", _triton_arguments, _triton
    ),
}
