"""The decoding options of an evaluation's runs, shared by the in-process and the remote
(``compcap-lab evaluate --url``) paths (which runs: ``export.packaging.runs``)."""

from __future__ import annotations

from typing import Any


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


__all__ = ["run_options"]
