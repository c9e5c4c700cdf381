"""Model comparison by maximum discrepancy (seed 003): NGSM, dominance ranking, shadow comparison."""
