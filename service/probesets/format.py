"""A probe-set format as one record (``SetFormat``) and the registry of formats: ``load_probe_set``
checks a set's kind-specific keys through its format's ``check``, a loaded set reads them through its
format's ``readers`` (``ProbeSet.<reader>()``), the writer (``export.probesets``) refuses a kind without
a format, and the repository's probe index accepts any registered format. The built-in four are
``service.probesets.builtin``; a probe kind with a format of its own carries it on its record
(``ProbeKind.set_format``) and ``service.probes.kinds.register`` registers it here."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


class ProbeSetError(ValueError):
    """A probe set that cannot be read or is used for the wrong kind; the message names the file/key."""


# (probe.json as read, "<path of probe.json>", the image ids of captions.json) -> None or ProbeSetError
Check = Callable[[Mapping[str, Any], str, set[int]], None]
# (the loaded ProbeSet, *arguments) -> what its probe.json holds, read in the format's own terms
Reader = Callable[..., Any]


def no_keys(info: Mapping[str, Any], where: str, known: set[int]) -> None:
    """A format without kind-specific keys."""


@dataclass(frozen=True)
class SetFormat:
    """One format of ``probe.json``'s kind-specific keys.

    - ``name``: the ``kind`` a set of this format carries in ``probe.json`` and the manifest;
    - ``check(info, where, known)``: its keys exist and name only images of the set (raise
      ``ProbeSetError`` naming ``where``; a missing key may simply raise ``KeyError``);
    - ``scene_graphs``: a set of this format needs ``scene_graphs.json``;
    - ``keys``: its keys of ``probe.json``, one line for the docs and ``GET /v1/probe-kinds``;
    - ``readers``: name -> ``reader(probe_set, *args)``, what a loaded set of this format offers as
      ``probe_set.<name>(*args)`` (``service.probesets.read.ProbeSet``); a reader checks the set is of
      its format with ``probe_set.expect(name)``."""

    name: str
    check: Check = no_keys
    scene_graphs: bool = False
    keys: str = ""
    readers: Mapping[str, Reader] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").isalnum() or not self.name.islower():
            raise ValueError(f"name must be lower-case letters, digits and '_', got {self.name!r}")

    def validate(self, info: Mapping[str, Any], where: str, known: set[int]) -> None:
        """``check`` with what every format shares: the scene graphs it needs, a missing key named."""
        if self.scene_graphs and info.get("scene_graphs") is not True:
            raise ProbeSetError(f"{where}: a {self.name} probe set needs its scene graphs")
        try:
            self.check(info, where, known)
        except KeyError as exc:
            raise ProbeSetError(f"{where}: a {self.name} probe set needs key {exc.args[0]!r}") from None

    def describe(self) -> dict[str, Any]:
        """The format as ``GET /v1/probe-kinds`` serves it (its kinds' ``set_format``)."""
        return {
            "name": self.name,
            "keys": self.keys,
            "scene_graphs": self.scene_graphs,
            "readers": sorted(self.readers),
        }


FORMATS: dict[str, SetFormat] = {}


def register_format(fmt: SetFormat) -> SetFormat:
    """Add ``fmt``; another format of the same name is refused (``ValueError``), the same one is kept."""
    known = FORMATS.get(fmt.name)
    if known is not None and known is not fmt:
        raise ValueError(f"probe-set format {fmt.name!r} is registered already")
    FORMATS[fmt.name] = fmt
    return fmt


def unregister_format(name: str) -> None:
    """Remove the format ``name`` (a no-op when it is not registered)."""
    FORMATS.pop(name, None)


def format_names() -> tuple[str, ...]:
    """The registered formats' names, in registration order."""
    return tuple(FORMATS)


def get_format(name: str) -> SetFormat | None:
    return FORMATS.get(name)


def image_ids(value: Any, where: str, known: set[int]) -> list[int]:
    """``value`` as a list of image ids of the set (``ProbeSetError`` naming ``where`` otherwise)."""
    if not isinstance(value, list):
        raise ProbeSetError(f"{where} must be a list of image ids")
    try:
        ids = [int(i) for i in value]
    except (TypeError, ValueError):
        raise ProbeSetError(f"{where} holds a non-integer image id") from None
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise ProbeSetError(f"{where}: image ids not in captions.json, e.g. {unknown[:3]}")
    return ids


def require(info: Mapping[str, Any], keys: tuple[str, ...], where: str) -> None:
    """Each of ``keys`` is in ``info`` (``ProbeSetError`` naming ``where`` and the first missing)."""
    for key in keys:
        if key not in info:
            raise ProbeSetError(f"{where} has no {key!r}")
