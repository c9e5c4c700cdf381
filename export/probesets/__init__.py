"""Probe sets: the images the live probes decode, written into the model repository as data
(``<repo>/probes/<name>/``, read by ``service.probesets``; the format is documented there).

* ``sceneworld`` — from a SceneWorld world of its own: seed ``probe_seed(seed)`` = training seed +
  ``PROBE_SEED_OFFSET``, never the training world (seed), the build's test world (seed + 7919) or the
  zoo's evaluation world (``compcap_lab.pipeline.zoo.EVAL_SEED``). Written by ``compcap-lab build``,
  ``compcap-lab models`` and ``compcap probesets --repo`` (an existing repository, no retraining).
* ``coco`` — from any COCO-format folder through the split code of ``compcap-lab splits``
  (``compcap probeset --data DIR --kind K --out DIR``).
* ``counterfactual`` — minimal pairs for the default captioner's held-out pairs (a seen-pair scene and
  the same scene with the held-out value), written on demand only (``compcap probesets --kind
  counterfactual``), never by a build.
* ``tables`` — what both share (length terciles, the substitution table, the systematicity splits);
  ``write`` — the one writer of the on-disk format, for any registered format (``service.probesets``).

``sceneworld`` and ``coco`` choose a set's images with one selector per format, in a table keyed by the
format's name; a probe kind with a format of its own writes its sets with ``write.write_probe_set``.
"""

from __future__ import annotations

from service.probesets.builtin import BUILTIN

PROBE_SEED_OFFSET = 104729  # the 10000th prime; sceneworld.dataset.TEST_SEED_OFFSET is 7919 (the 1000th)
ZOO_EVAL_SEED = 20270313  # compcap_lab.pipeline.zoo.EVAL_SEED (not imported here: that module imports torch)
COUNTERFACTUAL = "counterfactual"  # written on demand only (export.probesets.counterfactual)
# the formats a build writes (each set named after its kind): the built-in ones but counterfactual
KINDS = tuple(f.name for f in BUILTIN if f.name != COUNTERFACTUAL)


def probe_seed(seed: int) -> int:
    """The probe world's seed for a repository trained on world ``seed``."""
    out = seed + PROBE_SEED_OFFSET
    if out == ZOO_EVAL_SEED:
        raise ValueError(f"probe world seed {out} would be the zoo's evaluation world")
    return out
