"""The calls of the API, each written once as a ``Flow`` (``compcap_client.calls``), and the two thin
transports that run them: ``CompCapClient`` (``httpx.Client``, blocking) and ``AsyncCompCapClient``
(``httpx.AsyncClient``, coroutines).

``@operation`` turns a flow into a method of both clients: on a ``CompCapClient`` it returns the
result, on an ``AsyncCompCapClient`` a coroutine of it (typed so for mypy and editors). Retries,
timeouts and the error mapping are in ``compcap_client.errors.exchange``, which every request goes
through.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, overload

import httpx

from compcap_client.calls import (
    Flow,
    Hooks,
    Outcome,
    Request,
    Rerank,
    Sleep,
    caption_options,
    caption_request,
    compare_request,
    explain_request,
    probe_body,
    probe_compare_path,
    probe_path,
)
from compcap_client.errors import CompCapError, CompCapTransportError, RetryPolicy, exchange
from compcap_client.images import ImageInput, ImagesInput, ProbeImage
from compcap_client.results import (
    CaptionResult,
    Comparison,
    Explanation,
    ModelsInfo,
    ProbeComparison,
    ProbeJob,
    ProbeKindInfo,
    ReadyStatus,
)

if TYPE_CHECKING:
    from typing_extensions import Concatenate, Self

DEFAULT_URL = "http://127.0.0.1:8080"
if sys.version_info >= (3, 10):
    from typing import ParamSpec

    P = ParamSpec("P")
else:  # Python 3.9 has no ParamSpec; a TypeVar stands in at run time (type checkers read the branch above)
    P = TypeVar("P")
T = TypeVar("T")
TransportT = TypeVar("TransportT", httpx.BaseTransport, httpx.AsyncBaseTransport)
Method = Literal["attention", "saliency", "guided_backprop", "integrated_gradients"]


class operation(Generic[P, T]):  # lower case: used as a decorator
    """A call of both clients from one flow ``f(client, ...) -> Flow[T]``: ``client.f(...)`` runs it
    on the client's transport (``T`` on ``CompCapClient``, a coroutine of ``T`` on
    ``AsyncCompCapClient``)."""

    def __init__(self, flow: Callable[Concatenate[Any, P], Flow[T]]) -> None:
        self.flow = flow
        self.__doc__ = flow.__doc__
        self.__name__ = flow.__name__
        self.__wrapped__ = flow
        signature = inspect.signature(flow)
        self._signature = signature.replace(parameters=list(signature.parameters.values())[1:])

    @overload
    def __get__(self, client: None, owner: type[Any]) -> operation[P, T]: ...
    @overload
    def __get__(self, client: CompCapClient, owner: type[Any]) -> Callable[P, T]: ...
    @overload
    def __get__(
        self, client: AsyncCompCapClient, owner: type[Any]
    ) -> Callable[P, Coroutine[Any, Any, T]]: ...
    def __get__(self, client: Any, owner: type[Any]) -> Any:
        if client is None:
            return self
        flow = self.flow
        if isinstance(client, AsyncCompCapClient):

            async def call_async(*args: Any, **kwargs: Any) -> Any:
                return await client._run(flow(client, *args, **kwargs))

            bound: Callable[..., Any] = call_async
        else:

            def call(*args: Any, **kwargs: Any) -> Any:
                return client._run(flow(client, *args, **kwargs))

            bound = call
        functools.update_wrapper(bound, flow)
        bound.__signature__ = self._signature  # type: ignore[attr-defined]
        return bound


class _Api(Generic[TransportT]):
    """The API's calls and options, shared by both clients (see ``compcap_client`` for the whole list);
    ``TransportT``: the ``httpx`` transport type the client's ``transport`` option takes."""

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        connect_timeout: float = 5.0,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        transport: TransportT | None = None,
        trust_env: bool = True,
        max_connections: int = 100,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = httpx.Timeout(timeout, connect=connect_timeout)
        self.retry = retry if retry is not None else RetryPolicy()
        self.retries = 0  # requests tried again so far (503/429 or connect failures)
        self._kinds: dict[str, ProbeKindInfo] = {}  # GET /v1/probe-kinds, read by probe_kind()
        self._open(
            base_url=self.base_url,
            headers=_headers(api_key, headers),
            timeout=self.timeout,
            transport=transport,
            trust_env=trust_env,
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        )

    def _open(self, **options: Any) -> None:
        """Open the transport's ``httpx`` client with ``options``."""
        raise NotImplementedError

    def _counted(self) -> None:
        self.retries += 1

    def _send(self, request: Request) -> Flow[httpx.Response]:
        return exchange(request, self.retry, self._counted)

    def _parsed(self, request: Request, parse: Callable[[Any], T]) -> Flow[T]:
        """The JSON answer to ``request`` read by ``parse``; an answer of another shape is a
        ``CompCapError`` (``invalid_response``), not a ``KeyError`` deep in a parser."""
        response = yield from self._send(request)
        try:
            return parse(response.json())
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CompCapError(
                response.status_code,
                "invalid_response",
                f"{request.method} {request.path}: the gateway's answer is not what the client reads "
                f"({type(exc).__name__}: {exc})",
            ) from None

    # captions, explanations, comparisons

    @operation
    def caption(
        self,
        images: ImagesInput,
        *,
        model: str | None = None,
        beam_size: int | None = None,
        n_best: int | None = None,
        rerank: Rerank = None,
        rerank_weight: float | None = None,
        max_length: int | None = None,
        length_penalty: float | None = None,
        hooks: Hooks = None,
        timeout: float | None = None,
    ) -> Flow[CaptionResult]:
        """``POST /v1/captions``: caption one image or a list of them — paths, ``Path`` s, bytes, binary
        files, NumPy uint8 arrays ``[H, W, 3]`` (or one ``[N, H, W, 3]``), PIL images. ``None`` leaves
        an option to the gateway's default; ``rerank``: a ranker name, ``True`` (the captioner's own) or
        ``False`` (no re-ranking); ``hooks``: ``[{"name": ..., "params": {...}}]`` (``hooks()``);
        ``timeout``: seconds for this call."""
        options = caption_options(
            model, beam_size, n_best, rerank, rerank_weight, max_length, length_penalty, hooks
        )
        request = caption_request(images, options, timeout)
        return (yield from self._parsed(request, CaptionResult.from_json))

    @operation
    def explain(
        self,
        image: ImageInput | ProbeImage,
        *,
        method: Method | None = None,
        caption: str | None = None,
        tokens: Sequence[int] | None = None,
        scene_graph: Mapping[str, Any] | None = None,
        attribute_to: Literal["regions", "pixels"] | None = None,
        n_steps: int | None = None,
        overlays: bool | None = None,
        overlay_scale: int | None = None,
        model: str | None = None,
        beam_size: int | None = None,
        n_best: int | None = None,
        rerank: Rerank = None,
        rerank_weight: float | None = None,
        max_length: int | None = None,
        length_penalty: float | None = None,
        hooks: Hooks = None,
        timeout: float | None = None,
    ) -> Flow[Explanation]:
        """``POST /v1/explain``: one attribution map per word of a caption of ``image`` (any form
        ``caption()`` takes, or a ``ProbeImage``, whose scene graph brings the grounding score).
        ``method``: ``attention`` (the gateway's default; no torch), ``saliency``, ``guided_backprop``,
        ``integrated_gradients`` (these need the gateway's ``explain`` extra: else a 501
        ``CompCapError``); ``caption``: explain this caption (teacher-forced) instead of the model's
        best one, decoded with the caption options; ``tokens``: that caption as token ids (a
        ``Caption.tokens``: exact on a subword captioner); ``scene_graph``: the image's (SceneWorld's
        form), for the grounding score and the pointing game; ``attribute_to``: ``regions`` or ``pixels``
        (gradient methods); ``n_steps``: integrated gradients' steps; ``overlays``: a PNG heat map per
        word (``ExplainedWord.overlay``), ``overlay_scale`` its enlargement."""
        options = caption_options(
            model, beam_size, n_best, rerank, rerank_weight, max_length, length_penalty, hooks
        )
        explain = {
            "method": method,
            "caption": caption,
            "tokens": None if tokens is None else [int(t) for t in tokens],
            "scene_graph": None if scene_graph is None else dict(scene_graph),
            "attribute_to": attribute_to,
            "n_steps": n_steps,
            "overlays": overlays,
            "overlay_scale": overlay_scale,
        }
        request = explain_request(image, options, explain, timeout)
        return (yield from self._parsed(request, Explanation.from_json))

    @operation
    def compare(
        self,
        images: ImagesInput,
        configurations: Sequence[Mapping[str, Any]] | Mapping[str, Mapping[str, Any] | str],
        *,
        timeout: float | None = None,
    ) -> Flow[Comparison]:
        """``POST /v1/compare``: caption every image with every configuration (two or more) and measure
        how far their captions are apart (NGSM), images most discrepant first. ``configurations``:
        ``[{"name": "BUTR", "model": "butr", "beam_size": 5, ...}, ...]`` or ``{"BUTR": {"model":
        "butr", ...}, "BUTD": "butd"}`` (a name → its caption options, or just the captioner)."""
        request = compare_request(images, configurations, timeout)
        return (yield from self._parsed(request, Comparison.from_json))

    # models and health

    @operation
    def models(self) -> Flow[ModelsInfo]:
        """``GET /v1/models``: the captioners and rankers served, and the image size they read."""
        return (yield from self._parsed(Request("GET", "/v1/models"), ModelsInfo.from_json))

    @operation
    def hooks(self) -> Flow[list[dict[str, Any]]]:
        """``GET /v1/hooks``: the decoding hooks a request may name, with their parameters."""
        return (yield from self._parsed(Request("GET", "/v1/hooks"), lambda body: list(body["hooks"])))

    @operation
    def health(self) -> Flow[bool]:
        """``GET /healthz``: the process answers."""
        return (yield from self._parsed(Request("GET", "/healthz"), lambda body: body.get("status") == "ok"))

    def _ready(self) -> Flow[ReadyStatus]:
        request = Request("GET", "/readyz", ok=frozenset({503}))
        return (yield from self._parsed(request, ReadyStatus.from_json))

    @operation
    def ready(self) -> Flow[ReadyStatus]:
        """``GET /readyz`` (its 503 while loading is an answer, not an error)."""
        return (yield from self._ready())

    @operation
    def wait_ready(self, timeout_s: float = 60.0, poll_s: float = 0.2) -> Flow[ReadyStatus]:
        """Poll ``/readyz`` until ready; ``TimeoutError`` after ``timeout_s``, ``CompCapError`` if the
        models failed to load. Connection failures count as not ready yet."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                status = yield from self._ready()
            except CompCapTransportError:
                status = ReadyStatus("unreachable")
            if status.ready:
                return status
            if status.status == "failed":
                raise CompCapError(503, "load_failed", status.error or "the models failed to load")
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{self.base_url} not ready after {timeout_s} s ({status.status})")
            yield Sleep(poll_s)

    @operation
    def metrics_text(self) -> Flow[str]:
        """``GET /metrics``: the Prometheus exposition."""
        return (yield from self._send(Request("GET", "/metrics"))).text

    # probes

    @operation
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
    ) -> Flow[ProbeJob]:
        """``POST /v1/probes``: start a live probe job (202); a 429 (too many jobs) is retried."""
        fields = {
            "model": model,
            "rerank": rerank,
            "beam_size": beam_size,
            "n_best": n_best,
            "rerank_weight": rerank_weight,
            "probe_set": probe_set,
            "pairs": pairs,
            "images": images,
        }
        request = Request("POST", "/v1/probes", json=probe_body(kind, fields))
        return (yield from self._parsed(request, ProbeJob.from_json))

    def _probe(self, job_id: str) -> Flow[ProbeJob]:
        return (yield from self._parsed(Request("GET", probe_path(job_id)), ProbeJob.from_json))

    @operation
    def probe(self, job_id: str) -> Flow[ProbeJob]:
        """``GET /v1/probes/{id}``: the job, with its partial or final result."""
        return (yield from self._probe(job_id))

    @operation
    def probes(self) -> Flow[list[ProbeJob]]:
        """Every job, newest first (without ``partial``/``result``)."""
        return (
            yield from self._parsed(
                Request("GET", "/v1/probes"), lambda body: [ProbeJob.from_json(j) for j in body["jobs"]]
            )
        )

    @operation
    def probe_sets(self) -> Flow[list[dict[str, Any]]]:
        """``GET /v1/probe-sets``: the repository's probe sets (name, kind, images, pairs...)."""
        return (
            yield from self._parsed(Request("GET", "/v1/probe-sets"), lambda body: list(body["probe_sets"]))
        )

    @operation
    def probe_kinds(self) -> Flow[list[dict[str, Any]]]:
        """``GET /v1/probe-kinds``: the kinds of probe the gateway runs, each its record's description as
        JSON (name, description, the format of the probe sets it reads, whether it takes pairs, its
        result's fields, figures and gauges, how the web page draws it); ``probe_kind(name)`` types one."""
        return (yield from self._parsed(Request("GET", "/v1/probe-kinds"), lambda body: list(body["kinds"])))

    @operation
    def probe_kind(self, name: str) -> Flow[ProbeKindInfo]:
        """The kind ``name`` as its record describes it (``ProbeKindInfo``), to label a job's figures
        with: ``job.figures(client.probe_kind(job.kind))``. Read lazily — ``GET /v1/probe-kinds`` on the
        first call, kept by the client, and read again for a name it did not list (a gateway restarted
        with more kinds); ``KeyError`` for a kind the gateway does not run. Reading a result needs no
        request: ``ProbeJob.figures()`` and ``interval()`` work on a job read back from JSON."""
        if name not in self._kinds:
            request = Request("GET", "/v1/probe-kinds")
            kinds = yield from self._parsed(
                request, lambda body: [ProbeKindInfo.from_json(k) for k in body["kinds"]]
            )
            self._kinds = {k.name: k for k in kinds}
        if name not in self._kinds:
            raise KeyError(f"the gateway runs no probe kind {name!r} (it runs {', '.join(self._kinds)})")
        return self._kinds[name]

    @operation
    def cancel_probe(self, job_id: str) -> Flow[ProbeJob]:
        """``DELETE /v1/probes/{id}``: the job, cancelled (or its final status if it had finished)."""
        return (yield from self._parsed(Request("DELETE", probe_path(job_id)), ProbeJob.from_json))

    @operation
    def compare_probes(self, a: str, b: str) -> Flow[ProbeComparison]:
        """``GET /v1/probes/{a}/compare/{b}``: paired tests of two succeeded jobs of one kind and probe
        set on the images both scored — per headline figure the difference ``a`` − ``b`` with its 95%
        interval and the permutation p-value (a 409 ``CompCapError`` when they are not comparable)."""
        request = Request("GET", probe_compare_path(a, b))
        return (yield from self._parsed(request, ProbeComparison.from_json))

    @operation
    def wait_probe(
        self,
        job_id: str,
        poll_s: float = 1.0,
        timeout_s: float | None = None,
        on_progress: Callable[[ProbeJob], object] | None = None,
    ) -> Flow[ProbeJob]:
        """Poll the job until it is finished and return it (whatever its final status);
        ``on_progress(job)`` after every poll; ``TimeoutError`` after ``timeout_s`` (the job goes on)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            job = yield from self._probe(job_id)
            if on_progress is not None:
                on_progress(job)
            if job.finished:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"probe {job_id} is still {job.status} after {timeout_s} s")
            yield Sleep(poll_s)


def _headers(api_key: str | None, headers: Mapping[str, str] | None) -> dict[str, str]:
    out = {"user-agent": "compcap-client", "accept": "application/json"}
    out.update(headers or {})
    if api_key:
        out["authorization"] = f"Bearer {api_key}"
    return out


# -- the two transports --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Returned(Generic[T]):
    """What a flow returned (``_advance``)."""

    value: T


def _advance(flow: Flow[T], outcome: Outcome) -> Request | Sleep | _Returned[T]:
    """Give ``flow`` the outcome of its last step: its next step, or what it returned."""
    try:
        return flow.send(outcome)
    except StopIteration as stop:
        return _Returned(stop.value)


class CompCapClient(_Api[httpx.BaseTransport]):
    """Blocking client of one gateway; a context manager (closes its connection pool).

    ``timeout``: seconds for each read/write (``caption(timeout=...)`` and the like override it per
    call); ``connect_timeout``: seconds to open a connection; ``retry``: when a 503/429 or a refused
    connection is tried again (``RetryPolicy``; ``NO_RETRY``); ``api_key``: sent as
    ``Authorization: Bearer``; ``max_connections``: the connection pool's size (threads sharing the
    client beyond it wait). ``transport``/``trust_env`` go to ``httpx.Client``.
    """

    _http: httpx.Client

    def _open(self, **options: Any) -> None:
        self._http = httpx.Client(**options)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _run(self, flow: Flow[T]) -> T:
        """Drive ``flow``: send each request it yields (once; retries are the flow's), sleep each
        ``Sleep``, until it returns."""
        outcome: Outcome = None
        with contextlib.closing(flow):
            while not isinstance(step := _advance(flow, outcome), _Returned):
                outcome = self._step(step)
            return step.value

    def _step(self, step: Request | Sleep) -> Outcome:
        if isinstance(step, Sleep):
            time.sleep(step.seconds)
            return None
        try:
            return self._http.request(**step.send_args(self.timeout))
        except httpx.TransportError as exc:
            return exc


class AsyncCompCapClient(_Api[httpx.AsyncBaseTransport]):
    """``CompCapClient``'s methods as coroutines, with the same options, on one ``httpx.AsyncClient``;
    ``async with``."""

    _http: httpx.AsyncClient

    def _open(self, **options: Any) -> None:
        self._http = httpx.AsyncClient(**options)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _run(self, flow: Flow[T]) -> T:
        """``CompCapClient._run`` with ``await``."""
        outcome: Outcome = None
        with contextlib.closing(flow):
            while not isinstance(step := _advance(flow, outcome), _Returned):
                outcome = await self._step(step)
            return step.value

    async def _step(self, step: Request | Sleep) -> Outcome:
        import asyncio  # here: a blocking client's import need not load asyncio (a quarter of it)

        if isinstance(step, Sleep):
            await asyncio.sleep(step.seconds)
            return None
        try:
            return await self._http.request(**step.send_args(self.timeout))
        except httpx.TransportError as exc:
            return exc


__all__ = ["DEFAULT_URL", "AsyncCompCapClient", "CompCapClient", "operation"]
