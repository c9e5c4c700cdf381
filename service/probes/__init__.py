"""Compositional probes (seeds 000 / 001), a client of the engine and a feature of the gateway
(``feature.install``): live probe jobs and their schedule, and ``substitution`` (the
``synonym_substitution`` hook's word tables and its original-vs-substituted pairing). The package
imports nothing itself, so offline code that uses its pure parts does not load the HTTP layer."""
