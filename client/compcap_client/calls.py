"""The requests of the API, built once for both clients: a ``Request`` is what to send (method, path,
query, JSON or form fields and files, its timeout, the non-2xx statuses that are answers); a ``Flow``
is a call written without I/O — a generator that yields ``Request`` s and ``Sleep`` s, receives each
request's outcome, and returns the call's result. ``CompCapClient`` drives flows with
``httpx.Client`` and ``time.sleep``, ``AsyncCompCapClient`` with ``httpx.AsyncClient`` and
``asyncio.sleep``; nothing else differs between them.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, TypeVar, Union
from urllib.parse import quote

import httpx

from compcap_client.images import ProbeImage, image_file, image_files

if TYPE_CHECKING:
    from typing_extensions import TypeAlias

# the aliases are evaluated at run time: Union and Optional, not X | Y, for Python 3.9
T = TypeVar("T")
Rerank: TypeAlias = Union[bool, str, None]
Hooks: TypeAlias = Optional[Sequence[Mapping[str, Any]]]
PROBE_FIELDS = frozenset(
    {"model", "rerank", "beam_size", "n_best", "rerank_weight", "probe_set", "pairs", "images"}
)


@dataclass(frozen=True)
class Request:
    """One API request, built once and sent (maybe several times, on retries) by either client."""

    method: str
    path: str
    params: Mapping[str, str] | None = None
    json: Any = None
    data: dict[str, str] | None = None
    files: list[tuple[str, tuple[str, bytes, str]]] | None = None
    timeout: float | None = None  # seconds to read/write; None: the client's
    ok: frozenset[int] = frozenset()  # non-2xx statuses that are answers, not errors (``/readyz`` 503)

    def send_args(self, default: httpx.Timeout) -> dict[str, Any]:
        """The keyword arguments of ``httpx.Client.request`` / ``httpx.AsyncClient.request``."""
        timeout = default if self.timeout is None else httpx.Timeout(self.timeout, connect=default.connect)
        return {
            "method": self.method,
            "url": self.path,
            "params": self.params,
            "json": self.json,
            "data": self.data,
            "files": self.files,
            "timeout": timeout,
        }


@dataclass(frozen=True)
class Sleep:
    """Wait ``seconds`` (a retry's back-off, a poll's interval) before the flow goes on."""

    seconds: float


Outcome: TypeAlias = Union[httpx.Response, httpx.TransportError, None]
Flow: TypeAlias = Generator[Union[Request, Sleep], Outcome, T]


# -- builders ----------------------------------------------------------------------------------------


def caption_options(
    model: str | None,
    beam_size: int | None,
    n_best: int | None,
    rerank: Rerank,
    rerank_weight: float | None,
    max_length: int | None,
    length_penalty: float | None,
    hooks: Hooks,
) -> dict[str, Any]:
    """The decoding options given (``None``: the gateway's default), as JSON values."""
    options: dict[str, Any] = {
        name: value
        for name, value in (
            ("model", model),
            ("beam_size", beam_size),
            ("n_best", n_best),
            ("rerank", rerank),
            ("rerank_weight", rerank_weight),
            ("max_length", max_length),
            ("length_penalty", length_penalty),
        )
        if value is not None
    }
    if hooks is not None:
        options["hooks"] = [dict(h) for h in hooks]
    return options


def caption_request(images: Any, options: Mapping[str, Any], timeout: float | None) -> Request:
    """``POST /v1/captions`` as multipart: one ``image`` file per image, the options as form fields."""
    fields = {
        name: (
            ("true" if value else "false")
            if isinstance(value, bool)
            else json.dumps(value)
            if name == "hooks"
            else str(value)
        )
        for name, value in options.items()
    }
    files = [("image", (f.name, f.data, f.content_type)) for f in image_files(images, "images")]
    return Request("POST", "/v1/captions", data=fields, files=files, timeout=timeout)


def explain_request(
    image: Any, options: Mapping[str, Any], explain: Mapping[str, Any], timeout: float | None
) -> Request:
    """``POST /v1/explain`` as JSON: the image in base64 (or ``image_ref`` for a ``ProbeImage``), the
    decoding options and the explanation's (``method``, ``caption``, ...; ``None`` s left out)."""
    body: dict[str, Any] = dict(options)
    body.update({name: value for name, value in explain.items() if value is not None})
    if isinstance(image, ProbeImage):
        body["image_ref"] = {"probe_set": image.probe_set, "image_id": image.image_id}
    else:
        body["image"] = image_file(image, "image").base64()
    return Request("POST", "/v1/explain", json=body, timeout=timeout)


def compare_request(images: Any, configurations: Any, timeout: float | None) -> Request:
    """``POST /v1/compare``: the images in base64 and the configurations, each ``{"name", "model",
    options...}``."""
    encoded = [f.base64() for f in image_files(images, "images")]
    body = {"images": encoded, "configurations": configuration_list(configurations)}
    return Request("POST", "/v1/compare", json=body, timeout=timeout)


def configuration_list(configurations: Any) -> list[dict[str, Any]]:
    """Configurations as the gateway takes them, from a list of mappings with a ``name`` each, or a
    mapping name → options (or name → captioner name). The options are the gateway's to check (an
    unknown one is its 422, naming the field)."""
    if isinstance(configurations, Mapping):
        items: list[Any] = []
        for name, options in configurations.items():
            if not isinstance(name, str):
                raise TypeError(f"configurations: a name must be a str, got {type(name).__name__}")
            if isinstance(options, str):
                options = {"model": options}
            if not isinstance(options, Mapping):
                raise TypeError(
                    f"configurations[{name!r}] must be a mapping of caption options or a captioner name, "
                    f"got {type(options).__name__}"
                )
            items.append({"name": name, **options})
    elif isinstance(configurations, Sequence) and not isinstance(configurations, (str, bytes)):
        items = list(configurations)
    else:
        raise TypeError(
            "configurations must be a list of mappings (each with a name) or a mapping name -> options, "
            f"got {type(configurations).__name__}"
        )
    out: list[dict[str, Any]] = []
    for i, config in enumerate(items):
        if not isinstance(config, Mapping):
            raise TypeError(f"configurations[{i}] must be a mapping, got {type(config).__name__}")
        body = {key: value for key, value in config.items() if value is not None}
        if "hooks" in body:
            body["hooks"] = [dict(h) for h in body["hooks"]]
        out.append(body)
    return out


def probe_body(kind: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """``POST /v1/probes``' body: the kind and the fields given."""
    unknown = sorted(set(fields) - PROBE_FIELDS)
    if unknown:
        raise TypeError(
            f"unknown probe field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(PROBE_FIELDS))}"
        )
    body: dict[str, Any] = {"kind": kind}
    for name, value in fields.items():
        if value is not None:
            body[name] = list(value) if name == "pairs" else value
    return body


def probe_path(job_id: str) -> str:
    return f"/v1/probes/{quote(str(job_id), safe='')}"


def probe_compare_path(a: str, b: str) -> str:
    """``GET /v1/probes/{a}/compare/{b}``'s path, each id quoted."""
    return f"{probe_path(a)}/compare/{quote(str(b), safe='')}"


__all__ = [
    "Flow",
    "Outcome",
    "Request",
    "Sleep",
    "caption_options",
    "caption_request",
    "compare_request",
    "configuration_list",
    "explain_request",
    "probe_body",
    "probe_compare_path",
    "probe_path",
]
