"""Changing a model repository on disk as users do while a gateway serves it (the reload tests): a copy
without probe sets, probe sets registered into it, a captioner added to it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from export.probesets.repo import register_probe_sets
from service.manifest import MANIFEST_NAME, load_manifest


def repo_without_probe_sets(source: Path, dest: Path) -> Path:
    """A copy of ``source`` whose manifest lists no probe sets (their folders are copied: registering
    them later is what ``compcap probesets`` does last)."""
    shutil.copytree(source, dest, symlinks=True)
    data = json.loads((dest / MANIFEST_NAME).read_text(encoding="utf-8"))
    data["probe_sets"] = []
    (dest / MANIFEST_NAME).write_text(json.dumps(data, indent=2), encoding="utf-8")
    return dest


def register_source_sets(source: Path, repo: Path, names: list[str]) -> None:
    """List ``source``'s probe sets ``names`` (already copied into ``repo``) in ``repo``'s probe index."""
    entries = [e for e in load_manifest(source).probe_sets if e.name in names]
    assert [e.name for e in entries] == names, names
    register_probe_sets(repo, entries)


def add_twin_captioner(repo: Path, source: str, name: str) -> None:
    """Add captioner ``name``: ``source``'s models copied under new names (as an import adds one)."""
    data = json.loads((repo / MANIFEST_NAME).read_text(encoding="utf-8"))
    cap = next(c for c in data["captioners"] if c["name"] == source)
    twin = {**cap, "name": name, "init": f"{name}_init", "step": f"{name}_step", "domain": None}
    for role in ("init", "step"):
        model = next(m for m in data["models"] if m["name"] == cap[role])
        folder = repo / f"{name}_{role}"
        shutil.copytree(repo / cap[role], folder)
        config = folder / "config.pbtxt"
        config.write_text(
            config.read_text().replace(f'name: "{cap[role]}"', f'name: "{name}_{role}"'), encoding="utf-8"
        )
        data["models"].append({**model, "name": f"{name}_{role}", "owner": name, "program": None})
    data["captioners"].append(twin)
    tmp = repo / f".{MANIFEST_NAME}.tmp"
    tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
    tmp.replace(repo / MANIFEST_NAME)
