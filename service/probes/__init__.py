"""Compositional probes (seeds 000 / 001), a client of the engine: ``substitution`` (the
``synonym_substitution`` hook's word tables and its original-vs-substituted pairing)."""
