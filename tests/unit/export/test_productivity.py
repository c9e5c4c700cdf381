"""The pure parts of the productivity test (Pantazopoulos et al., 2022, §4.2): the visual encoder rebuilt from
its ONNX graph, reference lengths, tail-minus-base gaps and the table."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from compcap_lab.studies.productivity import (
    encoder_from_onnx,
    findings,
    gaps,
    onnx_regions_diff,
    reference_asl,
    table,
)
from export.models.visual_encoder import VisualEncoder
from export.packaging.onnx import GraphSpec, export_graph
from export.presets import get_preset


def test_encoder_rebuilt_from_onnx_gives_the_same_regions(tmp_path: Path) -> None:
    p = get_preset("tiny")
    torch.manual_seed(0)
    encoder = VisualEncoder(p.encoder_channels, p.region_dim, p.grid, p.image_size)
    with torch.no_grad():  # non-trivial BatchNorm statistics, so that folding matters
        for m in encoder.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                assert m.running_mean is not None and m.running_var is not None
                m.running_mean.normal_()
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_()
    encoder.eval()
    images = np.random.default_rng(0).integers(0, 256, (3, p.image_size, p.image_size, 3), dtype=np.uint8)
    path = tmp_path / "visual_encoder" / "1" / "model.onnx"
    example = torch.from_numpy(images)
    export_graph(encoder, encoder.forward, GraphSpec({"image": example}, ["regions"], {}), path)
    encoder.eval()  # the export leaves its wrapper, and so the encoder, in training mode
    rebuilt = encoder_from_onnx(path, p)
    with torch.no_grad():
        assert torch.allclose(rebuilt(example), encoder(example), atol=1e-4)
    assert onnx_regions_diff(rebuilt, path, images) < 1e-4


def test_reference_asl_pools_every_reference() -> None:
    captions = {1: ["a red car", "a car"], 2: ["a big blue dog runs"], 3: ["x"]}
    assert reference_asl(captions, [1, 2]) == (3 + 2 + 5) / 3
    assert reference_asl(captions, []) == 0.0


def test_gaps_and_table() -> None:
    rows = [
        {"model": "A", "set": "test_rich", "images": 2, "bleu4": 0.2, "meteor": None, "cider_d": 0.5},
        {"model": "A", "set": "test_base", "images": 2, "bleu4": 0.3, "meteor": None, "cider_d": 0.9},
        {"model": "B", "set": "test_rich", "images": 2, "bleu4": 0.4, "meteor": 0.2, "cider_d": 1.0},
    ]
    g = gaps(rows, "test_rich")
    assert set(g) == {"A"}  # B has no Test Base row
    assert abs((g["A"]["cider_d"] or 0) + 0.4) < 1e-9 and g["A"]["meteor"] is None
    lines = table({"rows": rows})
    assert lines[2].startswith("| A | Test Rich | 2 | – | 20.00 | – |")
    assert len(lines) == 2 + len(rows)


def test_findings_read_the_drops_and_lengths() -> None:
    def row(model: str, set_name: str, cider: float, asl: float, ref: float) -> dict[str, object]:
        return {
            "model": model,
            "set": set_name,
            "bleu4": 0.3,
            "cider_d": cider,
            "asl": asl,
            "reference_asl": ref,
        }

    rows = [
        row("BUTD (no tail)", "test_rich", 0.6, 7.0, 11.0),
        row("BUTD (no tail)", "test_base", 1.1, 6.4, 7.5),
        row("FULL BUTD", "test_rich", 0.7, 8.6, 11.0),
        row("FULL BUTD", "test_base", 1.2, 7.3, 7.5),
    ]
    text = " ".join(findings({"rows": rows, "tail": "test_rich"}))
    assert "loses 50.0 CIDEr-D (45%)" in text and "+10.0 CIDEr-D" in text
    assert "neither model produces captions as long" in text and "stays further below" in text
    assert "specific to the unseen tail is the difference, +0.0 CIDEr-D" in text
    assert findings({"rows": rows[:2], "tail": "test_rich"}) == []
