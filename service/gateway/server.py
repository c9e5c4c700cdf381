"""``serve(settings)``: run the gateway under uvicorn (settings: ``service.settings.load_settings``; the
features check their own settings as they install, and a bad one exits the same way), its drain on
SIGTERM bounded by the request deadline. A busy port is refused before anything is loaded: uvicorn would
find it only after the models, in a log line."""

from __future__ import annotations

import errno
import signal
import socket

import uvicorn
from pydantic import ValidationError

from service.cli.errors import UsageError
from service.gateway.app import create_app
from service.gateway.split import serve_split, uvicorn_options
from service.logs import configure_logging, write_log_then_die
from service.settings import Settings, settings_error


def check_address(host: str, port: int) -> None:
    """Refuse ``host:port`` unless the gateway could listen there now (port 0: any free port)."""
    if port == 0:
        return
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UsageError(f"--host {host}: {exc.strerror}") from None
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise UsageError(f"port {port} on {host} is in use (--port to choose another)") from None
                if exc.errno == errno.EACCES:
                    raise UsageError(
                        f"port {port} on {host}: permission denied (--port to choose another)"
                    ) from None
                if exc.errno == errno.EADDRNOTAVAIL:
                    raise UsageError(f"--host {host}: not an address of this machine") from None
                raise


def check_device(settings: Settings) -> None:
    """Refuse ``COMPCAP_DEVICE=cuda`` on the embedded backend where CUDA cannot be used (no CUDA build
    of onnxruntime, its libraries missing, no device), before anything is loaded: onnxruntime itself
    would run every model on the CPU with one error line."""
    if settings.backend != "onnxruntime" or settings.device != "cuda":
        return
    try:
        from service.backends.device import cuda_problem, cuda_problem_in_child

        # the split's parent loads no model: a context of its own would hold GPU memory all along
        problem = cuda_problem_in_child() if settings.api_processes > 1 else cuda_problem()
    except ImportError as exc:
        problem = f"onnxruntime cannot be imported ({exc})"
    if problem is not None:
        raise UsageError(f"COMPCAP_DEVICE=cuda: CUDA cannot be used here: {problem}")


def serve(settings: Settings) -> None:
    """Serve ``settings.repo`` on ``settings.host:settings.port`` until interrupted."""
    check_address(settings.host, settings.port)
    check_device(settings)
    if settings.api_processes > 1:  # HTTP processes and one engine core (service.gateway.split)
        configure_logging(settings.log_format, settings.log_level)
        serve_split(settings)
        return
    configure_logging(settings.log_format, settings.log_level, queued=True)
    signal.signal(signal.SIGTERM, write_log_then_die)  # the queue is written, whenever SIGTERM comes
    try:
        app = create_app(settings, serving=True)
    except ValidationError as exc:  # a feature's setting (the probe schedule, the shadow) is invalid
        raise settings_error(exc) from None
    uvicorn.run(app, **uvicorn_options(settings))  # logs, the drain: see uvicorn_options
