"""Compositional probes (seeds 000 / 001), a client of the engine and a feature of the gateway
(``install``): live probe jobs and their schedule, and ``substitution`` (the ``synonym_substitution``
hook's word tables and its original-vs-substituted pairing)."""

from service.probes.feature import install

__all__ = ["install"]
