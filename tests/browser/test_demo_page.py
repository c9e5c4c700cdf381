"""The web demo at ``/`` in headless Chromium against a real ``compcap serve`` on the tiny repository,
every request to another host aborted: the page loads with no console error and no request leaving the
machine, its controls come from ``/v1/models`` and ``/v1/hooks``, an uploaded PNG gets the caption the
API gives for it with the n-best table and timings, a file that is no image and an out-of-range option
show the API's own error message, "Explain words" shows one heat map per word of the caption shown
(``POST /v1/explain``, the page's caption tokens and options) and the API's refusal of a bad option, the probe
jobs are listed with their figures, and with ``COMPCAP_CAPTIONS_REQUIRE_KEY`` set the API-key field
sends the bearer token (401 and 403 shown).

The screenshot for the README goes to ``docs/demo.png`` with ``COMPCAP_UPDATE_SCREENSHOT=1`` (else to
the test's tmp folder). The one in ``docs/`` is taken on a default-preset repository
(``COMPCAP_TEST_REPO=<a default-preset model_repo>``) so that its caption reads like one."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from tests.browser.conftest import Watch, is_local
from tests.integration.conftest import free_port, serving

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = ROOT / "docs" / "demo.png"
TEST_WORLD_SEED = 7919  # the held-out test world of seed 0 (compcap_lab.pipeline.build.TEST_SEED_OFFSET)


def sceneworld_png(path: Path, size: int) -> Path:
    """One SceneWorld scene the models never trained on, written as a PNG with PIL."""
    from sceneworld.dataset import generate_one

    image, _, _ = generate_one(0, TEST_WORLD_SEED, size)
    Image.fromarray(image).save(path, format="PNG")
    return path


def api_get(url: str, path: str) -> Any:
    response = httpx.get(f"{url}{path}", timeout=30.0, trust_env=False)
    response.raise_for_status()
    return response.json()


def api_caption(url: str, data: bytes, filename: str, **options: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/captions",
        files={"image": (filename, data, "application/octet-stream")},
        data=options,
        timeout=60.0,
        trust_env=False,
    )


def open_demo(page: Any, url: str) -> None:
    """Load ``/`` and wait until the controls are filled from the API."""
    from playwright.sync_api import expect

    page.goto(f"{url}/", wait_until="load")
    expect(page.locator("#ready")).to_have_text(re.compile(r"^ready"))
    expect(page.locator("#model option").first).not_to_have_text("loading…")
    expect(page.locator("#hooks input[type=checkbox]").first).to_be_attached()
    page.wait_for_load_state("networkidle")


def assert_clean(watch: Watch, allowed_console: re.Pattern[str] | None = None) -> None:
    assert watch.blocked == [], f"the page asked for other hosts: {watch.blocked}"
    assert watch.page_errors == [], watch.page_errors
    errors = [e for e in watch.console_errors if not (allowed_console and allowed_console.search(e))]
    assert errors == [], errors


def test_page_is_served_offline_and_outside_the_schema(demo_server: str) -> None:
    page = httpx.get(f"{demo_server}/", trust_env=False)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp
    html = page.text
    assets = re.findall(r'(?:src|href)="([^"#]+)"', html)
    assert assets, html[:500]
    for asset in assets:
        assert "//" not in asset, f"{asset}: the page loads everything from the app"
        assert httpx.get(f"{demo_server}/{asset}", trust_env=False).status_code == 200, asset
    static = ROOT / "service" / "web" / "static"
    scripts = sorted(p.name for p in static.glob("*.js"))
    assert "app.js" in scripts and len(scripts) > 1, scripts  # app.js imports the others (ES modules)
    for name in [*scripts, "style.css"]:
        response = httpx.get(f"{demo_server}/demo-static/{name}", trust_env=False)
        assert response.status_code == 200, name
        assert not re.search(r"https?://", response.text), f"{name} names another origin"
        for module in re.findall(r'from "\./([^"]+)"', response.text):
            assert module in scripts, f"{name} imports {module}, which the page does not ship"
    schema = api_get(demo_server, "/openapi.json")
    assert "get" not in schema["paths"].get("/", {})  # the page is not in it (POST / is the HF task)
    assert not any(p.startswith("/demo-static") for p in schema["paths"])


def test_page_loads_with_controls_from_the_api(demo_server: str, browser_page: tuple[Any, Watch]) -> None:
    from playwright.sync_api import expect

    page, watch = browser_page
    open_demo(page, demo_server)
    models = api_get(demo_server, "/v1/models")
    hooks = api_get(demo_server, "/v1/hooks")["hooks"]

    values = page.locator("#model option").evaluate_all("os => os.map(o => o.value)")
    assert values == [c["name"] for c in models["captioners"]]
    expect(page.locator("#model")).to_have_value(models["default_captioner"])
    rerank = page.locator("#rerank option").evaluate_all("os => os.map(o => o.value)")
    assert rerank == ["", "false", *[r["name"] for r in models["rankers"]]]
    names = page.locator("#hooks input[type=checkbox]").evaluate_all("cs => cs.map(c => c.dataset.hook)")
    assert names == [h["name"] for h in hooks]
    for link in ("docs", "metrics", "v1/probes"):
        assert page.locator(f'a[href="{link}"]').count() == 1, link
    assert_clean(watch)


def test_upload_shows_the_caption_and_the_n_best_list(
    demo_server: str, browser_page: tuple[Any, Watch], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    page, watch = browser_page
    size = api_get(demo_server, "/v1/models")["image"]["height"]
    image = sceneworld_png(tmp_path / "scene.png", size)
    open_demo(page, demo_server)

    page.set_input_files("#file", str(image))
    expect(page.locator("#preview")).to_be_visible()
    page.fill("#beam_size", "4")
    page.check('#hooks input[data-hook="no_repeat_ngram"]')
    page.fill('#hooks input[data-param="n"]', "2")
    page.click("#submit")

    expect(page.locator("#result")).to_be_visible()
    want = api_caption(
        demo_server,
        image.read_bytes(),
        image.name,
        beam_size="4",
        hooks=json.dumps([{"name": "no_repeat_ngram", "params": {"n": 2}}]),
    )
    assert want.status_code == 200, want.text
    best = want.json()["results"][0]
    expect(page.locator("#caption")).to_have_text(best["caption"])
    assert best["caption"].strip()
    rows = page.locator("#nbest tbody tr")
    expect(rows).to_have_count(len(best["captions"]))
    assert [t.strip() for t in rows.locator("td.text").all_inner_texts()] == [
        c["text"] for c in best["captions"]
    ]
    first = rows.first.locator("td").all_inner_texts()
    assert float(first[2]) == pytest.approx(best["captions"][0]["logprob"], abs=0.006)
    if best["captions"][0]["ranker_score"] is not None:
        assert float(first[4]) == pytest.approx(best["captions"][0]["ranker_score"], abs=6e-4)
    summary = page.locator("#request-summary").inner_text()
    assert "beam 4" in summary and "hooks: no_repeat_ngram" in summary
    expect(page.locator("#timings dt")).to_have_count(6)
    expect(page.locator("#error")).to_be_hidden()

    page.wait_for_load_state("networkidle")
    shot = SCREENSHOT if os.environ.get("COMPCAP_UPDATE_SCREENSHOT") == "1" else tmp_path / "demo.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    assert_clean(watch)


def test_errors_show_the_api_message(
    demo_server: str, browser_page: tuple[Any, Watch], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    page, watch = browser_page
    open_demo(page, demo_server)
    error = page.locator("#error")

    notes = b"these are notes, not an image\n"
    page.set_input_files("#file", {"name": "notes.txt", "mimeType": "text/plain", "buffer": notes})
    page.click("#submit")
    refusal = api_caption(demo_server, notes, "notes.txt").json()["error"]
    expect(error).to_be_visible()
    expect(error).to_contain_text(refusal["message"])
    expect(error).to_contain_text(refusal["code"])
    expect(page.locator("#result")).to_be_hidden()

    png = io.BytesIO()
    Image.new("RGB", (32, 32), (40, 120, 200)).save(png, format="PNG")
    page.set_input_files("#file", {"name": "blue.png", "mimeType": "image/png", "buffer": png.getvalue()})
    page.fill("#beam_size", "1000")
    page.click("#submit")
    refusal = api_caption(demo_server, png.getvalue(), "blue.png", beam_size="1000").json()["error"]
    expect(error).to_contain_text(refusal["message"])
    expect(error).to_contain_text("422")
    # the browser logs each 4xx answer as a failed resource load; nothing else may be logged
    assert_clean(watch, re.compile(r"status of 4\d\d"))


def test_explain_words_shows_one_heat_map_per_caption_word(
    demo_server: str, browser_page: tuple[Any, Watch], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    page, watch = browser_page
    size = api_get(demo_server, "/v1/models")["image"]["height"]
    image = sceneworld_png(tmp_path / "scene.png", size)
    open_demo(page, demo_server)
    page.set_input_files("#file", str(image))
    page.fill("#beam_size", "3")
    page.click("#submit")
    expect(page.locator("#result")).to_be_visible()
    caption = page.locator("#caption").inner_text().strip()
    words = caption.split()
    assert words, "the engine gave an empty caption"

    explain = page.locator("#explain-submit")
    expect(explain).to_be_enabled()
    expect(page.locator("#explain_method")).to_have_value("attention")
    page.select_option("#explain_method", "attention")
    with page.expect_request(re.compile(r".*/v1/explain$")) as sent:
        explain.click()
    request = json.loads(sent.value.post_data or "{}")

    figures = page.locator("#word-maps figure")
    expect(figures).to_have_count(len(words))
    expect(page.locator("#explain-result")).to_be_visible()
    expect(page.locator("#explain-status")).to_contain_text(f"Explained {len(words)} words with attention")
    images = figures.locator("img")
    expect(images).to_have_count(len(words))
    assert images.evaluate_all("is => is.map(i => i.alt)") == words
    sources = images.evaluate_all("is => is.map(i => i.getAttribute('src'))")
    assert all(src.startswith("data:image/png;base64,") for src in sources), [s[:40] for s in sources]
    assert images.evaluate_all("is => is.every(i => i.complete && i.naturalWidth > 0)")
    assert [t.strip() for t in figures.locator("figcaption .word").all_inner_texts()] == words
    summary = page.locator("#explain-summary").inner_text()
    assert "attention" in summary and "ms per word" in summary and "caption shown" in summary
    expect(page.locator("#explain-error")).to_be_hidden()
    # an uploaded image has no scene graph: no grounding score or pointing game, and the page says why
    expect(page.locator("#grounding")).to_have_text(re.compile(r"^No scene graph for this image"))
    expect(page.locator("#pointing")).to_be_hidden()
    assert "scene_graph" not in request

    # the page sent the caption's tokens as the caption answer has them; the API explains them word by
    # word as it explains the caption's text
    answer = api_caption(demo_server, image.read_bytes(), "scene.png", beam_size="3").json()["results"][0]
    assert request["tokens"] == answer["captions"][0]["tokens"] and "caption" not in request
    body = {"image": base64.b64encode(image.read_bytes()).decode(), "caption": caption, "beam_size": 3}
    want = httpx.post(
        f"{demo_server}/v1/explain", json={**body, "overlays": False}, timeout=60.0, trust_env=False
    )
    assert want.status_code == 200, want.text
    assert [w["word"] for w in want.json()["words"]] == words
    nouns = [w["word"] for w in want.json()["words"] if w["noun"]]
    assert figures.locator("figcaption .word.noun").all_inner_texts() == nouns

    # a refused option shows the API's own message; a new caption clears the old maps
    page.select_option("#explain_method", "integrated_gradients")
    page.fill("#explain_n_steps", "0")
    explain.click()
    refusal = httpx.post(
        f"{demo_server}/v1/explain",
        json={**body, "method": "integrated_gradients", "n_steps": 0},
        timeout=60.0,
        trust_env=False,
    )
    assert refusal.status_code == 422, refusal.text
    error = page.locator("#explain-error")
    expect(error).to_be_visible()
    expect(error).to_contain_text("422")
    expect(error).to_contain_text(refusal.json()["error"]["code"])
    expect(page.locator("#explain-result")).to_be_hidden()
    page.click("#submit")
    expect(error).to_be_hidden()
    expect(explain).to_be_enabled()
    expect(figures).to_have_count(0)
    assert_clean(watch, re.compile(r"status of 422"))


def test_probe_jobs_are_listed_with_their_figures(demo_server: str, browser_page: tuple[Any, Watch]) -> None:
    from playwright.sync_api import expect

    sets = api_get(demo_server, "/v1/probe-sets")["probe_sets"]
    if not any(s["kind"] == "systematicity" for s in sets):
        pytest.skip("this repository has no systematicity probe set")
    body = {"kind": "systematicity", "rerank": False, "beam_size": 2, "n_best": 2, "images": 1}
    job = httpx.post(f"{demo_server}/v1/probes", json=body, timeout=30.0, trust_env=False)
    assert job.status_code == 202, job.text
    job_id = job.json()["id"]
    deadline = time.monotonic() + 120
    while api_get(demo_server, f"/v1/probes/{job_id}")["status"] in ("queued", "running"):
        assert time.monotonic() < deadline, "the probe did not finish"
        time.sleep(0.2)

    page, watch = browser_page
    open_demo(page, demo_server)
    row = page.locator("#probe-table tbody tr", has=page.locator(f'a[href="v1/probes/{job_id}"]'))
    expect(row).to_have_count(1)
    expect(row.locator("td.status")).to_have_text("succeeded")
    expect(row.locator("td.figures")).to_contain_text("held-out pairs")
    assert is_local(page.url)
    assert_clean(watch)


def test_api_key_field_sends_the_bearer_token(
    tiny_repo: Path, browser_page: tuple[Any, Watch], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    port = free_port()
    cmd = [sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--repo", str(tiny_repo)]
    env = {
        **os.environ,
        "COMPCAP_INTRA_OP_THREADS": "1",
        "COMPCAP_STATE_URL": "",
        "COMPCAP_API_KEYS": "demo-key",
        "COMPCAP_CAPTIONS_REQUIRE_KEY": "true",
    }
    page, watch = browser_page
    with serving(cmd, env, port, tmp_path / "serve.log") as url:
        open_demo(page, url)
        expect(page.locator("#probes-empty")).to_contain_text("API key")
        size = api_get(url, "/v1/models")["image"]["height"]
        page.set_input_files("#file", str(sceneworld_png(tmp_path / "scene.png", size)))
        page.click("#submit")
        expect(page.locator("#error")).to_contain_text("401")
        expect(page.locator("#error")).to_contain_text("Authorization: Bearer")

        page.click(".key summary")
        page.fill("#api_key", "wrong")
        page.click("#submit")
        expect(page.locator("#error")).to_contain_text("403")

        page.fill("#api_key", "demo-key")
        page.click("#submit")
        expect(page.locator("#result")).to_be_visible()
        expect(page.locator("#error")).to_be_hidden()
        expect(page.locator("#probes-empty")).to_have_text("No probe jobs yet.")
    assert_clean(watch, re.compile(r"status of 40[13]"))
