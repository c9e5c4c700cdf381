"""The base of the settings' sections: ``Section``, which every section derives from, each in the package
that owns it (the engine's ``service/engine/settings.py``, each backend's ``service/backends/<name>/
settings.py``, the HTTP kit's ``service/api/settings.py``, the shared state's ``service/state/
settings.py``, the gateway's ``service/gateway/settings.py``, the logs' in ``service/logs.py``, each
feature's ``service/<feature>/settings.py``, a ``FeatureSection``), and the helpers they and the features
check values with. Fields keep the flat names (``COMPCAP_MAX_BEAM_SIZE`` is ``max_beam_size``); each
section reads its own ``COMPCAP_*`` variables when built alone. ``service.settings`` collects the sections
into the one ``Settings`` object. This module imports nothing of the service
(``tests/unit/repo/test_layering.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, Self, TypeVar

from pydantic import ValidationError
from pydantic_core import InitErrorDetails
from pydantic_settings import BaseSettings, SettingsConfigDict

T = TypeVar("T")
R = TypeVar("R")
S = TypeVar("S", bound=BaseSettings)


class Section(BaseSettings):
    """A section of ``Settings``: its fields are ``COMPCAP_<FIELD>`` variables, as in ``Settings``;
    ``title`` names its table in the settings reference (a class that only joins sections has none)."""

    model_config = SettingsConfigDict(env_prefix="COMPCAP_", extra="ignore", validate_default=True)

    title: ClassVar[str]

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
    needs_feature: ClassVar[tuple[str, ...]] = ()


def blank_is_none(value: str | None) -> str | None:
    """A blank optional setting is unset (``COMPCAP_PROBE_SCHEDULE=``)."""
    return None if value is None or not value.strip() else value


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


def settings_problems(exc: ValidationError) -> str:
    """The one line for invalid settings (``invalid settings: ...``): every problem, each naming its
    field (``compcap serve`` prints it after its name: ``service.settings.settings_error``)."""
    problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
    return f"invalid settings: {problems}"


def load(kind: type[S], **overrides: object) -> S:
    """``kind`` (a section, or sections together) from the environment plus ``overrides``; invalid
    values raise a ``ValueError`` of ``settings_problems``' line (a process below the command line: the
    engine core)."""
    try:
        return kind(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise ValueError(settings_problems(exc)) from None
