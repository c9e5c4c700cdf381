"""Concept pairs of every caption of a dataset: the recorded truth where the dataset has it, else
attached pairs parsed once and cached on disk.

``caption_pairs_truth`` reads the pairs SceneWorld records for each caption it generates (scene graph
``captions: [{"text", "pairs"}]``, canonical inventory names), matched to the dataset's captions by text;
no parse, no spaCy. ``image_caption_pairs`` parses (``AttachmentChecker``) for datasets without them (COCO).

The parse cache is a JSON file ``{"key": ..., "pairs": {sha1(caption)[:20]: [[kind, modifier, noun], ...]}}``;
``key`` names the spaCy model, the checker's rules version and a hash of the concept inventory, so a
changed inventory or rule set starts a fresh cache. Only missing captions are parsed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from service.text.concepts import ConceptInventory, ConceptPair, load_concepts

if TYPE_CHECKING:
    from export.data.coco_captions import CaptionDataset
    from service.text.attachment import AttachmentChecker

log = logging.getLogger(__name__)
CACHE_NAME = "caption_pairs.json"


def caption_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:20]


def cache_identity(concepts: ConceptInventory, model: str) -> str:
    from service.text.attachment import RULES_VERSION

    inventory = hashlib.sha1(json.dumps(concepts.raw, sort_keys=True).encode("utf-8")).hexdigest()[:12]
    return f"{model}|rules{RULES_VERSION}|inventory:{inventory}"


def default_cache_path(ds: CaptionDataset) -> Path | None:
    """``caption_pairs.json`` next to the dataset's captions file, if that folder is writable."""
    folder = ds.source.parent if ds.source is not None else ds.root
    return folder / CACHE_NAME if os.access(folder, os.W_OK) else None


def _read_cache(path: Path, key: str) -> dict[str, list[list[str]]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if data.get("key") != key:
        log.info("cache %s was made by %s, not %s: ignored", path, data.get("key"), key)
        return {}
    return dict(data.get("pairs", {}))


def _write_cache(path: Path, key: str, pairs: dict[str, list[list[str]]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".caption_pairs.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump({"key": key, "pairs": pairs}, handle)
    os.replace(tmp, path)  # atomic: concurrent builders never read a half-written cache


PARSE_CHUNK = 1024  # captions per spaCy batch between progress updates


def _parse_with_progress(checker: AttachmentChecker, texts: list[str]) -> list[frozenset[ConceptPair]]:
    """``checker.pairs_batch(texts)`` in chunks, with a progress bar on stderr when there are many."""
    from tqdm import tqdm

    parsed: list[frozenset[ConceptPair]] = []
    with tqdm(
        total=len(texts), desc="parsing captions", unit="caption", disable=len(texts) <= PARSE_CHUNK
    ) as bar:
        for start in range(0, len(texts), PARSE_CHUNK):
            part = texts[start : start + PARSE_CHUNK]
            parsed += checker.pairs_batch(part)
            bar.update(len(part))
    return parsed


def parse_captions(
    texts: list[str],
    checker: AttachmentChecker | None = None,
    cache: Path | None = None,
    concepts: ConceptInventory | None = None,
    model: str | None = None,
) -> tuple[dict[str, frozenset[ConceptPair]], dict[str, int | float]]:
    """Attached pairs of each distinct caption text, through the cache at ``cache`` (None: no cache).

    The checker is only built (spaCy loaded) when some caption is missing from the cache. Returns
    (text -> pairs, stats)."""
    import time

    from service.text.attachment import DEFAULT_MODEL

    concepts = concepts or (checker.concepts if checker is not None else load_concepts())
    model = model or (checker.model if checker is not None else DEFAULT_MODEL)
    key = cache_identity(concepts, model)
    stored = _read_cache(cache, key) if cache is not None else {}
    unique = list(dict.fromkeys(texts))
    missing = [t for t in unique if caption_key(t) not in stored]
    seconds = 0.0
    if missing:
        if checker is None:
            from service.text.attachment import AttachmentChecker

            checker = AttachmentChecker(concepts, model=model)
        t0 = time.perf_counter()
        parsed = _parse_with_progress(checker, missing)
        seconds = time.perf_counter() - t0
        for text, found in zip(missing, parsed, strict=True):
            stored[caption_key(text)] = sorted([p.kind, p.modifier, p.noun] for p in found)
        if cache is not None:
            _write_cache(cache, key, stored)
    out = {t: frozenset(ConceptPair(*p) for p in stored[caption_key(t)]) for t in unique}
    stats: dict[str, int | float] = {
        "captions": len(texts),
        "distinct": len(unique),
        "parsed": len(missing),
        "parse_seconds": round(seconds, 3),
    }
    return out, stats


def caption_pairs_truth(
    ds: CaptionDataset, concepts: ConceptInventory | None = None
) -> dict[int, list[frozenset[ConceptPair]]] | None:
    """Per image, the recorded pairs of each of its captions (caption order), from the scene graphs'
    ``captions`` matched by text; None unless every caption of every image has a recorded entry.

    Raises ``ValueError`` when a recorded pair is not named as the concept inventory names it (a
    mismatch would silently let held-out pairs into training)."""
    if ds.scenes is None:
        return None
    out: dict[int, list[frozenset[ConceptPair]]] = {}
    for i in ds.image_ids:
        recorded = (ds.scenes.get(i) or {}).get("captions")
        if not recorded or any("pairs" not in c or "text" not in c for c in recorded):
            return None
        by_text: dict[str, list[frozenset[ConceptPair]]] = {}
        for entry in recorded:
            pairs = frozenset(ConceptPair(*p) for p in entry["pairs"])
            by_text.setdefault(str(entry["text"]).strip(), []).append(pairs)
        found: list[frozenset[ConceptPair]] = []
        for text in ds.captions[i]:
            candidates = by_text.get(text)
            if not candidates:
                return None
            found.append(candidates.pop(0) if len(candidates) > 1 else candidates[0])  # duplicates in order
        out[i] = found
    _check_names({p for found in out.values() for pairs in found for p in pairs}, concepts or load_concepts())
    return out


def _check_names(pairs: set[ConceptPair], concepts: ConceptInventory) -> None:
    nouns = set(concepts.nouns)
    modifiers = {"adjective": set(concepts.colours) | set(concepts.sizes), "verb": set(concepts.verbs)}
    bad = sorted(p.label for p in pairs if p.noun not in nouns or p.modifier not in modifiers.get(p.kind, ()))
    if bad:
        raise ValueError(f"scene graph pairs {bad[:5]} are not concept inventory names")


def image_caption_pairs(
    ds: CaptionDataset,
    checker: AttachmentChecker | None = None,
    cache: Path | None = None,
) -> tuple[dict[int, list[frozenset[ConceptPair]]], dict[str, int | float]]:
    """Per image, the attached pairs of each of its captions (caption order), parsed (through the cache)."""
    by_text, stats = parse_captions(ds.all_captions(), checker=checker, cache=cache)
    return {i: [by_text[c] for c in ds.captions[i]] for i in ds.image_ids}, stats
