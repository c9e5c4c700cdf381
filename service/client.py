"""Typed HTTP client of the CompCap gateway: ``CompCapClient`` (sync, ``httpx.Client``) and
``AsyncCompCapClient`` (``httpx.AsyncClient``), with the same methods.

- ``caption(images, *, model, beam_size, n_best, rerank, rerank_weight, max_length, hooks, timeout)``
  sends the image files (bytes of any format the gateway reads) as one multipart ``POST /v1/captions``
  and returns a ``CaptionResult`` (dataclasses mirroring ``service.api.schemas.CaptionResponse``);
- ``models()``, ``ready()``, ``health()``, ``metrics_text()``, ``wait_ready()``;
- live probes: ``start_probe(kind, **fields) -> ProbeJob``, ``probe(id)``, ``probes()``,
  ``cancel_probe(id)``, ``wait_probe(id, poll_s, timeout_s, on_progress)``, ``probe_sets()``,
  ``probe_kinds()`` (the kinds the gateway runs: systematicity, productivity, substitutivity and any it
  adds).

Failures: a 4xx/5xx answer raises ``CompCapError(status, code, message)`` read from the gateway's
error body (``{"error": {"code", "message", "details"?}}``); a request that never got an answer
(connection refused, timeout) raises ``CompCapTransportError`` (status 0). A 503 or 429 is retried
after its ``Retry-After`` (seconds or an HTTP date; exponential back-off when absent), and so is a
connection that could not be opened, within ``RetryPolicy``'s bounds: at most ``max_attempts``
attempts and ``max_wait_s`` seconds of waiting in all — a ``Retry-After`` longer than what is left
is not cut short, the error is raised instead. ``api_key`` sends ``Authorization: Bearer <key>``.

Self-contained: imports httpx and the standard library only (no ``service`` or ``export`` module), so
that it can be copied into any Python 3.11 project.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Literal, Self
from urllib.parse import quote

import httpx

DEFAULT_URL = "http://127.0.0.1:8080"
RETRY_STATUSES = frozenset({429, 503})
TERMINAL_STATUSES = frozenset({"succeeded", "failed", "cancelled"})
Rerank = bool | str | None


# -- errors -----------------------------------------------------------------------------------------


class CompCapError(Exception):
    """A failed request: ``status`` (0 when no answer came), ``code`` (the gateway's reason, e.g.
    ``not_an_image``, ``overloaded``), ``message``, the validation ``details`` if any, and the
    ``retry_after`` seconds the gateway asked for, if it did."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: list[dict[str, Any]] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}" if status else f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details
        self.retry_after = retry_after


class CompCapTransportError(CompCapError):
    """No answer: the connection failed or a timeout passed (``code`` ``connect_error``, ``timeout``
    or ``transport_error``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(0, code, message)


def error_from_response(response: httpx.Response) -> CompCapError:
    """The ``CompCapError`` of a 4xx/5xx answer; a body that is not the gateway's error JSON (e.g. a
    proxy's HTML page) gives code ``http_<status>`` and the start of the body as the message."""
    retry_after = parse_retry_after(response.headers.get("retry-after"))
    try:
        body = response.json()
    except (ValueError, UnicodeDecodeError):
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), str):
        details = error.get("details")
        return CompCapError(
            response.status_code,
            error["code"],
            str(error.get("message", "")),
            details if isinstance(details, list) else None,
            retry_after,
        )
    if isinstance(body, dict) and isinstance(body.get("detail"), str):  # a plain FastAPI error
        return CompCapError(
            response.status_code, f"http_{response.status_code}", body["detail"], None, retry_after
        )
    text = response.text.strip()[:500] or response.reason_phrase
    return CompCapError(response.status_code, f"http_{response.status_code}", text, None, retry_after)


def _transport_error(exc: httpx.TransportError) -> CompCapTransportError:
    code = "timeout" if isinstance(exc, httpx.TimeoutException) else "transport_error"
    if isinstance(exc, httpx.ConnectError):
        code = "connect_error"
    return CompCapTransportError(code, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)


