"""Compared configurations: a captioner with its decoding options under a name (``BUTR+RR`` is
``butr_g1`` decoded with 100 beams and re-ranked by its own ranker). The endpoint, the shadow and the
MAD study all describe what they compare this way, and resolve each one through the engine, so a
configuration decodes exactly as a caption request with the same options would.

Text form (CLI, ``COMPCAP_SHADOW_MODEL``): a bare captioner name (``butd_g1``), or ``NAME=MODEL`` with
an optional query string of options (``BUTR+RR=butr_g1?beam_size=100&rerank=true``), or
``NAME={JSON options}`` (hooks need JSON:
``WEAK={"model": "butd_g1", "beam_size": 1,
"hooks": [{"name": "ban_words", "params": {"words": ["red"]}}]}``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from service.manifest import Manifest
from service.text.suggest import did_you_mean

OPTION_NAMES = frozenset(
    {"model", "beam_size", "max_length", "n_best", "rerank", "length_penalty", "hooks", "rerank_weight"}
)
_INT_OPTIONS = frozenset({"beam_size", "max_length", "n_best"})
_FLOAT_OPTIONS = frozenset({"length_penalty", "rerank_weight"})
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.+\-]{1,64}$")
ARCH_ORDER = ("SAT", "BUTD", "BUTR", "BUTR+RR", "Transformer", "M2", "FULL")
RERANK_BEAMS = 100  # BUTR+RR (Nikolaus et al., 2019) re-ranks 100 beams


class ConfigurationError(ValueError):
    """A configuration that cannot be parsed; ``field`` names the part at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Configuration:
    """``name`` (unique in a comparison) and the caption options it decodes with (``engine.resolve``
    keyword arguments; ``model`` always set)."""

    name: str
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not NAME_PATTERN.match(self.name):
            raise ConfigurationError(
                "name", f"configuration name {self.name!r} must match {NAME_PATTERN.pattern}"
            )
        unknown = sorted(set(self.options) - OPTION_NAMES)
        if unknown:
            hint = did_you_mean(unknown[0], OPTION_NAMES) if len(unknown) == 1 else ""
            raise ConfigurationError(
                "options", f"{self.name}: unknown option(s) {unknown}{hint}; known: {sorted(OPTION_NAMES)}"
            )
        if not isinstance(self.options.get("model"), str):
            raise ConfigurationError("model", f"{self.name}: a configuration needs a captioner 'model'")

    @property
    def model(self) -> str:
        return str(self.options["model"])

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "options": dict(self.options)}


def _coerce(key: str, value: str) -> Any:
    if key in _INT_OPTIONS:
        return int(value)
    if key in _FLOAT_OPTIONS:
        return float(value)
    if key == "rerank":
        low = value.lower()
        return True if low == "true" else False if low == "false" else value
    if key == "hooks":
        return json.loads(value)
    return value


def parse_configuration(text: str) -> Configuration:
    """One configuration from its text form (module docstring); ``ConfigurationError`` names the fault."""
    text = text.strip()
    name, sep, rest = text.partition("=")
    name, rest = name.strip(), rest.strip()
    if not sep:
        return Configuration(name, {"model": name})
    if rest.startswith("{"):
        try:
            options = json.loads(rest)
        except ValueError as exc:
            raise ConfigurationError("options", f"{name}: options are not valid JSON: {exc}") from None
        if not isinstance(options, dict):
            raise ConfigurationError("options", f"{name}: options must be a JSON object")
        return Configuration(name, options)
    model, _, query = rest.partition("?")
    parsed: dict[str, Any] = {"model": model.strip()}
    try:
        items = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ConfigurationError("options", f"{name}: options {query!r} are not key=value&...") from None
    for key, value in items:
        if key not in OPTION_NAMES or key == "model":
            known = OPTION_NAMES - {"model"}
            raise ConfigurationError("options", f"{name}: unknown option {key!r}{did_you_mean(key, known)}")
        try:
            parsed[key] = _coerce(key, value)
        except ValueError:
            raise ConfigurationError(key, f"{name}: {key}={value!r} is not valid") from None
    return Configuration(name, parsed)


def check_unique(configs: Sequence[Configuration]) -> None:
    """``ConfigurationError`` unless there are two or more configurations with distinct names."""
    if len(configs) < 2:
        raise ConfigurationError(
            "configurations", f"compare needs two or more configurations, got {len(configs)}"
        )
    names = [c.name for c in configs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigurationError("configurations", f"configuration names must be unique; repeated: {dup}")


def default_configurations(manifest: Manifest, group: int = 1) -> list[Configuration]:
    """What a repository has of Nikolaus et al.'s (2019) line-up: per architecture one captioner
    (held-out group ``group`` where there is one), BUTR also re-ranked by its own ranker over 100 beams
    (BUTR+RR), and the captioner trained on everything (FULL, ``*_full``)."""
    chosen: dict[str, str] = {}
    full: str | None = None
    for cap in manifest.captioners:
        if cap.name.endswith("_full"):
            full = full or cap.name
            continue
        if cap.architecture not in chosen or cap.name.endswith(f"_g{group}"):
            chosen[cap.architecture] = cap.name
    out: list[Configuration] = []
    for arch in sorted(chosen, key=lambda a: ARCH_ORDER.index(a) if a in ARCH_ORDER else len(ARCH_ORDER)):
        name = chosen[arch]
        ranker = manifest.captioner(name).ranker
        out.append(Configuration(arch, {"model": name, "rerank": False} if ranker else {"model": name}))
        if ranker:
            out.append(
                Configuration(f"{arch}+RR", {"model": name, "beam_size": RERANK_BEAMS, "rerank": True})
            )
    if full is not None:
        out.append(Configuration("FULL", {"model": full}))
    return out


__all__ = [
    "Configuration",
    "ConfigurationError",
    "check_unique",
    "default_configurations",
    "parse_configuration",
]
