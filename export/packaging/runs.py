"""The runs a repository offers: which (captioner, ranker) pairs decode, from a repository's manifest or a
gateway's ``GET /v1/models`` — each captioner plain, then re-ranked by its own ranker or by vsepp. The
quantization gate decodes them; the lab's evaluations too."""

from __future__ import annotations

from dataclasses import dataclass

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


__all__ = ["FALLBACK_RANKER", "Catalogue", "runs_for"]