# -- retries ----------------------------------------------------------------------------------------


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value: delay-seconds (``"3"``; a decimal is accepted) or
    an HTTP date (seconds from ``now``, at least 0). ``None`` when absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


@dataclass(frozen=True)
class RetryPolicy:
    """When a request is tried again: on ``statuses`` (503, 429) and on a connection that could not be
    opened; at most ``max_attempts`` attempts in all and ``max_wait_s`` seconds of waiting between
    them. The wait is the answer's ``Retry-After`` if it has one, else ``backoff_s`` × 2^(retry − 1)
    capped at ``max_backoff_s``. ``RetryPolicy(max_attempts=1)`` never retries."""

    max_attempts: int = 5
    max_wait_s: float = 60.0
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    statuses: frozenset[int] = RETRY_STATUSES

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.max_wait_s < 0 or self.backoff_s < 0 or self.max_backoff_s < 0:
            raise ValueError("max_wait_s, backoff_s and max_backoff_s must be >= 0")

    def delay(self, attempt: int, waited_s: float, retry_after: float | None) -> float | None:
        """Seconds to wait before attempt ``attempt + 1`` after attempt ``attempt`` (1-based) failed in a
        retriable way, having waited ``waited_s`` so far; ``None``: give up."""
        if attempt >= self.max_attempts:
            return None
        wait = (
            retry_after
            if retry_after is not None
            else min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1))
        )
        return wait if waited_s + wait <= self.max_wait_s else None


NO_RETRY = RetryPolicy(max_attempts=1)


# -- response types ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Caption:
    text: str
    tokens: list[int]
    logprob: float
    normalized_logprob: float
    ranker_score: float | None
    beam_rank: int

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Caption:
        return cls(
            text=d["text"],
            tokens=list(d.get("tokens", [])),
            logprob=float(d["logprob"]),
            normalized_logprob=float(d["normalized_logprob"]),
            ranker_score=None if d.get("ranker_score") is None else float(d["ranker_score"]),
            beam_rank=int(d["beam_rank"]),
        )


@dataclass(frozen=True)
class ImageCaptions:
    """One image's captions in final order (ranker order when re-ranked); ``original_*``: the captions
    without substitution when the ``synonym_substitution`` hook ran."""

    index: int
    caption: str
    captions: list[Caption]
    original_caption: str | None = None
    original_captions: list[Caption] | None = None

    @property
    def texts(self) -> list[str]:
        return [c.text for c in self.captions]

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ImageCaptions:
        original = d.get("original_captions")
        return cls(
            index=int(d["index"]),
            caption=d["caption"],
            captions=[Caption.from_json(c) for c in d["captions"]],
            original_caption=d.get("original_caption"),
            original_captions=None if original is None else [Caption.from_json(c) for c in original],
        )


@dataclass(frozen=True)
class Timings:
    decode_images: float
    encode: float
    decode: float
    rerank: float
    total: float

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Timings:
        return cls(
            **{
                name: float(d.get(name, 0.0))
                for name in ("decode_images", "encode", "decode", "rerank", "total")
            }
        )


@dataclass(frozen=True)
class CaptionResult:
    """``POST /v1/captions``: the parameters the gateway resolved and one ``ImageCaptions`` per image."""

    model: str
    ranker: str | None
    beam_size: int
    n_best: int
    max_length: int
    length_penalty: float
    rerank_weight: float
    hooks: list[str]
    results: list[ImageCaptions]
    timings_ms: Timings

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CaptionResult:
        return cls(
            model=d["model"],
            ranker=d.get("ranker"),
            beam_size=int(d["beam_size"]),
            n_best=int(d["n_best"]),
            max_length=int(d["max_length"]),
            length_penalty=float(d["length_penalty"]),
            rerank_weight=float(d["rerank_weight"]),
            hooks=list(d.get("hooks", [])),
            results=[ImageCaptions.from_json(r) for r in d["results"]],
            timings_ms=Timings.from_json(d.get("timings_ms", {})),
        )


