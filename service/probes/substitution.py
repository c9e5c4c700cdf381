"""Seed 001 §4.3 substitutivity on live requests: the word tables behind the ``synonym_substitution``
hook, and the pairing of the substituted caption S with the original caption O.

The engine's ``synonym_substitution`` processor takes explicit word pairs only. This module accepts the
API's richer hook — ``pairs`` (optional), ``direction`` (``to_category`` / ``to_fine``, default table
only), ``return_original`` (default true) — resolves the default table (``service.text.synonyms``,
restricted to the model's vocabulary) into explicit pairs, and, for ``return_original``, issues a second
ordinary request without the hook: two searches, O and S, each decoded like any other request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.engine.engine import Caption, CaptionEngine, CaptionOutput
from service.engine.hooks import HookError, spec_parts
from service.engine.params import InvalidParameterError, SearchParams
from service.text.concepts import ConceptInventory, load_concepts
from service.text.synonyms import DIRECTIONS, substitution_pairs
from service.text.vocabulary import Vocabulary

HOOK = "synonym_substitution"
PARAMS = {
    "pairs": "[[from, to], ...] or {from: to} (default: the substitutivity synonym table)",
    "direction": "default table only: to_category (default, 'puppy'->'dog') or to_fine",
    "return_original": "bool, default true: also return the caption without substitution",
}


@dataclass(frozen=True)
class SubstitutionPlan:
    """The hooks of the substituted search S (``synonym_substitution`` with explicit word pairs) and,
    when the original caption O is asked for, of O (the same hooks without it)."""

    hooks: list[dict[str, Any]]
    original_hooks: list[dict[str, Any]] | None


def _error(index: int, param: str, message: str) -> InvalidParameterError:
    return InvalidParameterError(f"hooks.{index}.params.{param}", f"hook {HOOK!r} param {param!r}: {message}")


def plan_substitution(
    hooks: Sequence[Any] | None, vocab: Vocabulary, concepts: ConceptInventory | None = None
) -> SubstitutionPlan | None:
    """``None`` when ``hooks`` hold no ``synonym_substitution``; else its plan. A bad parameter raises
    ``InvalidParameterError`` naming it (``hooks.0.params.direction``); the other hooks and the pairs'
    words are checked by the engine."""
    specs = [spec.model_dump() if hasattr(spec, "model_dump") else spec for spec in hooks or []]
    found = [i for i, s in enumerate(specs) if isinstance(s, Mapping) and s.get("name") == HOOK]
    if not found:
        return None
    index = found[0]
    try:
        _, raw = spec_parts(specs[index], index)
    except HookError as exc:
        raise InvalidParameterError(".".join(str(p) for p in exc.loc), str(exc)) from None
    for key in raw:
        if key not in PARAMS:
            raise _error(index, str(key), f"unknown parameter (known: {', '.join(PARAMS)})")
    direction = raw.get("direction")
    if direction is not None and direction not in DIRECTIONS:
        raise _error(index, "direction", f"must be one of {list(DIRECTIONS)}, got {direction!r}")
    original = raw.get("return_original")
    if original is not None and not isinstance(original, bool):
        raise _error(index, "return_original", f"must be true or false, got {original!r}")
    pairs = raw.get("pairs")
    if pairs is not None and direction is not None:
        raise _error(index, "direction", "applies to the default table only, not with pairs")
    if pairs is None:
        words = substitution_pairs(concepts or load_concepts(), direction or "to_category", words=vocab.index)
        if not words:
            raise _error(index, "pairs", "no pair of the default synonym table is in the model's vocabulary")
        pairs = [list(p) for p in words]
    s_hooks = [*specs[:index], {"name": HOOK, "params": {"pairs": pairs}}, *specs[index + 1 :]]
    o_hooks = [*specs[:index], *specs[index + 1 :]] if original is not False else None
    return SubstitutionPlan(s_hooks, o_hooks)


def resolve_with_original(
    engine: CaptionEngine, options: Mapping[str, Any]
) -> tuple[SearchParams, SearchParams | None]:
    """Request options → the params of the request as asked (S) and, when its ``synonym_substitution``
    asks for the original caption, of the same request without that hook (O)."""
    plan = plan_substitution(options.get("hooks"), engine.vocab)
    if plan is None:
        return engine.resolve(**options), None
    substituted = engine.resolve(**{**options, "hooks": plan.hooks})
    if plan.original_hooks is None:
        return substituted, None
    return substituted, engine.resolve(**{**options, "hooks": plan.original_hooks})


async def caption_with_original(
    engine: CaptionEngine,
    images: np.ndarray,
    params: SearchParams,
    original: SearchParams | None,
    timeout_s: float | None = None,
) -> tuple[CaptionOutput, list[list[Caption]] | None]:
    """Decode S (and O, as a second ordinary request, concurrently); S's output and O's captions."""
    if original is None:
        return await engine.caption(images, params, timeout_s), None
    s, o = await asyncio.gather(
        engine.caption(images, params, timeout_s), engine.caption(images, original, timeout_s)
    )
    return s, o.results


def hook_catalog_entry(base: Mapping[str, Any]) -> dict[str, Any]:
    """The engine's catalogue entry of ``synonym_substitution`` with this module's parameters."""
    return {**base, "params": dict(PARAMS)}
