"""The HTTP kit's settings: its own section (``HttpSettings``: the bounds of what a request may bring,
image URLs, the keys, the engine core's socket) and what the kit reads of ``Settings`` (``ServiceSettings``:
that section, the shared state's and the engine's with the backends'). The gateway's own section (its
address, pacing, CORS, processes) is ``service.gateway.settings``'s; the kit never reads it."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, SecretStr, field_validator

from service.engine.settings import CoreSettings, EngineSettings
from service.images.url_policy import parse_hosts
from service.sections import Section
from service.state.settings import StateSettings


class HttpSettings(Section):
    """The HTTP kit's section: the upload bounds, image URLs, the keys, and the engine core an HTTP
    process calls (``compcap serve --api-processes``)."""

    title: ClassVar[str] = "HTTP"

    max_upload_bytes: int = Field(default=8 * 1024 * 1024, ge=1, description="largest accepted encoded image")
    max_image_pixels: int = Field(default=25_000_000, ge=1, description="largest accepted width * height")
    max_images_per_request: int = Field(
        default=16, ge=1, le=1024, description="most images one caption request may carry"
    )
    api_keys: SecretStr | None = Field(
        default=None,
        json_schema_extra={"doc_type": "list of secret (each at least 8 characters)"},
        description="comma-separated keys; when set, probe endpoints need 'Authorization: Bearer <key>'",
    )
    captions_require_key: bool = Field(
        default=False, description="with api_keys set, caption endpoints need a key too"
    )

    # image URLs in caption requests (service.api.image_url; the checks: service.images.url_policy)
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

    engine_socket: str | None = Field(
        default=None,
        description="set by compcap serve --api-processes for its processes: the engine core's Unix socket "
        "(an HTTP process with it calls that core instead of loading the models itself)",
    )

    @field_validator("image_url_hosts")
    @classmethod
    def _image_url_hosts(cls, value: str) -> str:
        try:
            parse_hosts(value)
        except ValueError as exc:
            raise ValueError(f"COMPCAP_IMAGE_URL_HOSTS: {exc}") from None
        return value

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


class ServiceSettings(HttpSettings, StateSettings, CoreSettings):
    """What the HTTP kit (``service.api``) reads of ``Settings``: its section, the shared state's, and
    the engine's with the backends' (to build the backend and the engine, or to call an engine core).
    The features read their own sections of it (``Section.of``)."""

    @property
    def engine(self) -> EngineSettings:
        return EngineSettings.of(self)
