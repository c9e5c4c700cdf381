"""The runs of an evaluation and their decoding options, shared by the in-process and the remote
(``compcap-lab evaluate --url``) paths: which (captioner, ranker) pairs run, from a repository's manifest or a
gateway's ``GET /v1/models``, and the search options each decodes with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from service.manifest import Manifest

FALLBACK_RANKER = "vsepp"


@dataclass(frozen=True)
class Catalogue:
    """What the runs are made of, from a repository's manifest or a gateway's ``GET /v1/models``:
    per captioner (name, its own ranker or ``None``, the split it was trained on), and the rankers."""

    captioners: tuple[tuple[str, str | None, str], ...]
    rankers: frozenset[str]

    @classmethod
    def of(cls, manifest: Manifest) -> Catalogue:
        return cls(
            tuple((c.name, c.ranker, c.training.split) for c in manifest.captioners),
            frozenset(r.name for r in manifest.rankers),
        )

    def trained_on(self, captioner: str) -> str:
        return next(split for name, _, split in self.captioners if name == captioner)

    def runs(self, fallback: bool = True) -> list[tuple[str, str | None]]:
        """(captioner, ranker) runs: each captioner plain, then re-ranked by its own ranker or
        (``fallback``) by vsepp."""
        runs: list[tuple[str, str | None]] = []
        for name, ranker, _ in self.captioners:
            runs.append((name, None))
            if ranker is not None:
                runs.append((name, ranker))
            elif fallback and FALLBACK_RANKER in self.rankers:
                runs.append((name, FALLBACK_RANKER))
        return runs


def runs_for(manifest: Manifest, fallback: bool = True) -> list[tuple[str, str | None]]:
    """(captioner, ranker) runs: each captioner plain, then re-ranked by its own ranker or (``fallback``)
    by vsepp."""
    return Catalogue.of(manifest).runs(fallback)


def run_options(
    ranker: str | None, beam_size: int, rerank_beam_size: int, rerank_weight: float
) -> dict[str, Any]:
    """The decoding options of one run, the same in process and over HTTP: top ``beam_size`` captions
    per image in final order. A re-ranked run decodes ``rerank_beam_size`` beams and re-ranks all of
    them (Nikolaus et al., 2019, §5.4: B candidates, then the ranker's top K; the engine does this for
    ``n_best < beam_size``), so that re-ranking can change which K captions Recall@K sees."""
    return {
        "beam_size": rerank_beam_size if ranker else beam_size,
        "n_best": beam_size,
        "rerank": ranker or False,
        "rerank_weight": rerank_weight if ranker else 0.0,
    }


__all__ = ["FALLBACK_RANKER", "Catalogue", "run_options", "runs_for"]
