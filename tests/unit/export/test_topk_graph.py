"""``export.packaging.topk.add_top_k`` on a real step graph (the tiny repository's BUTR step): the graph
with the added input and outputs keeps its own outputs bit for bit, and its top k and end-token log-probs are
those of its own log-probs, for any k; asked for its top-k outputs alone, onnxruntime returns only
those. A graph without ``logprobs``, or one that has them already, is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from export.packaging.topk import add_top_k
from service.manifest import load_manifest

EOS = 2


def step_feed(repo: Path, rows: int = 6) -> dict[str, np.ndarray]:
    entry = load_manifest(repo).model("butr_step")
    dims = {t.name: t.dims for t in entry.inputs}
    m, dm = dims["memory"][1:]
    rng = np.random.default_rng(3)
    return {
        "memory": rng.standard_normal((2, m, dm)).astype(np.float32),
        "image_index": np.array([0, 1] * (rows // 2), dtype=np.int64),
        "tokens": rng.integers(4, 20, (rows, 1)).astype(np.int64),
        "length": np.ones(rows, dtype=np.int64),
        "state": np.zeros((0, dims["state"][1]), np.float32),  # contract v3: every row's state new
        "state_new": rng.standard_normal((rows, dims["state"][1])).astype(np.float32),
        "state_index": np.arange(rows, dtype=np.int64),
    }


def test_the_top_k_outputs_are_those_of_its_log_probs(tiny_repo: Path) -> None:
    path = tiny_repo / "butr_step" / "1" / "model.onnx"
    plain = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    topped = ort.InferenceSession(
        add_top_k(onnx.load(str(path)), EOS).SerializeToString(), providers=["CPUExecutionProvider"]
    )
    feed = step_feed(tiny_repo)
    want = dict(zip([o.name for o in plain.get_outputs()], plain.run(None, feed), strict=True))
    for k in (1, 5, 17):
        names = [o.name for o in topped.get_outputs()]
        got = dict(zip(names, topped.run(None, {**feed, "top_k": np.array([k], np.int64)}), strict=True))
        for name, value in want.items():
            assert np.array_equal(got[name], value), name
        logprobs = want["logprobs"]
        assert got["top_logprobs"].shape == got["top_tokens"].shape == (6, k)
        assert np.array_equal(got["top_logprobs"], np.take_along_axis(logprobs, got["top_tokens"], axis=1))
        kth = -np.sort(-logprobs, axis=1)[:, k - 1]
        assert np.all(got["top_logprobs"].min(axis=1) >= kth)
        assert np.array_equal(got["eos_logprob"], logprobs[:, EOS])
    only = topped.run(["top_tokens", "eos_logprob"], {**feed, "top_k": np.array([3], np.int64)})
    assert [a.shape for a in only] == [(6, 3), (6,)]


def test_a_graph_it_cannot_extend_is_refused(tiny_repo: Path) -> None:
    step = onnx.load(str(tiny_repo / "butr_step" / "1" / "model.onnx"))
    with pytest.raises(ValueError, match="already returns its top k"):
        add_top_k(add_top_k(step, EOS), EOS)
    encoder = onnx.load(str(tiny_repo / "visual_encoder" / "1" / "model.onnx"))
    with pytest.raises(ValueError, match="no logprobs output"):
        add_top_k(encoder, EOS)
