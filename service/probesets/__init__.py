"""Probe sets: the images, references and scene graphs the live probes decode, as data in the model
repository (``<repo>/probes/<name>/``). Read by the probes, the explanations and ``export`` (whose
``export.probesets.write`` is the one writer, checking each set reads back here).

``read`` — the on-disk layout, ``ProbeSet`` and ``load_probe_set`` / ``repo_probe_sets``; ``format`` —
a set format as one record (``SetFormat``: its ``probe.json`` keys and their check) and the registry of
formats; ``builtin`` — the four built-in formats. A probe kind with a format of its own carries its
``SetFormat`` on its record and registers it with the kind (``service.probes.kinds.register``)."""

from __future__ import annotations

from service.probesets.builtin import MinimalPair, PairImages, PairMinimalPairs
from service.probesets.format import (
    ProbeSetError,
    SetFormat,
    format_names,
    get_format,
    register_format,
    unregister_format,
)
from service.probesets.read import (
    CAPTIONS_FILE,
    CIDER_FILE,
    FORMAT,
    PROBE_FILE,
    SCENES_FILE,
    ProbeSet,
    load_probe_set,
    repo_probe_sets,
)

__all__ = [
    "CAPTIONS_FILE",
    "CIDER_FILE",
    "FORMAT",
    "PROBE_FILE",
    "SCENES_FILE",
    "MinimalPair",
    "PairImages",
    "PairMinimalPairs",
    "ProbeSet",
    "ProbeSetError",
    "SetFormat",
    "format_names",
    "get_format",
    "load_probe_set",
    "register_format",
    "repo_probe_sets",
    "unregister_format",
]
