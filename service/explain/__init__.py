"""Per-word explanations of captions (Cornia et al., 2022), a feature of the gateway (``feature.install``):
attribution maps, the object under each word, grounding scores. Torch only in ``gradients`` (the
``explain`` extra). The package imports nothing itself."""
