"""Model comparison by maximum discrepancy (Wan et al., 2022), a feature of the gateway (``feature.install``):
NGSM, dominance ranking, shadow comparison. The package imports nothing itself, so offline studies
that use its pure parts do not load the HTTP layer."""
