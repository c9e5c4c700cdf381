"""Corpus caption metrics: BLEU-1..4 (``bleu``), ROUGE-L (``rouge``), CIDEr-D (``cider.CiderD``) and METEOR.

BLEU and ROUGE-L are pure-Python reimplementations that give pycocoevalcap's ``Bleu(4)`` and ``Rouge()``
scores (same floats, see their modules), so the gateway's live probes need neither pycocoevalcap nor
Java. CIDEr-D can take its document frequencies from a fixed table (normally built from the split's
*training* references) instead of from the references being scored, so one image can be scored.

Captions are tokenised with ``service.text.vocabulary.tokenize`` (lower-case words, punctuation
dropped) instead of the Java PTB tokenizer. METEOR is the one metric still taken from pycocoevalcap
(imported lazily): it runs ``meteor-1.5.jar`` in a Java subprocess. When Java is missing, pycocoevalcap
is not installed (the serve-only install) or the jar fails, ``meteor`` is ``None`` and ``meteor_status``
says why (the other metrics are still computed).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from service.evaluation.bleu import corpus_bleu
from service.evaluation.cider import CiderD
from service.evaluation.rouge import corpus_rouge_l
from service.text.vocabulary import tokenize

log = logging.getLogger(__name__)


def normalise(text: str) -> str:
    """Space-joined tokens of ``text`` (what every scorer here sees)."""
    return " ".join(tokenize(text))


@dataclass(frozen=True)
class CaptionScores:
    bleu1: float
    bleu2: float
    bleu3: float
    bleu4: float
    meteor: float | None
    rouge_l: float
    cider_d: float
    meteor_status: str  # "ok", or why METEOR is None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def java_available() -> bool:
    return shutil.which("java") is not None


def meteor_score(
    references: Mapping[Any, Sequence[str]], hypotheses: Mapping[Any, str]
) -> tuple[float | None, str]:
    """Corpus METEOR 1.5 (pycocoevalcap) and a status: ``(score, "ok")`` or ``(None, reason)``."""
    if not java_available():
        return None, "java not found on PATH: METEOR skipped"
    try:
        from pycocoevalcap.meteor.meteor import Meteor
    except ImportError as exc:  # the serve-only install has no pycocoevalcap (nor its jars)
        return None, f"pycocoevalcap is not installed: METEOR skipped ({exc})"
    gts = {i: [normalise(r).replace("|||", "") or "." for r in references[i]] for i in hypotheses}
    res = {i: [normalise(h) or "."] for i, h in hypotheses.items()}
    scorer = None
    try:
        scorer = Meteor()
        score, _ = scorer.compute_score(gts, res)
        return float(score), "ok"
    except Exception as exc:  # the Java side can die (memory, jar): report, don't fail the run
        log.warning("METEOR failed: %s", exc)
        return None, f"METEOR failed: {type(exc).__name__}: {exc}"
    finally:
        if scorer is not None:
            _close_meteor(scorer)


def _close_meteor(scorer: Any) -> None:
    """Stop the Java process now (pycocoevalcap's ``__del__`` does the same, idempotently, later)."""
    proc = getattr(scorer, "meteor_p", None)
    if proc is None:
        return
    with contextlib.suppress(OSError):
        proc.stdin.close()
    proc.kill()
    proc.wait()


def caption_metrics(
    references: Mapping[Any, Sequence[str]],
    hypotheses: Mapping[Any, str],
    cider: CiderD | None = None,
    meteor: bool = True,
) -> CaptionScores:
    """Corpus metrics of one caption per image.

    references: image id → reference captions (≥ 1 each); hypotheses: image id → one caption, same ids.
    cider: CIDEr-D with a fixed DF table; ``None`` builds it from ``references`` (= pycocoevalcap's Cider).
    meteor: ``False`` skips METEOR (``meteor=None``, status ``"disabled"``).
    All scores are pycocoevalcap's scale: BLEU/METEOR/ROUGE-L in [0, 1], CIDEr-D in [0, 10]."""
    if set(references) != set(hypotheses):
        raise ValueError("references and hypotheses must cover the same image ids")
    if not hypotheses:
        raise ValueError("hypotheses is empty")
    if any(len(references[i]) == 0 for i in hypotheses):
        raise ValueError("every image needs at least one reference")
    gts = {i: [normalise(r) for r in references[i]] for i in hypotheses}
    res = {i: normalise(h) for i, h in hypotheses.items()}
    bleu, _ = corpus_bleu(gts, res)
    rouge, _ = corpus_rouge_l(gts, res)
    scorer = cider if cider is not None else CiderD.from_references(references)
    cider_d, _ = scorer.corpus_score(references, hypotheses)
    met, status = meteor_score(references, hypotheses) if meteor else (None, "disabled")
    return CaptionScores(
        bleu1=bleu[0],
        bleu2=bleu[1],
        bleu3=bleu[2],
        bleu4=bleu[3],
        meteor=met,
        rouge_l=rouge,
        cider_d=float(cider_d),
        meteor_status=status,
    )


__all__ = ["CaptionScores", "caption_metrics", "java_available", "meteor_score", "normalise"]
