"""The clients people already have: the real ``huggingface_hub`` package's
``InferenceClient(model=<gateway URL>).image_to_text(...)`` against a real ``compcap serve`` gets
CompCap's caption — the multipart caption of the same image with one returned sequence; its task's
JSON form maps generation parameters onto CompCap's options and refuses the others by name."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

pytestmark = pytest.mark.integration


def png(seed: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (96, 96, 3), dtype=np.uint8)).save(
        buf, "PNG"
    )
    return buf.getvalue()


def multipart_caption(server: str, image: bytes, **query: str) -> list[str]:
    r = httpx.post(
        f"{server}/v1/captions", params=query, files={"image": ("x.png", image, "image/png")}, timeout=60
    )
    assert r.status_code == 200, r.text
    return [c["text"] for c in r.json()["results"][0]["captions"]]


def test_inference_client_image_to_text_is_compcaps_caption(server: str, tmp_path: Path) -> None:
    from huggingface_hub import InferenceClient

    image = png(1)
    path = tmp_path / "photo.png"
    path.write_bytes(image)
    client = InferenceClient(model=server)
    want = multipart_caption(server, image, n_best="1")
    assert client.image_to_text(image).generated_text == want[0]
    assert client.image_to_text(str(path)).generated_text == want[0]


def test_the_task_json_maps_generation_parameters(server: str) -> None:
    image = png(2)
    body = {
        "inputs": base64.b64encode(image).decode(),
        "parameters": {
            "generation_parameters": {"num_beams": 3, "max_new_tokens": 8, "num_return_sequences": 2}
        },
    }
    r = httpx.post(f"{server}/", json=body, timeout=60)
    assert r.status_code == 200, r.text
    got = [x["generated_text"] for x in r.json()]
    assert got == multipart_caption(server, image, beam_size="3", max_length="8", n_best="2")
    diverse = {
        "inputs": body["inputs"],
        "parameters": {"num_beams": 4, "num_beam_groups": 2, "min_new_tokens": 3},
    }
    r = httpx.post(f"{server}/", json=diverse, timeout=60)
    assert r.status_code == 200 and len(r.json()) == 1, r.text
    refused = httpx.post(
        f"{server}/", json={"inputs": body["inputs"], "parameters": {"do_sample": True}}, timeout=60
    )
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "unsupported_parameter" and "do_sample" in refused.text
    junk = httpx.post(
        f"{server}/", content=b"not an image", headers={"content-type": "image/png"}, timeout=60
    )
    assert junk.status_code == 400 and junk.json()["error"]["code"] == "not_an_image"
