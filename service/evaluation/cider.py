"""CIDEr-D with document frequencies fixed in advance (from the training references).

pycocoevalcap's ``Cider`` takes its document frequencies (DF) from the very references it scores, so a
single image — or a handful, as in live probes — scores 0 or nonsense. ``CiderD`` keeps the DF table and
the corpus size of the references it was built from and scores any number of images against them.

The definition follows pycocoevalcap's ``CiderScorer`` (Vedantam et al. 2015, CIDEr-D variant):

- n-grams n = 1..4 of the tokenised caption; weights tf · (log(ref_count) − log(max(1, df)));
- per n, cosine similarity between candidate and each reference vector, with the candidate's weights
  clipped by the reference's (``min(hyp, ref) · ref``), times the Gaussian length penalty
  exp(−δ² / 2σ²), σ = 6, where δ is the difference of the *bigram* counts of candidate and reference
  (that is what ``CiderScorer`` counts as length: words − 1 for non-empty captions);
- mean over n, mean over the references, × 10.

With the DF computed from the references being scored (``CiderD.from_references(refs)``) it equals
pycocoevalcap's ``Cider`` exactly. Captions are tokenised with ``service.text.vocabulary.tokenize``.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from service.checks import above, at_least
from service.text.vocabulary import tokenize

FORMAT = "compcap.cider-d/1"
NGram = tuple[str, ...]


def ngram_counts(tokens: Sequence[str], n: int = 4) -> Counter[NGram]:
    """Counts of all 1..n-grams of ``tokens``."""
    counts: Counter[NGram] = Counter()
    for k in range(1, n + 1):
        for i in range(len(tokens) - k + 1):
            counts[tuple(tokens[i : i + k])] += 1
    return counts


class CiderD:
    """CIDEr-D scorer with a fixed DF table.

    ``document_frequency[ngram]`` = number of reference *images* whose references contain ``ngram``
    (an image counts once however many of its references contain it); ``ref_count`` = number of
    reference images the table was computed from (the IDF is log(ref_count / max(1, df)))."""

    def __init__(
        self,
        document_frequency: Mapping[NGram, float],
        ref_count: int,
        n: int = 4,
        sigma: float = 6.0,
    ) -> None:
        at_least(1, ref_count=ref_count, n=n)
        above(0, sigma=sigma)
        self.document_frequency = dict(document_frequency)
        self.ref_count = int(ref_count)
        self.n = n
        self.sigma = float(sigma)
        self._log_ref = math.log(float(self.ref_count))

    # -- construction / persistence ---------------------------------------------------------------

    @classmethod
    def from_references(
        cls,
        references: Mapping[Any, Sequence[str]] | Iterable[Sequence[str]],
        n: int = 4,
        sigma: float = 6.0,
    ) -> CiderD:
        """DF table from reference captions: image id → captions (or an iterable of per-image lists)."""
        groups = references.values() if isinstance(references, Mapping) else references
        df: Counter[NGram] = Counter()
        images = 0
        for refs in groups:
            images += 1
            seen: set[NGram] = set()
            for ref in refs:
                seen.update(ngram_counts(tokenize(ref), n))
            df.update(seen)
        if images == 0:
            raise ValueError("references is empty")
        return cls(df, images, n=n, sigma=sigma)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "n": self.n,
            "sigma": self.sigma,
            "ref_count": self.ref_count,
            "document_frequency": {" ".join(g): c for g, c in sorted(self.document_frequency.items())},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CiderD:
        if data.get("format") != FORMAT:
            raise ValueError(f"not a CIDEr-D table (format {data.get('format')!r}, expected {FORMAT!r})")
        df = {tuple(k.split(" ")): float(v) for k, v in data["document_frequency"].items()}
        return cls(df, int(data["ref_count"]), n=int(data["n"]), sigma=float(data["sigma"]))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json()), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> CiderD:
        return cls.from_json(json.loads(Path(path).read_text(encoding="utf-8")))

    # -- scoring ----------------------------------------------------------------------------------

    def _vector(self, tokens: Sequence[str]) -> tuple[list[dict[NGram, float]], list[float], int]:
        vec: list[dict[NGram, float]] = [{} for _ in range(self.n)]
        norm = [0.0] * self.n
        length = 0
        for gram, tf in ngram_counts(tokens, self.n).items():
            k = len(gram) - 1
            weight = float(tf) * (self._log_ref - math.log(max(1.0, self.document_frequency.get(gram, 0.0))))
            vec[k][gram] = weight
            norm[k] += weight * weight
            if k == 1:
                length += tf
        return vec, [math.sqrt(x) for x in norm], length

    def _sim(
        self,
        hyp: tuple[list[dict[NGram, float]], list[float], int],
        ref: tuple[list[dict[NGram, float]], list[float], int],
    ) -> float:
        vec_h, norm_h, len_h = hyp
        vec_r, norm_r, len_r = ref
        delta = float(len_h - len_r)
        penalty = math.exp(-(delta**2) / (2 * self.sigma**2))
        total = 0.0
        for k in range(self.n):
            ref_k = vec_r[k]
            val = 0.0
            for gram, w in vec_h[k].items():
                r = ref_k.get(gram, 0.0)
                val += min(w, r) * r
            if norm_h[k] != 0 and norm_r[k] != 0:
                val /= norm_h[k] * norm_r[k]
            total += val * penalty
        return total / self.n

    def score(self, candidate: str, references: Sequence[str]) -> float:
        """CIDEr-D of one candidate caption against its image's references (raw strings)."""
        if not references:
            raise ValueError("references is empty")
        hyp = self._vector(tokenize(candidate))
        sims = [self._sim(hyp, self._vector(tokenize(r))) for r in references]
        return 10.0 * sum(sims) / len(sims)

    def score_many(self, candidates: Sequence[str], references: Sequence[str]) -> list[float]:
        """CIDEr-D of several candidates for one image (reference vectors computed once)."""
        if not references:
            raise ValueError("references is empty")
        refs = [self._vector(tokenize(r)) for r in references]
        out = []
        for cand in candidates:
            hyp = self._vector(tokenize(cand))
            out.append(10.0 * sum(self._sim(hyp, r) for r in refs) / len(refs))
        return out

    def corpus_score(
        self, references: Mapping[Any, Sequence[str]], hypotheses: Mapping[Any, str]
    ) -> tuple[float, dict[Any, float]]:
        """Mean CIDEr-D over images and the per-image scores. Both maps must have the same keys."""
        if set(references) != set(hypotheses):
            raise ValueError("references and hypotheses must cover the same image ids")
        if not hypotheses:
            raise ValueError("hypotheses is empty")
        per = {i: self.score(hypotheses[i], references[i]) for i in hypotheses}
        return sum(per.values()) / len(per), per


__all__ = ["CiderD", "ngram_counts"]
