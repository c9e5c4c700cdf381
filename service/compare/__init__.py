"""Model comparison by maximum discrepancy (seed 003), a feature of the gateway (``install``): NGSM,
dominance ranking, shadow comparison."""

from service.compare.feature import install

__all__ = ["install"]
