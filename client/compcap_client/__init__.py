"""Typed HTTP client of the CompCap gateway: ``CompCapClient`` (blocking, ``httpx.Client``) and
``AsyncCompCapClient`` (``httpx.AsyncClient``), with the same methods — coroutines on the second::

    from compcap_client import CompCapClient

    with CompCapClient("http://127.0.0.1:8080") as client:
        out = client.caption("docs/examples/example_0.png", beam_size=5)  # or a list of images
        print(out.results[0].caption)
        why = client.explain(Path("docs/examples/example_1.png"))          # a map per word
        print([(w.word, w.argmax_box) for w in why.words])
        diff = client.compare([pil_image, numpy_image], {"BUTR": "butr", "BUTD": "butd"})

Images: a path (``str`` or ``pathlib.Path``), the file's ``bytes``, a binary file object, a NumPy
``uint8`` array ``[H, W, 3]`` (a batch ``[N, H, W, 3]``) or a PIL image — files go as they are, arrays
and PIL images as PNG; anything else is a ``TypeError`` (a wrong value a ``ValueError``, a missing
file an ``ImageFileNotFoundError``) naming the argument. ``ProbeImage(probe_set, image_id)`` names an
image of the gateway's probe sets for ``explain()`` (with the grounding score).

Calls (each returns a frozen dataclass of ``compcap_client.results``):

- ``caption(images, *, model, beam_size, n_best, rerank, rerank_weight, max_length, length_penalty,
  hooks, timeout) -> CaptionResult`` (multipart ``POST /v1/captions``);
- ``explain(image, *, method, caption, tokens, scene_graph, attribute_to, n_steps, overlays,
  overlay_scale, <the caption options>, timeout) -> Explanation`` (``POST /v1/explain``);
- ``compare(images, configurations, *, timeout) -> Comparison`` (``POST /v1/compare``);
- ``models()``, ``hooks()``, ``health()``, ``ready()``, ``wait_ready()``, ``metrics_text()``;
- live probes: ``start_probe(kind, **fields) -> ProbeJob``, ``probe(id)``, ``probes()``,
  ``cancel_probe(id)``, ``wait_probe(id, poll_s, timeout_s, on_progress)``, ``probe_sets()``,
  ``probe_kinds()``, ``probe_kind(name) -> ProbeKindInfo`` (read once per client).

A probe job's result is its kind's JSON; the client names no kind. ``job.interval(*path)`` and
``job.figures()`` read any result offline (a job saved as JSON too), by the results' convention (every
figure ``X`` beside its ``X_interval``); ``job.figures(client.probe_kind(job.kind))`` gives the kind's
own headline figures under its labels, as ``GET /v1/probe-kinds`` declares them::

    job = client.wait_probe(client.start_probe("systematicity", images=20).id)
    for label, figure in job.figures(client.probe_kind(job.kind)).items():
        print(label, figure.value, figure.interval)        # "held-out Recall@5 0.2 Interval(...)"

Failures: a 4xx/5xx answer raises ``CompCapError(status, code, message)`` read from the gateway's
error body (``{"error": {"code", "message", "details"?}}``); a request that never got an answer
(connection refused, timeout) raises ``CompCapTransportError`` (status 0). A 503 or 429 is retried
after its ``Retry-After`` (seconds or an HTTP date; exponential back-off when absent), and so is a
connection that could not be opened, within ``RetryPolicy``'s bounds: at most ``max_attempts``
attempts and ``max_wait_s`` seconds of waiting in all — a ``Retry-After`` longer than what is left
is not cut short, the error is raised instead. ``api_key`` sends ``Authorization: Bearer <key>``.

How it is built: each call is written once, as a generator that yields requests and sleeps
(``calls``: request builders; ``api``: the calls), and two thin transports drive it — the only code
that differs between the clients. Retries, timeouts and the error mapping are in ``errors.exchange``.

A light import: httpx and the standard library only — no ``service`` module outside this package,
no pydantic, fastapi, numpy, PIL, onnxruntime, torch or spaCy (NumPy and PIL are imported when a
NumPy array or a PIL image is given, which means the caller already has them; asyncio with the first
async call): about 0.2 s, three quarters of it httpx. ``tests/unit/service/test_client_calls.py``
checks it, and ``tests/integration/test_client_install.py`` in a venv that has nothing else.

Its own distribution (``client/pyproject.toml``: ``compcap-client``, Python >= 3.9, httpx alone):
``pip install ./client`` from a checkout, or ``pip install "git+<repository URL>#subdirectory=client"``.
The main distribution ships the same package.
"""

from __future__ import annotations

from compcap_client import results
from compcap_client.api import DEFAULT_URL, AsyncCompCapClient, CompCapClient
from compcap_client.calls import Request, Rerank
from compcap_client.errors import (
    NO_RETRY,
    RETRY_STATUSES,
    CompCapError,
    CompCapTransportError,
    RetryPolicy,
    error_from_response,
    parse_retry_after,
)
from compcap_client.images import ImageFile, ImageFileNotFoundError, ImageInput, ImagesInput, ProbeImage
from compcap_client.results import *  # noqa: F403  (the answers' dataclasses: its __all__)
from compcap_client.results import TERMINAL_STATUSES

__all__ = [
    "DEFAULT_URL",
    "NO_RETRY",
    "RETRY_STATUSES",
    "TERMINAL_STATUSES",
    "AsyncCompCapClient",
    "CompCapClient",
    "CompCapError",
    "CompCapTransportError",
    "ImageFile",
    "ImageFileNotFoundError",
    "ImageInput",
    "ImagesInput",
    "ProbeImage",
    "Request",
    "Rerank",
    "RetryPolicy",
    "error_from_response",
    "parse_retry_after",
]
__all__ += results.__all__  # the answers' dataclasses