@dataclass(frozen=True)
class CaptionerInfo:
    name: str
    architecture: str
    reads: str
    max_length: int
    default_ranker: str | None
    training: dict[str, Any]
    quality: dict[str, float]

    @property
    def trained_on(self) -> str:
        """The split it was trained on: ``full`` or e.g. ``systematicity/1``."""
        return str(self.training.get("split", ""))


@dataclass(frozen=True)
class RankerInfo:
    name: str
    architecture: str
    embedding_dim: int
    joint_with: str | None
    training: dict[str, Any]


@dataclass(frozen=True)
class ModelsInfo:
    """``GET /v1/models``: the captioners and rankers served, and the image size they read."""

    preset: str
    default_captioner: str
    height: int
    width: int
    captioners: list[CaptionerInfo]
    rankers: list[RankerInfo]

    def captioner(self, name: str) -> CaptionerInfo:
        for cap in self.captioners:
            if cap.name == name:
                return cap
        raise KeyError(name)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ModelsInfo:
        return cls(
            preset=d.get("preset", ""),
            default_captioner=d["default_captioner"],
            height=int(d["image"]["height"]),
            width=int(d["image"]["width"]),
            captioners=[
                CaptionerInfo(
                    name=c["name"],
                    architecture=c.get("architecture", ""),
                    reads=c.get("reads", ""),
                    max_length=int(c.get("max_length", 0)),
                    default_ranker=c.get("default_ranker"),
                    training=dict(c.get("training", {})),
                    quality=dict(c.get("quality", {})),
                )
                for c in d["captioners"]
            ],
            rankers=[
                RankerInfo(
                    name=r["name"],
                    architecture=r.get("architecture", ""),
                    embedding_dim=int(r.get("embedding_dim", 0)),
                    joint_with=r.get("joint_with"),
                    training=dict(r.get("training", {})),
                )
                for r in d["rankers"]
            ],
        )


@dataclass(frozen=True)
class ReadyStatus:
    """``GET /readyz``: ``status`` is ``ready``, ``loading`` or ``failed``."""

    status: str
    backend: str | None = None
    error: str | None = None

    @property
    def ready(self) -> bool:
        return self.status == "ready"


@dataclass(frozen=True)
class ProbeJob:
    """A live probe job (``GET /v1/probes/{id}``). ``partial`` and ``result`` are the kind's result
    dicts (``None`` in listings, and until there is one)."""

    id: str
    kind: str
    status: str
    error: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    probe_set: str | None = None
    done: int = 0
    total: int = 0
    partial: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    summary: str | None = None  # the kind's one-line summary of the result (so far)
    timings_s: dict[str, Any] = field(default_factory=dict)
    created_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None

    @property
    def finished(self) -> bool:
        """Succeeded, failed or cancelled: nothing will change any more."""
        return self.status in TERMINAL_STATUSES

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"

    def to_json(self) -> dict[str, Any]:
        """The job in the gateway's JSON shape."""
        body = asdict(self)
        body["progress"] = {"done": body.pop("done"), "total": body.pop("total")}
        return body

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ProbeJob:
        progress = d.get("progress") or {}

        def opt_float(key: str) -> float | None:
            return None if d.get(key) is None else float(d[key])

        return cls(
            id=str(d["id"]),
            kind=str(d.get("kind", "")),
            status=str(d["status"]),
            error=d.get("error"),
            params=dict(d.get("params") or {}),
            probe_set=d.get("probe_set"),
            done=int(progress.get("done", 0)),
            total=int(progress.get("total", 0)),
            partial=d.get("partial"),
            result=d.get("result"),
            summary=d.get("summary"),
            timings_s=dict(d.get("timings_s") or {}),
            created_at=opt_float("created_at"),
            started_at=opt_float("started_at"),
            finished_at=opt_float("finished_at"),
        )


