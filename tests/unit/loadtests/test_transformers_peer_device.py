"""The transformers peer of ``compcap bench --baseline transformers`` runs where CompCap's gateway runs
and, on CUDA, in its precision: CUDA where torch has it (auto), FP16 there when CompCap serves fp16,
FP32 on a CPU (torch's CPU FP16 is not what a user would run)."""

from __future__ import annotations

import pytest
import torch

from loadtests.peers.transformers_baseline import TransformersCaptioner, peer_device


def test_the_peer_follows_the_gateways_device_and_precision() -> None:
    auto = "cuda" if torch.cuda.is_available() else "cpu"
    assert peer_device("auto", "auto", "fp32") == (auto, "fp32")
    assert peer_device("cpu", "auto", "fp16") == ("cpu", "fp32")
    assert peer_device("cuda", "auto", "fp16") == ("cuda", "fp16")
    assert peer_device("cuda", "auto", "int8") == ("cuda", "fp32")
    assert peer_device("cpu", "fp16", "fp32") == ("cpu", "fp16"), "an explicit dtype is kept"


def test_a_bad_dtype_is_refused() -> None:
    with pytest.raises(ValueError, match="dtype must be fp32 or fp16"):
        TransformersCaptioner.__init__(object.__new__(TransformersCaptioner), None, "cpu", "bf16")  # type: ignore[arg-type]
