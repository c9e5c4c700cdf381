"""Staging an import: an imported model's files are written to a folder of their own inside the
repository, then moved into place, and the manifest is replaced last in one ``os.replace``, so that a
failed import leaves the repository as it was."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from export.hf.fusion import FusionTiming
from export.hf.step_choice import StepTiming
from export.packaging.triton_repo import config_pbtxt, parse_config
from export.quantize.stale import drop_owner_variants, stale_variants
from service.backends.triton.addresses import file_sha256
from service.manifest import MANIFEST_NAME, CaptionerEntry, Manifest, ModelEntry, RankerEntry


class HfImportError(RuntimeError):
    """An import that cannot go on; the message names what is wrong. The repository is unchanged."""


@dataclass
class ImportReport:
    name: str
    architecture: str
    parity: dict[str, float] = field(default_factory=dict)  # graph → max abs difference
    programs: dict[str, float] = field(default_factory=dict)  # graph → its program's max abs difference
    step: StepTiming | None = None  # the plain / image-cache / kv step graphs, timed (cross-attention models)
    top_k: bool = False  # the step graph returns each row's best words too (export.packaging.topk)
    single_caption_ms: float | None = None  # one caption through the engine (export.hf.single_caption)
    fusions: list[FusionTiming] = field(default_factory=list)  # the encoder's and step's (export.hf.fusion)
    files: list[str] = field(default_factory=list)


def write_configs(stage: Path, models: list[ModelEntry]) -> None:
    """Each model's ``config.pbtxt`` in ``stage``, checked with Triton's own protobuf."""
    for model_entry in models:
        text = config_pbtxt(model_entry, digest=file_sha256(model_entry.path(stage)))
        parse_config(text)
        (stage / model_entry.name / "config.pbtxt").write_text(text, encoding="utf-8")


def commit(
    repo: Path,
    manifest: Manifest,
    stage: Path,
    entry: CaptionerEntry | RankerEntry,
    models: list[ModelEntry],
) -> None:
    """Move the staged files (``models``' folders and programs, ``tokenizers/<name>.json``) into
    ``repo`` and replace the manifest with ``entry`` in it (the last step); an earlier import of the
    same name is replaced."""
    kept_models = [m for m in manifest.models if m.owner != entry.name]  # its variants too: same owner
    kind = "captioners" if isinstance(entry, CaptionerEntry) else "rankers"
    kept = [e for e in getattr(manifest, kind) if e.name != entry.name]
    updated = Manifest.model_validate(
        {
            **manifest.model_dump(),
            "format_version": 2,
            "models": [m.model_dump() for m in [*kept_models, *models]],
            kind: [e.model_dump() for e in [*kept, entry]],
            "precision_variants": drop_owner_variants(manifest, entry.name, [m.name for m in models]),
        }
    )
    stale = [Path(name) for name in stale_variants(manifest, entry.name)]
    backup = stage / ".previous"
    tokenizer = Path("tokenizers") / f"{entry.name}.json"
    moved: list[tuple[Path, Path | None]] = []
    try:
        programs = [Path(m.program) for m in models if m.program]
        for relative in [*(Path(m.name) for m in models), *programs, tokenizer, *stale]:
            target = repo / relative
            previous = None
            if target.exists():
                previous = backup / relative
                previous.parent.mkdir(parents=True, exist_ok=True)
                target.rename(previous)
            if relative not in stale:  # a stale variant only leaves (into the backup, until the end)
                target.parent.mkdir(parents=True, exist_ok=True)
                (stage / relative).rename(target)
            moved.append((target, previous))
        tmp = repo / f".{MANIFEST_NAME}.tmp"
        tmp.write_text(updated.model_dump_json(indent=2), encoding="utf-8")
        os.replace(tmp, repo / MANIFEST_NAME)
    except BaseException:
        for target, previous in reversed(moved):
            if target.is_dir():
                shutil.rmtree(target, ignore_errors=True)
            else:
                target.unlink(missing_ok=True)
            if previous is not None:
                previous.rename(target)
        raise


__all__ = ["HfImportError", "ImportReport", "commit", "write_configs"]