# -- requests ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Call:
    """One API request, built once and sent (maybe several times) by either client."""

    method: str
    path: str
    json: Any = None
    data: dict[str, str] | None = None
    files: list[tuple[str, tuple[str, bytes, str]]] | None = None
    timeout: float | None = None
    ok: frozenset[int] = frozenset()  # non-2xx statuses that are answers, not errors (``/readyz`` 503)


def _caption_call(
    images: Sequence[bytes],
    model: str | None,
    beam_size: int | None,
    n_best: int | None,
    rerank: Rerank,
    rerank_weight: float | None,
    max_length: int | None,
    length_penalty: float | None,
    hooks: Sequence[Mapping[str, Any]] | None,
    timeout: float | None,
) -> _Call:
    if not images:
        raise ValueError("images is empty: caption at least one image")
    fields: dict[str, str] = {}
    for name, value in (
        ("model", model),
        ("beam_size", beam_size),
        ("n_best", n_best),
        ("rerank_weight", rerank_weight),
        ("max_length", max_length),
        ("length_penalty", length_penalty),
    ):
        if value is not None:
            fields[name] = str(value)
    if rerank is not None:
        fields["rerank"] = ("true" if rerank else "false") if isinstance(rerank, bool) else rerank
    if hooks is not None:
        fields["hooks"] = json.dumps([dict(h) for h in hooks])
    files = [
        ("image", (f"image{i}", bytes(blob), "application/octet-stream")) for i, blob in enumerate(images)
    ]
    return _Call("POST", "/v1/captions", data=fields, files=files, timeout=timeout)


