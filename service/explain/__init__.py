"""Per-word explanations of captions (seed 002), a feature of the gateway (``install``): attribution
maps, the object under each word, grounding scores. Torch only in ``gradients`` (the ``explain`` extra)."""

from service.explain.feature import install

__all__ = ["install"]
