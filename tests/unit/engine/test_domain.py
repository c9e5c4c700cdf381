"""The in-domain test's maths on made-up features: fitted on one half of the validation points, its
thresholds keep about 1 - 2 × quantile of new in-distribution points and flag points far from them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from service.engine.domain import DomainModel, calibrate, pixel_stats


def images(rng: np.random.Generator, n: int, noisy: bool) -> np.ndarray:
    if noisy:
        return rng.integers(0, 256, (n, 16, 16, 3), dtype=np.uint8)
    flat = np.repeat(np.repeat(rng.integers(0, 256, (n, 4, 4, 3)), 4, axis=1), 4, axis=2)
    return np.clip(flat + rng.integers(-3, 4, flat.shape), 0, 255).astype(np.uint8)


def test_calibrated_thresholds_keep_the_domain_and_flag_what_is_far(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    val = images(rng, 800, noisy=False)
    feats = rng.normal(size=(800, 5, 6))
    model = calibrate(val[:400], feats[:400], val[400:], feats[400:], quantile=0.025)
    fresh_score, fresh_in = model.judge(images(rng, 400, False), rng.normal(size=(400, 5, 6)))
    assert 0.9 <= fresh_in.mean() <= 1.0 and (fresh_score[fresh_in] <= 1).all()
    _, noise_in = model.judge(images(rng, 50, True), rng.normal(size=(50, 5, 6)))
    assert not noise_in.any()  # pixel statistics far off
    _, shifted_in = model.judge(images(rng, 50, False), rng.normal(loc=3.0, size=(50, 5, 6)))
    assert not shifted_in.any()  # encoder features far off
    model.save(tmp_path / "d.npz")
    again = DomainModel.load(tmp_path / "d.npz")
    assert np.array_equal(again.judge(val[:5], feats[:5])[0], model.judge(val[:5], feats[:5])[0])
    assert pixel_stats(val[:2]).shape == (2, 3)