def _probe_body(kind: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    allowed = {"model", "rerank", "beam_size", "n_best", "rerank_weight", "probe_set", "pairs", "images"}
    unknown = sorted(set(fields) - allowed)
    if unknown:
        raise TypeError(f"unknown probe field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")
    body: dict[str, Any] = {"kind": kind}
    for name, value in fields.items():
        if value is not None:
            body[name] = list(value) if name == "pairs" else value
    return body


def _probe_path(job_id: str) -> str:
    return f"/v1/probes/{quote(str(job_id), safe='')}"


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError as exc:
        raise CompCapError(
            response.status_code, "invalid_response", f"the gateway's answer is not JSON: {exc}"
        ) from None


def _timeout(call: _Call, default: httpx.Timeout) -> httpx.Timeout:
    if call.timeout is None:
        return default
    return httpx.Timeout(call.timeout, connect=default.connect)


def _headers(api_key: str | None, headers: Mapping[str, str] | None) -> dict[str, str]:
    out = {"user-agent": "compcap-client", "accept": "application/json"}
    out.update(headers or {})
    if api_key:
        out["authorization"] = f"Bearer {api_key}"
    return out


class _Base:
    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        timeout: float,
        connect_timeout: float,
        retry: RetryPolicy | None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = httpx.Timeout(timeout, connect=connect_timeout)
        self.retry = retry if retry is not None else RetryPolicy()
        self.retries = 0  # requests tried again so far (503/429 or connect failures)

    def _next_delay(
        self, call: _Call, attempt: int, waited: float, outcome: httpx.Response | httpx.TransportError
    ) -> float | None:
        """Seconds before the next attempt, or ``None`` when ``outcome`` is final."""
        if isinstance(outcome, httpx.Response):
            if outcome.status_code not in self.retry.statuses or outcome.status_code in call.ok:
                return None
            return self.retry.delay(attempt, waited, parse_retry_after(outcome.headers.get("retry-after")))
        if isinstance(outcome, httpx.ConnectError | httpx.ConnectTimeout):  # never reached the gateway
            return self.retry.delay(attempt, waited, None)
        return None

    @staticmethod
    def _result(call: _Call, outcome: httpx.Response | httpx.TransportError) -> httpx.Response:
        if isinstance(outcome, httpx.TransportError):
            raise _transport_error(outcome) from outcome
        if outcome.is_success or outcome.status_code in call.ok:
            return outcome
        raise error_from_response(outcome)


# -- sync client ------------------------------------------------------------------------------------


class CompCapClient(_Base):
    """Blocking client of one gateway; a context manager (closes its connection pool).

    ``timeout``: seconds for each read/write (a ``caption(timeout=...)`` overrides it per call);
    ``connect_timeout``: seconds to open a connection. ``transport``/``trust_env`` go to ``httpx.Client``.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        connect_timeout: float = 5.0,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
        trust_env: bool = True,
    ) -> None:
        super().__init__(base_url, api_key, timeout, connect_timeout, retry)
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=_headers(api_key, headers),
            timeout=self.timeout,
            transport=transport,
            trust_env=trust_env,
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: _Call) -> httpx.Response:
        waited, attempt = 0.0, 0
        while True:
            attempt += 1
            outcome: httpx.Response | httpx.TransportError
            try:
                outcome = self._http.request(
                    call.method,
                    call.path,
                    json=call.json,
                    data=call.data,
                    files=call.files,
                    timeout=_timeout(call, self.timeout),
                )
            except httpx.TransportError as exc:
                outcome = exc
            delay = self._next_delay(call, attempt, waited, outcome)
            if delay is None:
                return self._result(call, outcome)
            self.retries += 1
            time.sleep(delay)
            waited += delay

    # captions and models

    def caption(
        self,
        images: Sequence[bytes],
        *,
        model: str | None = None,
        beam_size: int | None = None,
        n_best: int | None = None,
        rerank: Rerank = None,
        rerank_weight: float | None = None,
        max_length: int | None = None,
        length_penalty: float | None = None,
        hooks: Sequence[Mapping[str, Any]] | None = None,
        timeout: float | None = None,
    ) -> CaptionResult:
        """Caption image files (PNG, JPEG, ... bytes). ``None`` leaves an option to the gateway's default;
        ``rerank``: a ranker name, ``True`` (the captioner's own) or ``False`` (no re-ranking)."""
        call = _caption_call(
            images,
            model,
            beam_size,
            n_best,
            rerank,
            rerank_weight,
            max_length,
            length_penalty,
            hooks,
            timeout,
        )
        return CaptionResult.from_json(_json(self._send(call)))

    def models(self) -> ModelsInfo:
        return ModelsInfo.from_json(_json(self._send(_Call("GET", "/v1/models"))))

    def hooks(self) -> list[dict[str, Any]]:
        """``GET /v1/hooks``: the decoding hooks a request may name, with their parameters."""
        return list(_json(self._send(_Call("GET", "/v1/hooks")))["hooks"])

    def health(self) -> bool:
        """``GET /healthz``: the process answers."""
        return _json(self._send(_Call("GET", "/healthz"))).get("status") == "ok"

    def ready(self) -> ReadyStatus:
        """``GET /readyz`` (its 503 while loading is an answer, not an error)."""
        body = _json(self._send(_Call("GET", "/readyz", ok=frozenset({503}))))
        return ReadyStatus(body.get("status", ""), body.get("backend"), body.get("error"))

    def wait_ready(self, timeout_s: float = 60.0, poll_s: float = 0.2) -> ReadyStatus:
        """Poll ``/readyz`` until ready; ``TimeoutError`` after ``timeout_s``, ``CompCapError`` if the
        models failed to load. Connection failures count as not ready yet."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                status = self.ready()
            except CompCapTransportError:
                status = ReadyStatus("unreachable")
            if status.ready:
                return status
            if status.status == "failed":
                raise CompCapError(503, "load_failed", status.error or "the models failed to load")
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{self.base_url} not ready after {timeout_s} s ({status.status})")
            time.sleep(poll_s)

    def metrics_text(self) -> str:
        """``GET /metrics``: the Prometheus exposition."""
        return self._send(_Call("GET", "/metrics")).text

    # probes

    def start_probe(
        self,
        kind: str,
        *,
        model: str | None = None,
        rerank: str | Literal[False] | None = None,
        beam_size: int | None = None,
        n_best: int | None = None,
        rerank_weight: float | None = None,
        probe_set: str | None = None,
        pairs: Sequence[str] | None = None,
        images: int | None = None,
    ) -> ProbeJob:
        """``POST /v1/probes``: start a live probe job (202); a 429 (too many jobs) is retried."""
        body = _probe_body(
            kind,
            dict(
                model=model,
                rerank=rerank,
                beam_size=beam_size,
                n_best=n_best,
                rerank_weight=rerank_weight,
                probe_set=probe_set,
                pairs=pairs,
                images=images,
            ),
        )
        return ProbeJob.from_json(_json(self._send(_Call("POST", "/v1/probes", json=body))))

    def probe(self, job_id: str) -> ProbeJob:
        return ProbeJob.from_json(_json(self._send(_Call("GET", _probe_path(job_id)))))

    def probes(self) -> list[ProbeJob]:
        """Every job, newest first (without ``partial``/``result``)."""
        return [ProbeJob.from_json(j) for j in _json(self._send(_Call("GET", "/v1/probes")))["jobs"]]

    def probe_sets(self) -> list[dict[str, Any]]:
        """``GET /v1/probe-sets``: the repository's probe sets (name, kind, images, pairs...)."""
        return list(_json(self._send(_Call("GET", "/v1/probe-sets")))["probe_sets"])

    def probe_kinds(self) -> list[dict[str, Any]]:
        """``GET /v1/probe-kinds``: the kinds of probe the gateway runs (name, description, the format of
        the probe sets each reads, whether it takes pairs)."""
        return list(_json(self._send(_Call("GET", "/v1/probe-kinds")))["kinds"])

    def cancel_probe(self, job_id: str) -> ProbeJob:
        """``DELETE /v1/probes/{id}``: the job, cancelled (or its final status if it had finished)."""
        return ProbeJob.from_json(_json(self._send(_Call("DELETE", _probe_path(job_id)))))

    def wait_probe(
        self,
        job_id: str,
        poll_s: float = 1.0,
        timeout_s: float | None = None,
        on_progress: Callable[[ProbeJob], object] | None = None,
    ) -> ProbeJob:
        """Poll the job until it is finished and return it (whatever its final status);
        ``on_progress(job)`` after every poll; ``TimeoutError`` after ``timeout_s`` (the job goes on)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            job = self.probe(job_id)
            if on_progress is not None:
                on_progress(job)
            if job.finished:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"probe {job_id} is still {job.status} after {timeout_s} s")
            time.sleep(poll_s)


# -- async client -----------------------------------------------------------------------------------


class AsyncCompCapClient(_Base):
    """``CompCapClient``'s methods as coroutines, on one ``httpx.AsyncClient``; ``async with``."""

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        connect_timeout: float = 5.0,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        trust_env: bool = True,
        max_connections: int = 100,
    ) -> None:
        super().__init__(base_url, api_key, timeout, connect_timeout, retry)
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=_headers(api_key, headers),
            timeout=self.timeout,
            transport=transport,
            trust_env=trust_env,
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, call: _Call) -> httpx.Response:
        waited, attempt = 0.0, 0
        while True:
            attempt += 1
            outcome: httpx.Response | httpx.TransportError
            try:
                outcome = await self._http.request(
                    call.method,
                    call.path,
                    json=call.json,
                    data=call.data,
                    files=call.files,
                    timeout=_timeout(call, self.timeout),
                )
            except httpx.TransportError as exc:
                outcome = exc
            delay = self._next_delay(call, attempt, waited, outcome)
            if delay is None:
                return self._result(call, outcome)
            self.retries += 1
            await asyncio.sleep(delay)
            waited += delay

    async def caption(
        self,
        images: Sequence[bytes],
        *,
        model: str | None = None,
        beam_size: int | None = None,
        n_best: int | None = None,
        rerank: Rerank = None,
        rerank_weight: float | None = None,
        max_length: int | None = None,
        length_penalty: float | None = None,
        hooks: Sequence[Mapping[str, Any]] | None = None,
        timeout: float | None = None,
    ) -> CaptionResult:
        """See ``CompCapClient.caption``."""
        call = _caption_call(
            images,
            model,
            beam_size,
            n_best,
            rerank,
            rerank_weight,
            max_length,
            length_penalty,
            hooks,
            timeout,
        )
        return CaptionResult.from_json(_json(await self._send(call)))

    async def models(self) -> ModelsInfo:
        return ModelsInfo.from_json(_json(await self._send(_Call("GET", "/v1/models"))))

    async def hooks(self) -> list[dict[str, Any]]:
        return list(_json(await self._send(_Call("GET", "/v1/hooks")))["hooks"])

    async def health(self) -> bool:
        return _json(await self._send(_Call("GET", "/healthz"))).get("status") == "ok"

    async def ready(self) -> ReadyStatus:
        body = _json(await self._send(_Call("GET", "/readyz", ok=frozenset({503}))))
        return ReadyStatus(body.get("status", ""), body.get("backend"), body.get("error"))

    async def wait_ready(self, timeout_s: float = 60.0, poll_s: float = 0.2) -> ReadyStatus:
        """See ``CompCapClient.wait_ready``."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                status = await self.ready()
            except CompCapTransportError:
                status = ReadyStatus("unreachable")
            if status.ready:
                return status
            if status.status == "failed":
                raise CompCapError(503, "load_failed", status.error or "the models failed to load")
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{self.base_url} not ready after {timeout_s} s ({status.status})")
            await asyncio.sleep(poll_s)

    async def metrics_text(self) -> str:
        return (await self._send(_Call("GET", "/metrics"))).text

    async def start_probe(
        self,
        kind: str,
        *,
        model: str | None = None,
        rerank: str | Literal[False] | None = None,
        beam_size: int | None = None,
        n_best: int | None = None,
        rerank_weight: float | None = None,
        probe_set: str | None = None,
        pairs: Sequence[str] | None = None,
        images: int | None = None,
    ) -> ProbeJob:
        """See ``CompCapClient.start_probe``."""
        body = _probe_body(
            kind,
            dict(
                model=model,
                rerank=rerank,
                beam_size=beam_size,
                n_best=n_best,
                rerank_weight=rerank_weight,
                probe_set=probe_set,
                pairs=pairs,
                images=images,
            ),
        )
        return ProbeJob.from_json(_json(await self._send(_Call("POST", "/v1/probes", json=body))))

    async def probe(self, job_id: str) -> ProbeJob:
        return ProbeJob.from_json(_json(await self._send(_Call("GET", _probe_path(job_id)))))

    async def probes(self) -> list[ProbeJob]:
        return [ProbeJob.from_json(j) for j in _json(await self._send(_Call("GET", "/v1/probes")))["jobs"]]

    async def probe_sets(self) -> list[dict[str, Any]]:
        return list(_json(await self._send(_Call("GET", "/v1/probe-sets")))["probe_sets"])

    async def probe_kinds(self) -> list[dict[str, Any]]:
        return list(_json(await self._send(_Call("GET", "/v1/probe-kinds")))["kinds"])

    async def cancel_probe(self, job_id: str) -> ProbeJob:
        return ProbeJob.from_json(_json(await self._send(_Call("DELETE", _probe_path(job_id)))))

    async def wait_probe(
        self,
        job_id: str,
        poll_s: float = 1.0,
        timeout_s: float | None = None,
        on_progress: Callable[[ProbeJob], object] | None = None,
    ) -> ProbeJob:
        """See ``CompCapClient.wait_probe``."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            job = await self.probe(job_id)
            if on_progress is not None:
                on_progress(job)
            if job.finished:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"probe {job_id} is still {job.status} after {timeout_s} s")
            await asyncio.sleep(poll_s)


__all__ = [
    "NO_RETRY",
    "AsyncCompCapClient",
    "Caption",
    "CaptionResult",
    "CaptionerInfo",
    "CompCapClient",
    "CompCapError",
    "CompCapTransportError",
    "ImageCaptions",
    "ModelsInfo",
    "ProbeJob",
    "RankerInfo",
    "ReadyStatus",
    "RetryPolicy",
    "Timings",
    "error_from_response",
    "parse_retry_after",
]
