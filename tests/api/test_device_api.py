"""Every surface says where the models run: ``GET /v1/models`` (``device`` and each model's),
``/healthz`` and the ``compcap_model_device_info`` series — from the backend's sessions, not from the
setting (here the CPU build of onnxruntime: auto serves on the CPU)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from service.manifest import Manifest
from service.metrics import MODEL_DEVICE


def test_models_health_and_metrics_name_the_device(client: TestClient, manifest: Manifest) -> None:
    backend = client.app.state.runtime.backend  # type: ignore[attr-defined]
    models = client.get("/v1/models").json()
    assert models["devices"] == backend.devices
    assert set(models["devices"]) == set(manifest.served_models())
    assert models["device"] == "cpu" and set(models["devices"].values()) == {"cpu"}
    assert client.get("/healthz").json() == {"status": "ok", "device": "cpu"}
    metrics = client.get("/metrics").text
    for name, where in models["devices"].items():
        assert (
            f'{MODEL_DEVICE}{{device="{where}",model="{name}",provider="CPUExecutionProvider"}} 1.0'
            in metrics
        )
