"""The demo page on an imported subword captioner (a tiny random ViT + GPT-2 made in the test, imported with
the network refused into a copy of the tiny repository), in headless Chromium against a real ``compcap
serve``: "Explain words" sends the caption's token ids as the caption answer has them, so the explanation
succeeds with one entry per token where re-sending the caption's text may tokenize to other (and more)
tokens than the captioner decoded (``422 invalid_caption: caption has more than 19 tokens``)."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser.conftest import Watch
from tests.browser.test_demo_page import api_caption, assert_clean, open_demo
from tests.integration.conftest import free_port, serving

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "service" / "web" / "static" / "samples"
NAME = "vitgpt2"


@pytest.fixture(scope="module")
def hf_server(tiny_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A ready ``compcap serve`` on a copy of ``tiny_repo`` with a tiny ViT + GPT-2 imported as
    ``vitgpt2`` (no torch programs: attention needs none)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from compcap_lab.snapshots import vit_gpt2
    from tests.hf_repo import import_offline

    work = tmp_path_factory.mktemp("hf-demo")
    repo = work / "model_repo"
    shutil.copytree(tiny_repo, repo)
    import_offline(vit_gpt2.build(work / "vit-gpt2", image_size=64), NAME, repo)
    port = free_port()
    cmd = [sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--repo", str(repo)]
    env = {**os.environ, "COMPCAP_INTRA_OP_THREADS": "1", "COMPCAP_STATE_URL": ""}
    with serving(cmd, env, port, work / "serve.log") as url:
        yield url


def explain_text(url: str, image: bytes, caption: str) -> httpx.Response:
    body = {"image": base64.b64encode(image).decode(), "model": NAME, "caption": caption, "overlays": False}
    return httpx.post(f"{url}/v1/explain", json=body, timeout=120.0, trust_env=False)


@pytest.mark.parametrize("sample", [0, 1, 2])
def test_explain_works_from_the_page_on_an_imported_subword_captioner(
    hf_server: str, browser_page: tuple[Any, Watch], sample: int
) -> None:
    from playwright.sync_api import expect

    page, watch = browser_page
    open_demo(page, hf_server)
    page.select_option("#model", NAME)
    expect(page.locator("#explain_method")).to_have_value("attention")
    page.locator("#samples button").nth(sample).click()
    expect(page.locator("#result")).to_be_visible()
    image = (SAMPLES / f"example_{sample}.png").read_bytes()
    answer = api_caption(hf_server, image, f"example_{sample}.png", model=NAME)
    assert answer.status_code == 200, answer.text
    best = answer.json()["results"][0]["captions"][0]
    expect(page.locator("#caption")).to_have_text(best["text"] or "(empty caption)")
    if not best["tokens"]:
        pytest.skip("the random captioner gave an empty caption for this sample")

    with page.expect_request(re.compile(r".*/v1/explain$")) as sent:
        page.click("#explain-submit")
    status = page.locator("#explain-status")
    expect(status).to_have_text(f"Explained {len(best['tokens'])} words with attention.")
    expect(page.locator("#explain-error")).to_be_hidden()
    request = json.loads(sent.value.post_data or "{}")
    assert request["tokens"] == best["tokens"] and request["model"] == NAME and "caption" not in request
    expect(page.locator("#word-maps figure")).to_have_count(len(best["tokens"]))
    # the sample's scene graph went with it: the grounding line is there (a score, or why there is none)
    assert request["scene_graph"]["objects"]
    expect(page.locator("#grounding")).to_be_visible()

    # the text the page used to send: explained as its own tokenization, which need not be the caption's
    by_text = explain_text(hf_server, image, best["text"])
    if by_text.status_code == 200:
        assert by_text.json()["source"] == "client"
    else:
        assert by_text.status_code == 422 and by_text.json()["error"]["code"] == "invalid_caption", (
            by_text.text
        )
    assert_clean(watch)
