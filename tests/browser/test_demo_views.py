"""The demo page's views beyond one upload, in headless Chromium against a real ``compcap serve``, every
request to another host aborted: the sample images (served by the app, SceneWorld test renders) caption
on a click with a notice of what the model knows and the caption's in-domain badge; explanation methods
that cannot run are greyed out with the reason ``GET /v1/explain/methods`` gives (a copy of the
repository without its torch programs) and enabled where they can; the probe launcher runs a job,
follows its progress and draws Recall@K per pair, held out against seen (or every pair, when the
held-out pairs are not known), and a counterfactual job in its own words (hit@K on minimal pairs, the
held-out value against its seen twin, the top-1 outcome shares per class with error bars); the compare
view shows each image's captions per configuration with its NGSM and the overlap per n-gram order
(saying which order made it 0), most discrepant first, as ``POST /v1/compare`` orders them; a sample's
explanation has the grounding score and the pointing game (its scene graph ships with it); the n-best
table fits a 390 px wide screen.

Screenshots of each view go to ``docs/screenshots/demo_*.png`` with ``COMPCAP_UPDATE_SCREENSHOT=1``
(else to the test's tmp folder); the ones in ``docs/`` are taken on a copy of a default-preset repository
with probe sets (``compcap probesets --repo COPY --kind systematicity counterfactual``, then
``COMPCAP_TEST_REPO=COPY``) so that captions and recall read like them."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image

from service.evaluation.intervals import between_sd, images_per_group
from tests.browser.conftest import Watch
from tests.browser.test_demo_page import api_caption, api_get, assert_clean, open_demo
from tests.integration.conftest import free_port, serving

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "service" / "web" / "static" / "samples"
SHOTS = ROOT / "docs" / "screenshots"
SAMPLE_WORLD_SEED = 7919 + 11  # compcap_lab.studies.examples: the held-out test world's examples
GRADIENT_METHODS = ("saliency", "guided_backprop", "integrated_gradients")
MAX_SHOT_BYTES = 300_000


def screenshot(page: Any, name: str, tmp_path: Path, *selectors: str) -> Path:
    """Save a screenshot of the part of ``page`` that ``selectors`` cover as ``demo_<name>.png``: under
    ``docs/screenshots`` with ``COMPCAP_UPDATE_SCREENSHOT=1``, as a palette PNG under 300 KB."""
    update = os.environ.get("COMPCAP_UPDATE_SCREENSHOT") == "1"
    path = (SHOTS if update else tmp_path) / f"demo_{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    page.wait_for_load_state("networkidle")
    # the selectors' boxes in page coordinates (a full-page clip's), not the viewport's
    boxes = [
        page.locator(selector).evaluate(
            "e => { const r = e.getBoundingClientRect(); "
            "return [r.left + scrollX, r.top + scrollY, r.right + scrollX, r.bottom + scrollY]; }"
        )
        for selector in selectors
    ]
    left = min(b[0] for b in boxes) - 8
    top = min(b[1] for b in boxes) - 8
    right = max(b[2] for b in boxes) + 8
    bottom = max(b[3] for b in boxes) + 8
    clip = {
        "x": max(left, 0),
        "y": max(top, 0),
        "width": right - max(left, 0),
        "height": bottom - max(top, 0),
    }
    page.screenshot(path=str(path), full_page=True, clip=clip)
    with Image.open(path) as image:
        small = image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=0)
    small.save(path, optimize=True)
    assert 5_000 < path.stat().st_size < MAX_SHOT_BYTES, (path, path.stat().st_size)
    return path


def post_json(url: str, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, timeout=120.0, trust_env=False)


def noise_png(size: int, seed: int = 0) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def bare_server(tiny_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A ready ``compcap serve`` on a copy of ``tiny_repo`` as git carries it (no torch programs), its
    captioner ``butr`` calibrated (``compcap calibrate``) so that its captions carry ``in_domain``."""
    from service.manifest import load_manifest

    work = tmp_path_factory.mktemp("bare")
    repo = work / "model_repo"
    shutil.copytree(tiny_repo, repo, ignore=shutil.ignore_patterns("torch"))
    env = {**os.environ, "COMPCAP_INTRA_OP_THREADS": "1", "COMPCAP_STATE_URL": ""}
    if load_manifest(repo).captioner("butr").domain is None:
        calibrate = [sys.executable, "-m", "service.cli", "calibrate", "--repo", str(repo), "--model", "butr"]
        subprocess.run([*calibrate, "--images", "60"], env=env, check=True, capture_output=True, timeout=300)
    port = free_port()
    cmd = [sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--repo", str(repo)]
    with serving(cmd, env, port, work / "serve.log") as url:
        yield url


def disabled_methods(page: Any) -> dict[str, str]:
    """The greyed-out options of the method select: value -> tooltip."""
    return dict(
        page.locator("#explain_method option:disabled").evaluate_all("os => os.map(o => [o.value, o.title])")
    )


# ---------------------------------------------------------------------------------- sample images


def test_samples_are_served_sceneworld_test_renders_with_their_scene_graphs(demo_server: str) -> None:
    from sceneworld.dataset import generate

    renders, references, graphs = generate(3, seed=SAMPLE_WORLD_SEED)
    samples = (ROOT / "service" / "web" / "static" / "samples.js").read_text(encoding="utf-8")
    for i, (render, refs, graph) in enumerate(zip(renders, references, graphs, strict=True)):
        response = httpx.get(f"{demo_server}/demo-static/samples/example_{i}.png", trust_env=False)
        assert response.status_code == 200 and response.headers["content-type"] == "image/png"
        served = np.asarray(Image.open(io.BytesIO(response.content)).convert("RGB"))
        assert np.array_equal(served, render), f"sample {i} is not the test world's render"
        assert refs[0] in samples
        # its scene graph as the generator drew it (no captions), the size its boxes are in
        scene = httpx.get(f"{demo_server}/demo-static/samples/example_{i}.scene.json", trust_env=False)
        assert scene.status_code == 200 and scene.headers["content-type"] == "application/json"
        want = {k: graph[k] for k in ("image_id", "background", "horizon", "objects", "relations")}
        assert scene.json() == {**want, "size": list(render.shape[:2])}, f"sample {i}'s scene graph"
        assert f"example_{i}.scene.json" in samples


def test_a_sample_click_captions_it_with_what_the_model_knows(
    demo_server: str, browser_page: tuple[Any, Watch], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    page, watch = browser_page
    open_demo(page, demo_server)
    models = api_get(demo_server, "/v1/models")
    default = next(c for c in models["captioners"] if c["name"] == models["default_captioner"])
    notice = page.locator("#model-notice")
    expect(notice).to_be_visible()
    size = f"{default['image']['width']}×{default['image']['height']}"
    expect(page.locator("#model-knows")).to_contain_text(size)
    expect(page.locator("#model-knows")).to_contain_text("SceneWorld")
    expect(page.locator("#model-warning")).to_contain_text("confident but wrong captions")
    if default["domain_calibration"] is None:
        expect(page.locator("#model-domain")).to_contain_text("not calibrated")
    else:
        expect(page.locator("#model-domain")).to_contain_text(default["domain_calibration"])

    samples = page.locator("#samples button")
    expect(samples).to_have_count(3)
    assert samples.locator("img").evaluate_all("is => is.every(i => i.complete && i.naturalWidth === 96)")
    samples.nth(1).click()
    expect(page.locator("#result")).to_be_visible()
    expect(samples.nth(1)).to_have_attribute("aria-pressed", "true")
    expect(samples.nth(0)).to_have_attribute("aria-pressed", "false")
    expect(page.locator("#preview")).to_be_visible()
    expect(page.locator("#file-info")).to_contain_text("example_1.png")

    want = api_caption(demo_server, (SAMPLES / "example_1.png").read_bytes(), "example_1.png")
    assert want.status_code == 200, want.text
    best = want.json()["results"][0]
    expect(page.locator("#caption")).to_have_text(best["caption"])
    badge = page.locator("#domain-badge")
    if best["in_domain"] is None:
        expect(badge).to_have_text("domain not checked")
    else:
        expect(badge).to_have_text("in domain" if best["in_domain"] else "out of domain")
    expect(page.locator("#error")).to_be_hidden()

    screenshot(page, "caption", tmp_path, ".controls", ".results")
    assert_clean(watch)


def caption_as(page: Any, repo: Path, text: str) -> None:
    """Answer the page's ``POST /v1/captions`` as the server does, its best caption replaced by ``text``
    (and that text's word ids): a captioner that names what the scene holds, which the tiny models do
    not reliably do."""
    from service.manifest import load_manifest
    from service.text.vocabulary import Vocabulary

    manifest = load_manifest(repo)
    ids = Vocabulary.load(repo / manifest.vocabulary.file).encode(text)

    def rewrite(route: Any) -> None:
        response = route.fetch()
        body = response.json()
        result = body["results"][0]
        result["caption"] = text
        result["captions"][0].update(text=text, tokens=ids)
        route.fulfill(response=response, body=json.dumps(body))

    page.route(re.compile(r".*/v1/captions$"), rewrite)


def test_a_sample_explanation_shows_the_grounding_score_and_the_pointing_game(
    demo_server: str, tiny_repo: Path, browser_page: tuple[Any, Watch], tmp_path: Path
) -> None:
    """A sample's scene graph goes with its explanation: GroundingScore(δ) and the pointing game appear,
    as the API gives them for the same image, tokens and scene graph."""
    from playwright.sync_api import expect

    page, watch = browser_page
    reference = "a red horse on a lawn"  # sample 0's first reference: its horse is in the scene graph
    caption_as(page, tiny_repo, reference)
    open_demo(page, demo_server)
    page.locator("#samples button").first.click()
    expect(page.locator("#caption")).to_have_text(reference)
    with page.expect_request(re.compile(r".*/v1/explain$")) as sent:
        page.click("#explain-submit")
    expect(page.locator("#explain-status")).to_contain_text("Explained 6 words")
    request = json.loads(sent.value.post_data or "{}")
    scene = json.loads((SAMPLES / "example_0.scene.json").read_text(encoding="utf-8"))
    assert request["scene_graph"] == scene and "caption" not in request

    want = post_json(demo_server, "/v1/explain", {**request, "overlays": False})
    assert want.status_code == 200, want.text
    out = want.json()
    assert out["scene_graph"] is True and out["caption"] == reference
    grounding = page.locator("#grounding")
    expect(grounding).to_be_visible()
    expect(grounding).to_contain_text("GroundingScore(δ)")
    deltas = grounding.locator(".delta").all_inner_texts()
    labels = {"0": "0", "1": "1", "3": "3", "5": "5", "inf": "∞"}
    intervals = out["grounding_score_interval"]
    assert intervals is not None and list(intervals) == list(out["grounding_score"])
    assert deltas == [
        f"δ={labels[k]}: {fixed(v)} [{fixed(intervals[k]['low'])}, {fixed(intervals[k]['high'])}]"
        for k, v in out["grounding_score"].items()
    ]  # each δ's GroundingScore with its 95% interval, as POST /v1/explain answers them
    nouns = intervals["0"]["nouns"]
    expect(grounding.locator(".ci-note")).to_have_text(
        f"[95% interval over {nouns} noun{'s' * (nouns != 1)}]"
    )
    horse = next(w for w in out["words"] if w["word"] == "horse")
    assert horse["pointing"] is not None  # the horse is an object of the scene: the pointing game is played
    played = [w for w in out["words"] if w["pointing"] is not None]
    hits = sum(bool(w["pointing"]) for w in played)
    chance = sum(w["pointing_chance"] for w in played) / len(played)
    pointing = page.locator("#pointing")
    expect(pointing).to_be_visible()
    expect(pointing).to_have_text(
        f"Pointing game{hits} of {len(played)} noun{'s' * (len(played) != 1)} hit (chance {fixed(chance, 2)})"
    )
    figure = page.locator("#word-maps figure").nth(out["words"].index(horse))
    expect(figure.locator(".word-about")).to_contain_text(
        f"pointing {'hit' if horse['pointing'] else 'miss'}"
    )
    expect(figure.locator(".word-about")).to_contain_text("under: ")
    marks = page.locator("#word-maps .mark")
    expect(marks).to_have_count(sum(w["grounded"] is not None for w in out["words"]))
    screenshot(page, "grounding", tmp_path, "#explain")
    assert_clean(watch)


# ---------------------------------------------------------------------------------- explanation methods


def test_methods_that_can_run_are_enabled(demo_server: str, browser_page: tuple[Any, Watch]) -> None:
    from playwright.sync_api import expect

    from service.explain.service import torch_available

    page, watch = browser_page
    listing = api_get(demo_server, "/v1/explain/methods")["captioners"]
    default = api_get(demo_server, "/v1/models")["default_captioner"]
    methods = next(c["methods"] for c in listing if c["model"] == default)
    unavailable = {m["name"]: m["reason"] for m in methods if not m["available"]}
    repo = os.environ.get("COMPCAP_TEST_REPO")
    if torch_available() and (repo is None or (Path(repo) / "torch").is_dir()):
        assert unavailable == {}, "the tiny repository has its torch programs: every method runs"

    open_demo(page, demo_server)
    expect(page.locator("#explain_method option")).to_have_count(4)
    assert disabled_methods(page) == unavailable
    # the note under the method (shown with a caption) names each greyed-out method's reason
    note = page.locator("#explain-methods-note")
    assert note.evaluate("n => n.hidden") == (not unavailable)
    for reason in unavailable.values():
        expect(note).to_contain_text(reason)
    assert_clean(watch)


def test_gradient_methods_are_greyed_out_with_the_reason_without_programs(
    bare_server: str, browser_page: tuple[Any, Watch], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    page, watch = browser_page
    listing = api_get(bare_server, "/v1/explain/methods?model=butr")["captioners"]
    assert [c["model"] for c in listing] == ["butr"]
    methods = {m["name"]: m for m in listing[0]["methods"]}
    assert methods["attention"]["available"]
    for name in GRADIENT_METHODS:
        assert not methods[name]["available"] and methods[name]["code"] in {
            "programs_missing",
            "extra_not_installed",
        }, methods[name]
    # the listing says what a request for the method gets
    body = {"image": base64.b64encode((SAMPLES / "example_0.png").read_bytes()).decode(), "model": "butr"}
    refusal = post_json(bare_server, "/v1/explain", {**body, "method": "saliency"})
    assert refusal.status_code == 501 and refusal.json()["error"]["code"] == methods["saliency"]["code"]
    unknown = httpx.get(f"{bare_server}/v1/explain/methods?model=nope", trust_env=False)
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "unknown_model"

    open_demo(page, bare_server)
    page.select_option("#model", "butr")
    page.locator("#samples button").first.click()  # the explanation is of the caption shown
    expect(page.locator("#result")).to_be_visible()
    greyed = disabled_methods(page)
    assert set(greyed) == set(GRADIENT_METHODS)
    assert all(tip == methods[name]["reason"] for name, tip in greyed.items())
    note = page.locator("#explain-methods-note")
    expect(note).to_be_visible()
    expect(note).to_contain_text(methods["saliency"]["reason"])
    expect(page.locator("#explain_method")).to_have_value("attention")
    for label in page.locator("#explain_method option:disabled").all_inner_texts():
        assert label.endswith("unavailable here"), label

    # attention still explains the caption
    page.click("#explain-submit")
    expect(page.locator("#explain-status")).to_contain_text("Explained")
    expect(page.locator("#explain-status")).to_contain_text("with attention")
    expect(page.locator("#explain-error")).to_be_hidden()
    # the screenshot shows the options as a list box: a headless browser draws no open drop-down
    page.locator("#explain_method").evaluate("s => { s.size = s.options.length; }")
    screenshot(page, "methods", tmp_path, "#explain")
    assert_clean(watch)


def test_the_in_domain_badge_shows_the_caption_flag(
    bare_server: str, browser_page: tuple[Any, Watch], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    page, watch = browser_page
    models = {c["name"]: c for c in api_get(bare_server, "/v1/models")["captioners"]}
    assert models["butr"]["domain_calibration"], "the fixture calibrated butr"
    open_demo(page, bare_server)
    page.select_option("#model", "butr")
    expect(page.locator("#model-domain")).to_contain_text(models["butr"]["domain_calibration"])

    noise = noise_png(96)
    want = api_caption(bare_server, noise, "noise.png", model="butr").json()["results"][0]
    assert want["in_domain"] is False, want  # calibration flags every uniform-noise image
    page.set_input_files("#file", {"name": "noise.png", "mimeType": "image/png", "buffer": noise})
    page.click("#submit")
    badge = page.locator("#domain-badge")
    expect(badge).to_have_text("out of domain")
    expect(page.locator("#domain-note")).to_contain_text(f"typicality {fixed(want['domain_score'], 2)}")
    expect(page.locator("#domain-note")).to_contain_text("confident but wrong")

    page.locator("#samples button").first.click()
    sample = api_caption(bare_server, (SAMPLES / "example_0.png").read_bytes(), "s.png", model="butr")
    flag = sample.json()["results"][0]["in_domain"]
    expect(badge).to_have_text("in domain" if flag else "out of domain")
    assert_clean(watch)


# ---------------------------------------------------------------------------------- probe launcher


def run_probe_in_page(page: Any, url: str, kind: str = "systematicity", images: int = 3) -> dict[str, Any]:
    """Launch a small probe of ``kind`` from the page and wait for it; the job as the API has it."""
    from playwright.sync_api import expect

    sets = api_get(url, "/v1/probe-sets")["probe_sets"]
    if not any(s["kind"] == kind for s in sets):
        pytest.skip(f"this repository has no {kind} probe set")
    expect(page.locator(f"#probe_kind option[value={kind}]")).to_be_enabled()
    page.select_option("#probe_kind", kind)
    expect(page.locator("#probe-about")).to_contain_text("pairs")
    pairs = len(next(s for s in sets if s["kind"] == kind)["pairs"])
    worst = images_per_group(0.05, pairs, 0.5)  # the sizing rule, before any result: rate 0.5
    unit = "minimal pairs per pair" if kind == "counterfactual" else "images per pair"
    expect(page.locator("#probe-sizing")).to_contain_text(f"≈ {worst} {unit} for ± 5 points")
    page.select_option("#probe_rerank", "false")
    page.fill("#probe_images", str(images))
    page.fill("#probe_beam_size", "2")
    page.click("#probe-run")
    expect(page.locator("#probe-live")).to_be_visible()
    status = page.locator("#probe-job .status")
    expect(status).to_have_text("succeeded", timeout=180_000)
    job_id = page.locator("#probe-job a").inner_text()
    job = api_get(url, f"/v1/probes/{job_id}")
    assert job["status"] == "succeeded" and job["kind"] == kind
    assert job["params"]["rerank"] is False and job["params"]["beam_size"] == 2
    assert job["params"]["images"] == images
    return job


def sized_by(result: dict[str, Any], k: str) -> int | None:
    """The sizing rule's images per pair after ``result``: its held-out rate at K (kept in [0.01,
    0.99]) and the spread between its held-out pairs' rates (``between_sd``)."""
    rate = min(max(result["held_out"]["recall"][k], 0.01), 0.99)
    held = [r for r in result["pairs"] if r["held_out"] and r["images"] > 0]
    spread = between_sd([r["recall"][k] for r in held], [r["images"] for r in held])
    return images_per_group(0.05, result["held_out"]["pairs"], rate, spread)


def chart_rows(page: Any, kind: str) -> list[tuple[str, str]]:
    """(label, value) of the chart's rows of ``kind`` ('mean' or 'pair'), top to bottom."""
    rows = page.locator(f"#probe-chart g.row.{kind}").evaluate_all(
        "gs => gs.map(g => ['label', 'value'].map(c => g.querySelector(`text.${c}`).textContent))"
    )
    return [(label, value) for label, value in rows]


def fixed(value: float | None, digits: int = 3) -> str:
    """``value`` as the page writes it (JavaScript's ``toFixed``: the exact binary value, ties up)."""
    if value is None:
        return "—"
    return str(Decimal(value).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))


def test_the_probe_launcher_runs_a_job_and_draws_held_out_against_seen(
    demo_server: str, browser_page: tuple[Any, Watch], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    page, watch = browser_page
    open_demo(page, demo_server)
    job = run_probe_in_page(page, demo_server)
    result = job["result"]
    assert result["held_out_known"]
    progress = page.locator("#probe-progress")
    total = job["progress"]["total"]
    assert progress.evaluate("p => [p.value, p.max]") == [total, total]
    expect(page.locator("#probe-count")).to_have_text(f"{total}/{total} images")
    expect(page.locator("#probe-summary")).to_have_text(job["summary"])
    expect(page.locator("#probe_k")).to_have_value("5")

    for k in ("5", "1"):
        page.select_option("#probe_k", k)
        held = [r for r in result["pairs"] if r["held_out"]]
        seen = [r for r in result["pairs"] if not r["held_out"]]
        assert chart_rows(page, "mean") == [
            (f"held out · mean of {len(held)}", fixed(result["held_out"]["recall"][k])),
            (f"seen · mean of {len(seen)}", fixed(result["seen"]["recall"][k])),
        ]
        assert chart_rows(page, "pair") == [(r["pair"], fixed(r["recall"][k])) for r in held + seen]
        bars = page.locator("#probe-chart g.row.pair rect.bar")
        classes = bars.evaluate_all("bs => bs.map(b => b.getAttribute('class'))")
        assert classes == ["bar held"] * len(held) + ["bar seen"] * len(seen)
        widths = bars.evaluate_all("bs => bs.map(b => Number(b.getAttribute('width')))")
        full = float(page.locator("#probe-chart rect.track").first.get_attribute("width") or 0)
        for width, row in zip(widths, held + seen, strict=True):
            assert width == pytest.approx(max((row["recall"][k] or 0) * full, 1.5 if row["recall"][k] else 0))
        # an error bar per row from the result's 95% intervals: the means' first, then the pairs'
        x0 = float(page.locator("#probe-chart rect.track").first.get_attribute("x") or 0)
        drawn = page.locator("#probe-chart g.row g.ci").evaluate_all(
            "cs => cs.map(c => [c.dataset.low, c.dataset.high, ...[...c.querySelectorAll('line.ci-bar')]"
            ".flatMap(l => [l.getAttribute('x1'), l.getAttribute('x2')])].map(Number))"
        )
        owners = [result["held_out"], result["seen"], *held, *seen]
        intervals = [o["recall_interval"][k] for o in owners if o["recall_interval"][k] is not None]
        assert len(drawn) == len(intervals) > 0
        for (low, high, x1, x2), iv in zip(drawn, intervals, strict=True):
            assert (low, high) == (iv["low"], iv["high"])
            assert (x1, x2) == (pytest.approx(x0 + iv["low"] * full), pytest.approx(x0 + iv["high"] * full))
    legend = page.locator("#probe-legend")
    expect(legend).to_contain_text("held out: never together in training")
    expect(legend).to_contain_text("seen")
    expect(page.locator("#probe-figure")).to_have_text("Recall@K")
    expect(page.locator("#probe-chart-about")).to_contain_text(
        "Recall@K: the fraction of a concept pair's images"
    )
    expect(page.locator("#probe-chart")).to_have_attribute(
        "aria-label", "Recall@1 per concept pair, held out against seen"
    )
    expect(page.locator("#probe-images-label")).to_have_text("Images per pair")
    # the job is in the recent jobs table too
    expect(page.locator(f'#probe-table a[href="v1/probes/{job["id"]}"]')).to_have_count(1)
    page.select_option("#probe_k", "5")
    # the sizing rule now takes its rate from this result's held-out Recall@5 (kept in [0.01, 0.99])
    # and the spread between its held-out pairs' Recall@5
    sized = sized_by(result, "5")
    sizing = page.locator("#probe-sizing")
    if sized is None:
        expect(sizing).to_contain_text("more pairs are needed")
    else:
        expect(sizing).to_contain_text(f"≈ {sized} images per pair")
        expect(sizing).to_contain_text("the last result's held-out Recall@5")
    expect(page.locator("#probe-outcomes")).to_be_hidden()  # counterfactual results only
    screenshot(page, "probe", tmp_path, "#probes")
    assert_clean(watch)


def test_the_probe_chart_shows_every_pair_when_held_out_pairs_are_unknown(
    demo_server: str, browser_page: tuple[Any, Watch]
) -> None:
    """An imported captioner whose import declared no held-out pairs: its result has ``held_out_known``
    false and ``all`` (as ``service.probes.scoring.systematicity`` writes it); the real job's result is
    rewritten so on its way to the page."""
    from playwright.sync_api import expect

    page, watch = browser_page

    def unknown(route: Any) -> None:
        response = route.fetch()
        job = response.json()
        for part in (job.get("result"), job.get("partial")):
            if part:
                part.update(held_out_known=False, held_out=None, seen=None)
                for row in part["pairs"]:
                    row["held_out"] = None
        route.fulfill(response=response, body=json.dumps(job))

    page.route(re.compile(r".*/v1/probes/p[^/]*$"), unknown)
    open_demo(page, demo_server)
    job = run_probe_in_page(page, demo_server)
    result = job["result"]
    k = "5"
    assert chart_rows(page, "mean") == [
        (f"all · mean of {len(result['pairs'])}", fixed(result["all"]["recall"][k]))
    ]
    assert chart_rows(page, "pair") == [(r["pair"], fixed(r["recall"][k])) for r in result["pairs"]]
    assert set(
        page.locator("#probe-chart rect.bar").evaluate_all("bs => bs.map(b => b.getAttribute('class'))")
    ) == {"bar all"}
    expect(page.locator("#probe-legend")).to_contain_text("not known")
    expect(page.locator("#probe-legend")).not_to_contain_text("seen in training")
    assert_clean(watch)


def test_the_pages_sizing_rule_is_the_python_one(demo_server: str, browser_page: tuple[Any, Watch]) -> None:
    """The launcher's copies of ``images_per_group`` and ``between_sd`` (probes.js ``imagesPerPair``,
    ``betweenSd``) give the Python functions' answers on a grid of inputs, None included."""
    page, watch = browser_page
    open_demo(page, demo_server)
    rng = np.random.default_rng(11)
    cases = [
        (half, groups, rate, sd)
        for half in (0.02, 0.05, 0.1)
        for groups in (1, 6, 24)
        for rate in (0.0, 0.01, 0.2, 0.5, 0.99)
        for sd in (0.0, 0.03, 0.1, 0.3)
    ]
    spreads = []
    for size in (0, 1, 2, 6, 24):
        images = [int(n) for n in rng.integers(1, 12, size)]
        rates = [float(rng.integers(0, n + 1) / n) for n in images]
        spreads.append((rates, images))
    spreads.append(([0.0, 1.0, 0.5], [1, 1, 4]))
    got = page.evaluate(
        """async ([cases, spreads]) => {
          const m = await import("./demo-static/probes.js");
          return [cases.map(c => m.imagesPerPair(...c)), spreads.map(([r, n]) => m.betweenSd(r, n))];
        }""",
        [cases, spreads],
    )
    assert got[0] == [images_per_group(*c) for c in cases]
    assert got[1] == [pytest.approx(between_sd(r, n), abs=1e-12) for r, n in spreads]
    assert None in got[0] and any(v > 0 for v in got[1])
    assert_clean(watch)


@pytest.fixture(scope="module")
def counterfactual_server(tiny_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A ready ``compcap serve`` on a copy of ``tiny_repo`` with its counterfactual probe set
    (``compcap probesets --kind counterfactual``; the build does not write it)."""
    from export.probesets.repo import add_probe_sets

    work = tmp_path_factory.mktemp("counterfactual")
    repo = work / "model_repo"
    shutil.copytree(tiny_repo, repo, symlinks=True)
    add_probe_sets(repo, kinds=["counterfactual"])
    port = free_port()
    env = {**os.environ, "COMPCAP_INTRA_OP_THREADS": "1", "COMPCAP_STATE_URL": ""}
    cmd = [sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--repo", str(repo)]
    with serving(cmd, env, port, work / "serve.log") as url:
        yield url


def test_the_counterfactual_probe_draws_pairs_and_outcome_shares(
    counterfactual_server: str, browser_page: tuple[Any, Watch], tmp_path: Path
) -> None:
    """A counterfactual job from the launcher: the generic chart draws each pair's hit rate on its
    held-out side and on its seen twin (with the means and their error bars), a second chart the top-1
    outcome shares per class of each side with their intervals as error bars, and a table the same
    shares with their intervals, a stacked bar each, and held-out − seen with its interval and p-value
    — as the job's result has them; every word of it says what a counterfactual result measures (hit@K
    on minimal pairs, the held-out value against its seen twin), none systematicity's; the sizing hint
    then reads this result's held-out hit rate and spread between pairs."""
    from playwright.sync_api import expect

    from service.probes.scoring.counterfactual import OUTCOMES

    page, watch = browser_page
    open_demo(page, counterfactual_server)
    job = run_probe_in_page(page, counterfactual_server, kind="counterfactual", images=2)
    result = job["result"]
    assert result["outcome_classes"] == list(OUTCOMES)
    expect(page.locator("#probe_k")).to_have_value("5")
    for k in ("5", "1"):
        page.select_option("#probe_k", k)
        held = [r for r in result["pairs"] if r["held_out"]]
        seen = [r for r in result["pairs"] if not r["held_out"]]
        assert len(held) == len(seen) == result["held_out"]["pairs"] > 0
        assert chart_rows(page, "mean") == [
            (f"held-out value · mean of {len(held)}", fixed(result["held_out"]["recall"][k])),
            (f"seen twin · mean of {len(seen)}", fixed(result["seen"]["recall"][k])),
        ]
        assert chart_rows(page, "pair") == [(r["pair"], fixed(r["recall"][k])) for r in held] + [
            (f"twin of {r['pair']}", fixed(r["recall"][k])) for r in seen
        ]
        classes = page.locator("#probe-chart g.row.pair rect.bar").evaluate_all(
            "bs => bs.map(b => b.getAttribute('class'))"
        )
        assert classes == ["bar held"] * len(held) + ["bar seen"] * len(seen)
        drawn = page.locator("#probe-chart g.row g.ci").evaluate_all(
            "cs => cs.map(c => [Number(c.dataset.low), Number(c.dataset.high)])"
        )
        owners = [result["held_out"], result["seen"], *held, *seen]
        ivs = [o["recall_interval"][k] for o in owners if o["recall_interval"][k] is not None]
        assert drawn == [[iv["low"], iv["high"]] for iv in ivs] and drawn

    # the chart says what a counterfactual result measures, not systematicity's recall of pairs
    legend = page.locator("#probe-legend")
    expect(legend).to_have_text(
        "held-out value: a scene whose object has the unseen valueseen twin: the same scene with a seen value"
    )
    expect(page.locator("#probe-figure")).to_have_text("hit@K")
    expect(page.locator("#probe-chart-about")).to_contain_text(
        "hit@K on minimal pairs: the share of a pair's"
    )
    expect(page.locator("#probe-chart")).to_have_attribute(
        "aria-label", "hit@1 per held-out pair, on its minimal pairs, held-out value against its seen twin"
    )
    expect(page.locator("#probe-images-label")).to_have_text("Minimal pairs per pair")
    titles = page.locator("#probe-chart g.row.pair title").all_text_contents()
    assert len(titles) == len(result["pairs"])
    assert all(": hit@1 " in t and t.endswith("minimal pairs") for t in titles), titles
    assert all("(seen twin, seen values " in t for t in titles[len(titles) // 2 :]), titles
    # no word of systematicity's anywhere the result is shown: text, titles, aria labels
    shown = page.locator("#probe-live").evaluate(
        "b => [b.textContent, ...[...b.querySelectorAll('[aria-label]')]"
        ".map(e => e.getAttribute('aria-label'))].join(' ')"
    )
    for word in ("never together in training", "Recall", "concept pair", "seen in training", "held out "):
        assert word not in shown, word

    # the top-1 outcome shares per class, each side's with its 95% interval as an error bar
    chart = page.locator("#probe-outcomes .outcomes-chart")
    expect(chart).to_have_attribute(
        "aria-label",
        "top-1 outcome shares per class, held-out value against its seen twin, with 95% intervals",
    )
    drawn = chart.locator("g.row.share").evaluate_all(
        "gs => gs.map(g => { const bar = g.querySelector('rect.bar'); return [g.dataset.outcome,"
        " g.dataset.side, g.querySelector('text.label').textContent, bar.getAttribute('class'),"
        " Number(bar.getAttribute('width')), ...[...g.querySelectorAll('g.ci')]"
        ".flatMap(c => [Number(c.dataset.low), Number(c.dataset.high)])]; })"
    )
    full = float(chart.locator("rect.track").first.get_attribute("width") or 0)
    want_rows = [(o, side) for o in OUTCOMES for side in ("held_out", "seen")]
    assert [(o, side) for o, side, *_ in drawn] == want_rows
    for o, side, label, cls, width, low, high in drawn:
        value, iv = result[side]["outcomes"][o], result[side]["outcome_intervals"][o]
        assert label == ("held-out value" if side == "held_out" else "seen twin")
        assert cls == ("bar held" if side == "held_out" else "bar seen")
        assert width == pytest.approx(max(value * full, 1.5 if value else 0))
        assert (low, high) == (iv["low"], iv["high"])
    groups = chart.locator("text.group-label").all_text_contents()
    assert groups == ["hit", "modifier elsewhere", "noun missing", "wrong value", "modifier omitted"]

    box = page.locator("#probe-outcomes")
    expect(box).to_be_visible()
    heads = box.locator("thead th.outcome").all_inner_texts()
    assert heads == [o.replace("_", " ") for o in OUTCOMES]
    for side in ("held_out", "seen"):
        part = result[side]
        row = box.locator(f"tr[data-side={side}]")
        name = "held-out value" if side == "held_out" else "seen twin"
        expect(row.locator("th")).to_have_text(f"{name} · {part['pairs']} pairs")
        cells = row.locator("td.num").evaluate_all(
            "cs => cs.map(c => [c.querySelector('.share').textContent, c.dataset.low, c.dataset.high])"
        )
        want = []
        for o in OUTCOMES:
            iv = part["outcome_intervals"][o]
            want.append([fixed(part["outcomes"][o]), str(iv["low"]), str(iv["high"])])
        assert [[a, float(b), float(c)] for a, b, c in cells] == [[a, float(b), float(c)] for a, b, c in want]
        texts = row.locator("td.num .ci-text").all_inner_texts()
        assert texts == [
            f"[{fixed(part['outcome_intervals'][o]['low'])}, {fixed(part['outcome_intervals'][o]['high'])}]"
            for o in OUTCOMES
        ]
        # the stacked bar: one part per outcome, as wide as its share (the shares add up to the bar)
        widths = row.locator(".stack-part").evaluate_all(
            "ps => ps.map(p => [p.dataset.outcome, p.getBoundingClientRect().width])"
        )
        full = row.locator(".stack").evaluate("s => s.getBoundingClientRect().width")
        assert [o for o, _ in widths] == list(OUTCOMES)
        for (o, width), share in zip(widths, (part["outcomes"][o] for o in OUTCOMES), strict=True):
            assert width == pytest.approx(share * full, abs=1.0), o
    diff = box.locator("tr[data-side=difference]")
    expect(diff.locator("th")).to_have_text("held-out value − seen twin")
    cells = diff.locator("td.num").all()
    assert len(cells) == len(OUTCOMES)
    for cell, o in zip(cells, OUTCOMES, strict=True):
        test = result["difference"]["outcomes"][o]
        d = test["difference"]
        estimate = fixed(d["estimate"])
        expect(cell.locator(".share")).to_have_text(f"+{estimate}" if d["estimate"] > 0 else estimate)
        expect(cell.locator(".ci-text")).to_have_text(f"[{fixed(d['low'])}, {fixed(d['high'])}]")
        expect(cell.locator(".p-value")).to_have_text(f"p = {fixed(test['p_value'])}")
        assert float(cell.get_attribute("data-p") or "nan") == test["p_value"]
    recall = result["difference"]["recall"]["1"]
    expect(box.locator(".recall-test")).to_contain_text(
        f"hit@1 held-out value − seen twin {'+' if recall['difference']['estimate'] > 0 else ''}"
    )
    expect(box.locator(".recall-test")).to_contain_text(f"p = {fixed(recall['p_value'])}")
    expect(box.locator("caption")).to_contain_text(f"{result['minimal_pairs']} minimal pairs")

    # the sizing hint reads this result's held-out hit rate at K and its spread between pairs
    page.select_option("#probe_k", "5")
    sized = sized_by(result, "5")
    sizing = page.locator("#probe-sizing")
    if sized is None:
        expect(sizing).to_contain_text("more pairs are needed")
    else:
        expect(sizing).to_contain_text(f"≈ {sized} minimal pairs per pair")
        expect(sizing).to_contain_text("the last result's held-out hit@5")
    screenshot(page, "counterfactual", tmp_path, "#probe-live")
    assert_clean(watch)


# ---------------------------------------------------------------------------------- compare view


def test_the_compare_view_shows_captions_per_configuration_most_discrepant_first(
    demo_server: str, browser_page: tuple[Any, Watch], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    page, watch = browser_page
    models = api_get(demo_server, "/v1/models")
    names = [c["name"] for c in models["captioners"]]
    open_demo(page, demo_server)
    rows = page.locator("#compare-configs .compare-config")
    expect(rows).to_have_count(2)
    expect(rows.locator(".config-remove").first).to_be_disabled()
    # a third configuration: the default captioner without re-ranking
    page.click("#compare-add")
    expect(rows).to_have_count(3)
    rows.nth(2).locator(".config-rerank").select_option("false")
    expect(rows.nth(2).locator(".config-name")).to_have_value(models["default_captioner"])
    configs = [
        {
            "name": row.locator(".config-name").input_value(),
            "model": row.locator(".config-model").input_value(),
            "rerank": row.locator(".config-rerank").input_value(),
        }
        for row in rows.all()
    ]
    assert len({c["name"] for c in configs}) == 3, configs
    assert configs[0]["model"] == models["default_captioner"]
    if len(names) > 1:
        assert configs[1]["model"] != configs[0]["model"]

    # the three samples (checked by default) and an upload of the user's own
    upload = noise_png(64, seed=3)
    page.set_input_files("#compare-files", {"name": "mine.png", "mimeType": "image/png", "buffer": upload})
    page.click("#compare-submit")
    expect(page.locator("#compare-result")).to_be_visible()
    items = page.locator("#compare-images > li")
    expect(items).to_have_count(4)

    images = [base64.b64encode((SAMPLES / f"example_{i}.png").read_bytes()).decode() for i in range(3)]
    images.append(base64.b64encode(upload).decode())
    specs = []
    for c in configs:
        spec: dict[str, Any] = {"name": c["name"], "model": c["model"]}
        if c["rerank"]:
            spec["rerank"] = False if c["rerank"] == "false" else c["rerank"]
        specs.append(spec)
    want = post_json(demo_server, "/v1/compare", {"images": images, "configurations": specs})
    assert want.status_code == 200, want.text
    expected = want.json()["images"]
    order = items.evaluate_all("ls => ls.map(l => Number(l.dataset.index))")
    assert order == [image["index"] for image in expected]
    shown = items.evaluate_all("ls => ls.map(l => Number(l.dataset.minNgsm))")
    keys = [(image["min_ngsm"], image["min_tie_break"]) for image in expected]
    assert keys == sorted(keys) and shown == [image["min_ngsm"] for image in expected]
    for item, image in zip(items.all(), expected, strict=True):
        captions = dict(
            item.locator("tr").evaluate_all(
                "rs => rs.map(r => [r.querySelector('th').textContent, r.querySelector('td').textContent])"
            )
        )
        assert captions == image["captions"]
        expect(item.locator(".ngsm")).to_have_text(f"min NGSM {image['min_ngsm']:.3f}")
        # the most discrepant pair's overlap per order, what its NGSM is the geometric mean of
        a, b = image["most_discrepant_pair"]
        pair = next(p for p in image["pairs"] if (p["a"], p["b"]) == (a, b))
        cells = item.locator(".orders .order").all_inner_texts()
        assert cells == [
            f"{n}-gram {'—' if v is None else fixed(v)}" for n, v in enumerate(pair["orders"], 1)
        ]
        discrepant = item.locator("tr.discrepant th").all_inner_texts()
        assert sorted(discrepant) == sorted(image["most_discrepant_pair"])
        expected_src = "mine.png" if image["index"] == 3 else f"example_{image['index']}.png"
        assert expected_src in (item.locator("img").get_attribute("alt") or "")
    summary = page.locator("#compare-summary")
    expect(summary).to_contain_text("4 images × 3 configurations")
    expect(page.locator("#compare-error")).to_be_hidden()
    screenshot(page, "compare", tmp_path, "#compare")
    assert_clean(watch)


def test_the_compare_view_says_which_order_made_ngsm_zero(
    demo_server: str, browser_page: tuple[Any, Watch]
) -> None:
    """The demo's case: "a plane over the lake" against "a brown plane flying over the lake" share five
    words yet have NGSM 0; the view shows the overlap per order and that no shared 4-gram made it 0.
    The real comparison's answer is rewritten on its way to the page with these two captions, scored by
    the service's own ``compare_captions``."""
    from playwright.sync_api import expect

    from service.compare.service import compare_captions

    page, watch = browser_page
    texts = ("a plane over the lake", "a brown plane flying over the lake")

    def rewrite(route: Any) -> None:
        response = route.fetch()
        body = response.json()
        names = [c["name"] for c in body["configurations"]]
        for image in body["images"]:
            (scored,) = compare_captions(names[:2], [[texts[0]], [texts[1]]])
            image.update({k: v for k, v in scored.items() if k != "index"})
        route.fulfill(response=response, body=json.dumps(body))

    page.route(re.compile(r".*/v1/compare$"), rewrite)
    open_demo(page, demo_server)
    expect(page.locator("#compare-configs .compare-config")).to_have_count(2)
    for check in page.locator("#compare-samples input").all()[1:]:
        check.uncheck()
    page.click("#compare-submit")
    item = page.locator("#compare-images > li").first
    expect(item.locator(".ngsm")).to_have_text("NGSM 0.000")
    assert item.locator(".orders .order").all_inner_texts() == [
        "1-gram 0.714",
        "2-gram 0.250",
        "3-gram 0.143",
        "4-gram 0.000",
    ]
    expect(item.locator(".orders .zero")).to_have_text("4-gram 0.000")
    expect(item.locator(".orders .zero-why")).to_have_text(
        "no shared 4-gram gives NGSM 0, though they share shorter n-grams"
    )
    intro = page.locator("#compare > p").first
    expect(intro).to_contain_text("no 4-gram in common get NGSM 0")
    expect(intro).not_to_contain_text("no word in common")
    assert_clean(watch)


# ---------------------------------------------------------------------------------- a phone's width


def test_the_nbest_table_fits_a_390_px_screen(demo_server: str, chromium: Any, tmp_path: Path) -> None:
    """At 390 px wide (a phone) the n-best table fits: no cell runs past the table's box, the table past
    its wrapper, or the page past the screen; each figure is named under its caption."""
    from playwright.sync_api import expect

    context = chromium.new_context(viewport={"width": 390, "height": 844}, color_scheme="light")
    try:
        page = context.new_page()
        open_demo(page, demo_server)
        page.fill("#beam_size", "5")
        page.locator("#samples button").nth(1).click()
        expect(page.locator("#nbest tbody tr")).to_have_count(5)
        sizes = page.evaluate(
            """() => {
              const table = document.getElementById('nbest');
              const wrap = table.parentElement;
              const right = Math.max(...[...table.querySelectorAll('td')].map(
                c => c.getBoundingClientRect().right));
              return {page: document.documentElement.scrollWidth, screen: innerWidth,
                      table: table.scrollWidth, wrap: wrap.clientWidth,
                      cells: right, wrapRight: wrap.getBoundingClientRect().right};
            }"""
        )
        assert sizes["page"] <= sizes["screen"] == 390, sizes
        assert sizes["table"] <= sizes["wrap"], sizes
        assert sizes["cells"] <= sizes["wrapRight"] + 0.5, sizes
        labels = page.locator("#nbest tbody tr").first.locator("td[data-label]")
        assert labels.evaluate_all("cs => cs.map(c => c.dataset.label)") == [
            "log-prob",
            "normalized",
            "ranker score",
            "beam rank",
        ]
        shown = labels.first.evaluate("c => getComputedStyle(c, '::before').content")
        assert "log-prob" in shown, shown
        screenshot(page, "phone", tmp_path, "#nbest")
    finally:
        context.close()


def test_the_compare_view_shows_the_api_refusal(demo_server: str, browser_page: tuple[Any, Watch]) -> None:
    from playwright.sync_api import expect

    page, watch = browser_page
    open_demo(page, demo_server)
    rows = page.locator("#compare-configs .compare-config")
    expect(rows).to_have_count(2)
    rows.nth(1).locator(".config-name").fill("bad name!")
    page.click("#compare-submit")
    error = page.locator("#compare-error")
    expect(error).to_be_visible()
    expect(error).to_contain_text("422")
    expect(page.locator("#compare-result")).to_be_hidden()
    for check in page.locator("#compare-samples input").all():
        check.uncheck()
    rows.nth(1).locator(".config-name").fill("")
    page.click("#compare-submit")
    expect(error).to_contain_text("pick a sample or choose an image")
    assert_clean(watch, re.compile(r"status of 422"))
