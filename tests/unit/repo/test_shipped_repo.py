"""The default model repository shipped in the tree (``model_repo/``, what ``make run`` serves on a
fresh clone without building): its manifest is the code's current contract, every model file is there
and its ONNX graph takes and gives the tensors the manifest and the runner name, and it captions."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from fastapi.testclient import TestClient

from service.gateway.app import create_app
from service.manifest import FORMAT_VERSION, MANIFEST_NAME, ROLE_OPTIONAL_INPUTS, ROLE_TENSORS, load_manifest
from service.settings import Settings
from service.text.vocabulary import Vocabulary
from tests.api.conftest import wait_ready
from tests.api.test_captions_api import png

REPO = Path(os.environ.get("COMPCAP_SHIPPED_REPO", Path(__file__).resolve().parents[3] / "model_repo"))
ORT_DTYPES = {"UINT8": "tensor(uint8)", "FP32": "tensor(float)", "INT64": "tensor(int64)"}

pytestmark = pytest.mark.skipif(
    not (REPO / MANIFEST_NAME).is_file(), reason="no shipped model_repo/manifest.json in this checkout"
)


def test_the_manifest_is_the_current_contract() -> None:
    raw = json.loads((REPO / MANIFEST_NAME).read_text())
    manifest = load_manifest(REPO)  # the pydantic contract: every reference resolves
    assert raw["format_version"] == FORMAT_VERSION == manifest.format_version
    assert manifest.preset == "default" and manifest.default_captioner == "butr"
    assert {c.name for c in manifest.captioners} == {"butr", "butd"}
    assert {r.name for r in manifest.rankers} == {"butr", "vsepp"}
    vocab = Vocabulary.load(REPO / manifest.vocabulary.file)
    assert len(vocab) == manifest.vocabulary.size
    # probe sets (81 MB) are not shipped: `make probesets` adds them, and the manifest must not promise them
    for entry in manifest.probe_sets:
        assert (REPO / entry.path / "probe.json").is_file(), f"manifest lists missing probe set {entry.name}"


def test_every_model_matches_its_manifest_entry_and_role() -> None:
    manifest = load_manifest(REPO)
    for entry in manifest.models:
        path = entry.path(REPO)
        assert path.is_file(), f"{path} missing"
        assert (REPO / entry.name / "config.pbtxt").is_file(), f"{entry.name}: no Triton config"
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        got_in = {t.name: t for t in session.get_inputs()}
        got_out = {t.name: t for t in session.get_outputs()}
        assert set(got_in) == {t.name for t in entry.inputs}, entry.name
        assert set(got_out) == {t.name for t in entry.outputs}, entry.name
        for spec in [*entry.inputs, *entry.outputs]:
            actual = got_in.get(spec.name) or got_out[spec.name]
            assert actual.type == ORT_DTYPES[spec.dtype], f"{entry.name}.{spec.name}: {actual.type}"
            batch = 1 if entry.max_batch_size > 0 else 0
            assert len(actual.shape) == len(spec.dims) + batch, f"{entry.name}.{spec.name}: {actual.shape}"
        inputs, outputs = ROLE_TENSORS[entry.role]
        optional = set(ROLE_OPTIONAL_INPUTS.get(entry.role, ()))
        assert set(inputs) <= set(got_in) <= set(inputs) | optional, (
            f"{entry.name}: role {entry.role} takes {inputs}"
        )
        if entry.role == "captioner_step":  # the shipped steps gather their decoder states (contract v3)
            assert {"state_new", "state_index"} <= set(got_in), entry.name
        assert set(outputs) <= set(got_out), f"{entry.name}: role {entry.role} gives {outputs}"


def test_the_manifest_names_the_torch_programs_the_build_writes() -> None:
    """The gradient explanations run on them (``service.explain.gradients``). The build writes them beside
    the ONNX files; git does not carry them (16 MB), so on a fresh clone the gradient methods answer 501
    ``programs_missing`` until ``make build``."""
    manifest = load_manifest(REPO)
    rankers = (m for r in manifest.rankers for m in (r.image, r.text))  # the torch baseline's ranker
    for name in ["visual_encoder", *(m for c in manifest.captioners for m in (c.init, c.step)), *rankers]:
        assert manifest.model(name).program == f"torch/{name}.pt2", name


def test_the_shipped_repository_captions() -> None:
    settings = Settings(repo=REPO, intra_op_threads=1, state_url="")
    with TestClient(create_app(settings)) as client:
        wait_ready(client)
        response = client.post("/v1/captions", files=[("image", ("a.png", png(5), "image/png"))])
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == "butr" and body["results"][0]["caption"]
    assert all(np.isfinite(c["logprob"]) for c in body["results"][0]["captions"])
