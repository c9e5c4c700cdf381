"""Gateway settings: one ``Settings`` object (env prefix ``COMPCAP_``), validated at start-up, collected
from sections, each owned by its package (``service.sections`` is their base): the engine's
(``service/engine/settings.py``), each backend's (``service/backends/onnxruntime/settings.py``,
``service/backends/triton/settings.py``, joined in ``service/backends/settings.py``), the HTTP kit's
(``service/api/settings.py``), the shared state's (``service/state/settings.py``), the gateway's
(``service/gateway/settings.py``), the logs' (``service/logs.py``) and each feature's own
(``ProbeSettings`` in ``service/probes/settings.py``, ``ExplainSettings`` in
``service/explain/settings.py``, ``CompareSettings`` in ``service/compare/settings.py``) — whose fields
keep the flat names (``COMPCAP_MAX_BEAM_SIZE`` is ``max_beam_size`` of the engine's section and of
``Settings``). ``SECTIONS`` lists them in the order of the settings reference (``scripts/gen_docs.py``).

``FeatureSettings``' bases are the one list of features: ``FEATURES`` (their names, in the order the
gateway installs them, ``service.gateway.features``) is read off them. Adding a feature is its package
with its ``settings.py`` section and its ``feature.py`` install, and its section among these bases.

The engine takes only its section (and the backends'), and every feature parses its own settings when
it installs (``check_setting``); only the command line and the gateway, above the features, import this
module."""

from __future__ import annotations

from typing import ClassVar, Self

from pydantic import Field, ValidationError, field_validator, model_validator

from service.api.settings import HttpSettings, ServiceSettings
from service.backends.settings import BACKEND_SECTIONS
from service.cli.errors import UsageError
from service.compare.settings import CompareSettings
from service.engine.settings import EngineSettings
from service.explain.settings import ExplainSettings
from service.gateway.settings import GatewaySettings
from service.logs import LogSettings
from service.probes.settings import ProbeSettings
from service.sections import FeatureSection, Section, settings_problems
from service.state.settings import StateSettings


class FeatureSettings(CompareSettings, ExplainSettings, ProbeSettings):
    """The features' sections, one base per feature, listed last feature first (the fields then come
    probes, explain, compare)."""


FEATURE_SECTIONS: tuple[type[FeatureSection], ...] = tuple(reversed(FeatureSettings.__bases__))
FEATURES = tuple(section.feature for section in FEATURE_SECTIONS)  # the feature packages, in order


class ServedFeatures(Section):
    """Which features the gateway serves."""

    title: ClassVar[str] = "Features"

    features: str = Field(
        default=",".join(FEATURES),
        json_schema_extra={"doc_type": "list of: " + ", ".join(FEATURES)},
        description="comma-separated features the gateway serves besides captions (probes, explain, "
        "compare); a feature left out answers 404 on its routes ('' = captions only)",
    )

    @field_validator("features")
    @classmethod
    def _features_known(cls, value: str) -> str:
        names = {name.strip() for name in value.split(",")} - {""}
        unknown = sorted(names - set(FEATURES))
        if unknown:
            raise ValueError(
                f"COMPCAP_FEATURES: unknown feature {unknown[0]!r}; features: {', '.join(FEATURES)}"
            )
        return ",".join(name for name in FEATURES if name in names)

    def feature_names(self) -> tuple[str, ...]:
        """The features served, in ``FEATURES`` order."""
        return tuple(name for name in self.features.split(",") if name)


class Settings(ServedFeatures, FeatureSettings, LogSettings, GatewaySettings, ServiceSettings):
    """Every knob of the gateway, section by section (the bases are listed last section first: the
    fields come engine, backends, shared state, HTTP, gateway, logs, probes, explain, compare, features).
    Environment variables are ``COMPCAP_<FIELD>``, e.g. ``COMPCAP_PORT``; ``settings.engine`` is the
    engine's section, ``ProbeSettings.of(settings)`` a feature's (each reads its own so)."""

    @model_validator(mode="after")
    def _feature_settings_served(self) -> Self:
        served = self.feature_names()
        for section in FEATURE_SECTIONS:
            for name in section.needs_feature:
                if getattr(self, name) is not None and section.feature not in served:
                    raise ValueError(f"{name}: the {section.feature} feature is left out of COMPCAP_FEATURES")
        return self


# every section of Settings, in the order of the settings reference
SECTIONS: tuple[type[Section], ...] = (
    EngineSettings,
    *BACKEND_SECTIONS,
    GatewaySettings,
    HttpSettings,
    StateSettings,
    LogSettings,
    ServedFeatures,
    *FEATURE_SECTIONS,
)


def settings_error(exc: ValidationError) -> UsageError:
    """``compcap serve``'s one line for invalid settings (``compcap serve: invalid settings: ...``, exit
    2): every problem, each naming its field."""
    return UsageError(settings_problems(exc))


def load_settings(**overrides: object) -> Settings:
    """Settings from the environment plus ``overrides``; invalid values exit naming the field
    (``settings_error``)."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise settings_error(exc) from None


__all__ = [
    "FEATURES",
    "FEATURE_SECTIONS",
    "SECTIONS",
    "FeatureSettings",
    "ServedFeatures",
    "Settings",
    "load_settings",
    "settings_error",
]
