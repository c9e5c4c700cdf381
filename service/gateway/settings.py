"""The gateway's section (``GatewaySettings``): the address it listens on and its HTTP processes, the
pacing of error answers and abandoners, CORS, and how often it looks for a changed repository. The HTTP
kit's section (uploads, image URLs, keys) is ``service.api.settings``'s, the logs' ``service.logs``'s;
``service.settings`` collects them all."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from service.sections import Section


class GatewaySettings(Section):
    """The gateway's section: its address and processes, pacing, CORS and the repository watch."""

    title: ClassVar[str] = "Gateway"

    host: str = Field(
        default="127.0.0.1",
        description="address the gateway listens on (0.0.0.0: every interface, as in a container)",
    )
    port: int = Field(default=8080, ge=0, le=65535, description="port the gateway listens on")
    error_pace_burst: int = Field(
        default=20, ge=1, le=100_000, description="4xx answers a connection gets at once before pacing"
    )
    error_pace_per_s: float = Field(
        default=20.0,
        ge=0.0,
        le=100_000.0,
        description="4xx answers per second a connection gets once its burst is spent; each further one "
        "waits 1/this s (0: no pacing). Two junk senders cut 24 users to 56% of their captions/s unpaced",
    )
    abandon_pace_burst: int = Field(
        default=10,
        ge=1,
        le=100_000,
        description="requests a client (bearer credential, else address) may abandon (499) at once "
        "before its next requests are held back",
    )
    abandon_pace_per_s: float = Field(
        default=2.0,
        ge=0.0,
        le=100_000.0,
        description="abandoned requests per second a client's bucket refills; while it is in debt a new "
        "request of that client waits up to 1/this s before any work starts (0: no pacing)",
    )
    cors_origins: str = Field(
        default="",
        json_schema_extra={"doc_type": "list of origin"},
        description="comma-separated origins whose pages may call the API from a browser "
        "(https://app.example.org; '*' for any, without credentials); '' = none (no CORS headers)",
    )
    api_processes: int = Field(
        default=1,
        ge=1,
        le=64,
        description="HTTP processes on the one port (compcap serve --api-processes); above 1 the models and "
        "schedulers run in one engine core process of their own, which every HTTP process calls, so that "
        "the HTTP work (uploads, PNG decoding, validation, answers) spreads over the cores while every "
        "request's rows still share one step call",
    )
    repo_watch_s: float = Field(
        default=2.0,
        ge=0.0,
        le=3600.0,
        description="how often (seconds) the gateway looks for a changed repository (manifest.json, "
        "probes/index.json: a model imported or quantized, probe sets built) and, through the state store, "
        "for reloads asked of another replica; what changed is served without a restart. 0 = never "
        "(POST /v1/admin/reload still reloads at once)",
    )
