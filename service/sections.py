"""The settings' sections below the features: the ``Section`` base every section (the features' own
included: ``service/<feature>/settings.py``) derives from, the engine's section (``EngineSettings``),
the gateway's (``GatewaySettings``) and both together (``ServiceSettings``, what the HTTP kit and the
engine core read). Fields keep the flat names (``COMPCAP_MAX_BEAM_SIZE`` is ``max_beam_size``); each
section reads its own ``COMPCAP_*`` variables when built alone. ``service.settings`` collects these and
the features' sections into the one ``Settings`` object; this module imports no feature, nor the kit,
the engine or the gateway (``tests/unit/repo/test_layering.py``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, Literal, Self, TypeVar

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import InitErrorDetails
from pydantic_settings import BaseSettings, SettingsConfigDict

from service.backends.device import Device
from service.backends.registry import get_backend
from service.cli_errors import UsageError
from service.manifest import MANIFEST_NAME, Precision, load_manifest
from service.state.url import DEFAULT_STATE_URL, check_state_url
from service.url_policy import parse_hosts

MAX_BEAM_SIZE = 100  # re-ranking reads up to 100 candidates (BUTR+RR in Nikolaus et al., 2019: B = 100)

T = TypeVar("T")
R = TypeVar("R")
S = TypeVar("S", bound=BaseSettings)


class Section(BaseSettings):
    """A section of ``Settings``: its fields are ``COMPCAP_<FIELD>`` variables, as in ``Settings``."""

    model_config = SettingsConfigDict(env_prefix="COMPCAP_", extra="ignore", validate_default=True)

    @classmethod
    def of(cls, settings: BaseSettings) -> Self:
        """This section of ``settings`` (already validated, a ``Settings`` or a section holding this
        one's fields): its fields only."""
        return cls.model_construct(**{name: getattr(settings, name) for name in cls.model_fields})


class FeatureSection(Section):
    """A feature's section (``service/<feature>/settings.py``): ``feature`` its ``COMPCAP_FEATURES``
    name, ``title`` its table in the settings reference, ``needs_feature`` its settings that may be set
    only where the feature is served."""

    feature: ClassVar[str]
    title: ClassVar[str]
    needs_feature: ClassVar[tuple[str, ...]] = ()


def blank_is_none(value: str | None) -> str | None:
    """A blank optional setting is unset (``COMPCAP_PROBE_SCHEDULE=``)."""
    return None if value is None or not value.strip() else value


class EngineSettings(Section):
    """The engine's section: the repository, the backend that runs its models, the request defaults
    and bounds, and the scheduler's. The engine reads these names as they are."""

    repo: Path = Field(default=Path("model_repo"), description="model repository with manifest.json")
    backend: str = Field(
        default="onnxruntime",
        json_schema_extra={"doc_type": "a registered backend: onnxruntime, triton, null"},
        description="what runs the models: onnxruntime (embedded), triton (a Triton server at triton_url), "
        "or null (no models: outputs of the right shapes at zero cost whose captions end but mean "
        "nothing; it measures the gateway's own ceiling, `compcap bench --backend null`); any backend "
        "registered with service.backends.registry",
    )
    triton_url: str = Field(
        default="127.0.0.1:8001",
        json_schema_extra={"doc_type": "host:port, list of host:port, or dns:///name:port"},
        description="Triton gRPC address(es) (backend=triton): host:port; host:port,host:port (a list); or "
        "dns:///name:port, every address the name resolves to, resolved again every triton_resolve_s (a "
        "headless Service's name lists its ready pods). Calls go to the healthy address with the fewest "
        "in flight; one whose server goes away is ejected and probed before it gets calls again",
    )
    triton_resolve_s: float = Field(
        default=10.0, gt=0, le=3600, description="seconds between two resolutions of a dns:/// triton_url"
    )
    triton_startup_s: float = Field(
        default=300.0,
        gt=0,
        le=86400,
        description="seconds the gateway waits at start-up for a Triton address with every model ready and "
        "the manifest's (Triton's own startup budget in k8s/); /readyz answers 503 meanwhile",
    )
    triton_shared_memory: bool = Field(
        default=False,
        description="send tensors through system shared memory (co-located Triton only: one host:port, "
        "not a list or a dns:/// name)",
    )
    intra_op_threads: int = Field(
        default=0,
        ge=0,
        le=256,
        description="onnxruntime intra-op threads per model call; 0 = auto: every core of the process for "
        "each call of a heavy model (64 MiB of weights or more, e.g. an imported ViT + GPT-2: a lone "
        "request's calls run 1.5-1.8x faster), the cores divided by executor_threads (at least 1) for a "
        "light one (its sub-millisecond calls gain nothing from more threads and pay for waking them)",
    )
    ort_spinning: bool = Field(
        default=False,
        description="let idle onnxruntime pool threads spin: faster for one caller, much slower when "
        "step, encoder and ranker calls share the cores (2.5x fewer captions/s at 32 clients on 2 cores)",
    )
    executor_threads: int = Field(
        default=4, ge=1, le=64, description="threads that run model calls off the loop"
    )
    device: Device = Field(
        default="auto",
        description="where the embedded backend runs the models: auto (CUDA where onnxruntime's CUDA "
        "provider loads and a device answers, else the CPU), cpu, or cuda (where CUDA cannot be used, "
        "`compcap serve` exits naming the reason instead of falling back). The device each model got is "
        "in the start-up log, GET /v1/models, /healthz and compcap_model_device_info",
    )
    precision: Precision = Field(
        default="fp32",
        description="the models' precision: fp32, int8, fp16 or tf32 (the variants `compcap quantize "
        "[--precision fp16|tf32]` wrote and whose quality gate passed; a model without a variant serves "
        "FP32; int8 is for CPUs, fp16 for GPUs' tensor cores, tf32 lets the CUDA provider compute the "
        "admitted FP32 models in TF32, off otherwise). Another precision than fp32 on a repository "
        "without passed variants of it is a settings error",
    )
    default_beam_size: int = Field(
        default=5, ge=1, le=MAX_BEAM_SIZE, description="beam_size of a request that names none"
    )
    max_beam_size: int = Field(
        default=MAX_BEAM_SIZE,
        ge=1,
        le=MAX_BEAM_SIZE,
        description="largest beam_size a request may ask for; a wide request widens the shared beam "
        "batch while it decodes (one beam-100 client cut 32 beam-5 clients' captions/s by 44%)",
    )
    max_length_cap: int = Field(
        default=40, ge=1, le=512, description="upper bound for a request's max_length"
    )
    request_deadline_s: float | None = Field(
        default=None,
        gt=0,
        le=3600,
        json_schema_extra={"doc_type": "seconds, or unset: per captioner"},
        description="a caption request's deadline (504 past it), for every captioner; also the longest a "
        "request body may stop arriving (408) and the drain of a stopping gateway. Unset: 10 s, or for a "
        "captioner whose import measured its single caption, 30 times that where longer (a real-size "
        "import takes about a second per caption on two cores); the drain and uploads keep 10 s",
    )
    cross_request_batching: bool = Field(
        default=True, description="false: every request decodes alone (the benchmark's naive baseline)"
    )
    beam_cohorts: bool = Field(
        default=True,
        description="requests of beam size <= 8, <= 32 and wider keep separate beam arrays fed to the same "
        "step call (false: one array as wide as the widest request, as before)",
    )
    max_rows_per_step: int = Field(
        default=512, ge=1, le=65536, description="most beam rows in one <cap>_step call"
    )
    max_background_rows: int | None = Field(
        default=128,
        ge=1,
        le=65536,
        description="most beam rows background requests (probes, studies) may hold while any user "
        "request is in the scheduler; unset: no cap (offline studies)",
    )
    background_share: float = Field(
        default=0.25,
        gt=0.0,
        le=1.0,
        description="share of the time background requests may hold rows while users decode: after one "
        "held rows for t s, the next waits t × (1/share − 1) s (1 = no pacing; 0.25 kept 8 users' p50 "
        "within 1.03x of their p50 alone under a beam-100 probe, 1.72x without pacing)",
    )
    max_queue: int = Field(
        default=256, ge=1, le=100_000, description="requests waiting for admission before 503"
    )
    max_active_requests: int = Field(
        default=128, ge=1, le=100_000, description="requests decoding at once per captioner"
    )

    @field_validator("repo")
    @classmethod
    def _repo_has_manifest(cls, value: Path) -> Path:
        if not (value / MANIFEST_NAME).is_file():
            raise ValueError(
                f"{value} is not a model repository (no {MANIFEST_NAME}): point --repo or COMPCAP_REPO at one"
            )
        return value

    @field_validator("backend")
    @classmethod
    def _backend_registered(cls, value: str) -> str:
        get_backend(value)  # a ValueError names COMPCAP_BACKEND and the known backends
        return value

    @model_validator(mode="after")
    def _backend_settings(self) -> Self:
        """The backend's own check of the settings it reads (Triton: ``triton_url``'s form)."""
        check = get_backend(self.backend).check
        if check is not None:
            check(self)
        return self

    @model_validator(mode="after")
    def _default_beam_within_max(self) -> Self:
        if self.default_beam_size > self.max_beam_size:
            raise ValueError(
                f"default_beam_size ({self.default_beam_size}) exceeds max_beam_size ({self.max_beam_size})"
            )
        return self

    @field_validator("precision")
    @classmethod
    def _precision_served(cls, value: Precision, info: ValidationInfo) -> Precision:
        repo = info.data.get("repo")  # absent when the repository itself is invalid
        if value != "fp32" and repo is not None:  # its variants of that precision passed their gate
            load_manifest(repo).served_models(value)
        return value


class GatewaySettings(Section):
    """The gateway's section: its address, the upload bounds, pacing, the features it serves, the
    keys and the logs."""

    host: str = Field(
        default="127.0.0.1",
        description="address the gateway listens on (0.0.0.0: every interface, as in a container)",
    )
    port: int = Field(default=8080, ge=0, le=65535, description="port the gateway listens on")
    max_upload_bytes: int = Field(default=8 * 1024 * 1024, ge=1, description="largest accepted encoded image")
    max_image_pixels: int = Field(default=25_000_000, ge=1, description="largest accepted width * height")
    max_images_per_request: int = Field(
        default=16, ge=1, le=1024, description="most images one caption request may carry"
    )
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
    api_keys: SecretStr | None = Field(
        default=None,
        json_schema_extra={"doc_type": "list of secret (each at least 8 characters)"},
        description="comma-separated keys; when set, probe endpoints need 'Authorization: Bearer <key>'",
    )
    captions_require_key: bool = Field(
        default=False, description="with api_keys set, caption endpoints need a key too"
    )
    log_format: Literal["auto", "json", "text"] = Field(
        default="auto",
        description="json: one JSON object per log line (one per request from compcap.access); text: "
        "human-readable lines; auto: text when stderr is a terminal, else json",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        default="info", description="the least severe log lines written"
    )
    cors_origins: str = Field(
        default="",
        json_schema_extra={"doc_type": "list of origin"},
        description="comma-separated origins whose pages may call the API from a browser "
        "(https://app.example.org; '*' for any, without credentials); '' = none (no CORS headers)",
    )
    # image URLs in caption requests (service.api.image_url; the checks: service.url_policy)
    image_url_hosts: str = Field(
        default="",
        description="comma-separated hosts the gateway fetches image URLs from (a caption request's "
        "images given as http(s):// URLs): names, *.domain (its subdomains), IP addresses, each with an "
        "optional :port ([::1]:8000 for IPv6); '' = none, image URLs are refused",
    )
    image_url_max_bytes: int = Field(
        default=8 * 1024 * 1024,
        ge=1,
        description="most bytes of one fetched image (the fetch stops there, 413); max_upload_bytes "
        "bounds it too",
    )
    image_url_timeout_s: float = Field(
        default=5.0,
        gt=0,
        le=300,
        description="seconds one image URL fetch may take, resolution, redirects and body included",
    )
    image_url_allow_private: bool = Field(
        default=False,
        description="let image URLs reach loopback, private and link-local addresses (10/8, 172.16/12, "
        "192.168/16, fc00::/7, 169.254/16 with the cloud metadata address); only for tests and a "
        "trusted local network. Unspecified, multicast and reserved addresses stay refused",
    )

    @field_validator("image_url_hosts")
    @classmethod
    def _image_url_hosts(cls, value: str) -> str:
        try:
            parse_hosts(value)
        except ValueError as exc:
            raise ValueError(f"COMPCAP_IMAGE_URL_HOSTS: {exc}") from None
        return value

    api_processes: int = Field(
        default=1,
        ge=1,
        le=64,
        description="HTTP processes on the one port (compcap serve --api-processes); above 1 the models and "
        "schedulers run in one engine core process of their own, which every HTTP process calls, so that "
        "the HTTP work (uploads, PNG decoding, validation, answers) spreads over the cores while every "
        "request's rows still share one step call",
    )
    engine_socket: str | None = Field(
        default=None,
        description="set by compcap serve --api-processes for its processes: the engine core's Unix socket "
        "(an HTTP process with it calls that core instead of loading the models itself)",
    )
    state_url: str = Field(
        default=DEFAULT_STATE_URL,
        description="the shared state (probe jobs, history, baselines, shadow reservoir, leases): an "
        "SQLite file for one host (sqlite:///path.db), PostgreSQL for replicas on several "
        "(postgresql+psycopg://user:password@host:5432/db); '' = in memory, this process only",
    )
    state_heartbeat_s: float = Field(
        default=2.0,
        gt=0.0,
        le=60.0,
        description="how often a replica writes its running jobs' progress "
        "and reads the cancels other replicas ask for",
    )
    state_stale_s: float = Field(
        default=30.0,
        gt=0.0,
        le=3600.0,
        description="a job whose replica wrote nothing for this long is "
        "marked failed (the replica died); more than twice state_heartbeat_s",
    )
    state_lease_s: float = Field(
        default=30.0,
        gt=0.0,
        le=3600.0,
        description="time to live of the probe schedule's lease: how "
        "soon another replica takes the schedule over from one that died",
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

    @field_validator("state_url")
    @classmethod
    def _state_url_known(cls, value: str) -> str:
        return check_state_url(value)

    @model_validator(mode="after")
    def _stale_after_heartbeats(self) -> Self:
        if self.state_stale_s <= 2 * self.state_heartbeat_s:
            raise ValueError(
                f"state_stale_s: must be more than twice state_heartbeat_s ({self.state_heartbeat_s:g} s), "
                f"got {self.state_stale_s:g} s"
            )
        return self

    @field_validator("api_keys")
    @classmethod
    def _keys_not_blank(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value().strip():
            return None
        keys = [k.strip() for k in value.get_secret_value().split(",")]
        if any(not k for k in keys):
            raise ValueError("an empty key in the comma-separated list")
        if any(len(k) < 8 for k in keys):
            raise ValueError("every key needs at least 8 characters")
        return value

    def api_key_set(self) -> frozenset[str]:
        """The configured keys (empty: no key needed)."""
        if self.api_keys is None:
            return frozenset()
        return frozenset(k.strip() for k in self.api_keys.get_secret_value().split(","))


class ServiceSettings(GatewaySettings, EngineSettings):
    """The engine's and the gateway's sections together: what the HTTP kit (``service.api``) and the
    engine core read of ``Settings`` (the features read their own sections of it, ``Section.of``)."""

    @property
    def engine(self) -> EngineSettings:
        return EngineSettings.of(self)

    @property
    def gateway(self) -> GatewaySettings:
        return GatewaySettings.of(self)


def invalid_setting(loc: tuple[str, ...], error: ValueError, value: object) -> ValidationError:
    """The ``ValidationError`` ``Settings`` would raise for ``error`` at ``loc``: a feature's check at
    start-up fails as the settings do (``compcap serve`` prints it the same way)."""
    detail: InitErrorDetails = {"type": "value_error", "loc": loc, "input": value, "ctx": {"error": error}}
    return ValidationError.from_exception_data("Settings", [detail])


def check_setting(name: str, value: T, parse: Callable[[T], R]) -> R:
    """``parse(value)`` of the setting ``name``; a ``ValueError`` becomes ``invalid_setting`` at ``name``."""
    try:
        return parse(value)
    except ValueError as exc:
        raise invalid_setting((name,), exc, value) from None


def settings_error(exc: ValidationError) -> UsageError:
    """``compcap serve``'s one line for invalid settings (``compcap serve: invalid settings: ...``, exit
    2): every problem, each naming its field."""
    problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
    return UsageError(f"invalid settings: {problems}")


def load(kind: type[S], **overrides: object) -> S:
    """``kind`` (``Settings`` or a section) from the environment plus ``overrides``; invalid values exit
    naming the field (``settings_error``)."""
    try:
        return kind(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise settings_error(exc) from None
