"""The demo page draws a probe kind it has never heard of: the kind ``tests/unit/probes/test_new_kind.py``
defines (``word_hits``, with a probe-set format of its own) is registered in this process and served by
a real gateway in it (uvicorn on an ephemeral port, as ``tests/api/test_probe_kinds_api.py`` serves its
kind; a ``compcap serve`` process would not see the registration), on a copy of the tiny repository with
a set of its format; headless Chromium runs it from the launcher, and the page draws its result in the
record's words — its images field, its figure, what it measures, its legend, one bar per target word
with its interval — from ``GET /v1/probe-kinds`` alone: ``probes.js`` names no kind."""

from __future__ import annotations

import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from service.gateway.app import create_app
from service.probes.kinds import get_kind, register, unregister
from service.settings import Settings
from tests.browser.conftest import Watch
from tests.browser.test_demo_page import api_get, assert_clean, open_demo
from tests.browser.test_demo_views import chart_rows, fixed
from tests.integration.conftest import free_port
from tests.unit.probes.test_new_kind import KIND, NAME, SET_NAME, add_word_set

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def word_server(tiny_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a ready gateway in this process, with the test kind registered, on a copy of
    ``tiny_repo`` holding a set of its format."""
    assert get_kind(NAME) is None
    register(KIND)
    try:
        repo = tmp_path_factory.mktemp("word_kind") / "model_repo"
        shutil.copytree(tiny_repo, repo, symlinks=True)
        add_word_set(repo)
        port = free_port()
        app = create_app(Settings(repo=repo, intra_op_threads=1))
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
            while not server.started or httpx.get(f"{url}/readyz", trust_env=False).status_code != 200:
                assert time.monotonic() < deadline and thread.is_alive(), "the gateway did not get ready"
                time.sleep(0.1)
            yield url
        finally:
            server.should_exit = True
            thread.join(timeout=30)
    finally:
        unregister(NAME)


def test_the_page_draws_a_kind_defined_by_a_test(word_server: str, browser_page: tuple[Any, Watch]) -> None:
    from playwright.sync_api import expect

    view = next(k for k in api_get(word_server, "/v1/probe-kinds")["kinds"] if k["name"] == NAME)["view"]
    chart = view["chart"]
    page, watch = browser_page
    open_demo(page, word_server)
    expect(page.locator(f"#probe_kind option[value={NAME}]")).to_be_enabled()
    page.select_option("#probe_kind", NAME)
    expect(page.locator("#probe-about")).to_contain_text(f"{NAME}: {KIND.description}")
    expect(page.locator("#probe-about")).to_contain_text(f"Probe set {SET_NAME}")
    expect(page.locator("#probe-images-label")).to_have_text("Images per word")
    expect(page.locator("#probe-sizing")).to_have_text("")  # no sizing hint: the record asks for none
    page.select_option("#probe_rerank", "false")
    page.fill("#probe_images", "3")
    page.fill("#probe_beam_size", "2")
    page.click("#probe-run")
    expect(page.locator("#probe-job .status")).to_have_text("succeeded", timeout=180_000)
    job = api_get(word_server, f"/v1/probes/{page.locator('#probe-job a').inner_text()}")
    assert job["kind"] == NAME and job["params"]["images"] == 3
    result = job["result"]

    # its words, from its record
    expect(page.locator("#probe-summary")).to_have_text(job["summary"])
    expect(page.locator("#probe-figure")).to_have_text("word hit rate")
    expect(page.locator("#probe_k")).to_be_hidden()  # a figure without K
    expect(page.locator("#probe-chart-about")).to_have_text(chart["about"])
    expect(page.locator("#probe-legend")).to_have_text(chart["sides"][0]["legend"])
    expect(page.locator("#probe-chart")).to_have_attribute("aria-label", "word hit rate per target word")
    # its figure: one bar per target word, as wide as its rate, with its interval as an error bar
    rates = result["hit_rate"]
    assert rates
    assert chart_rows(page, "pair") == [(word, fixed(rate)) for word, rate in rates.items()]
    assert page.locator("#probe-chart text.group-label").all_text_contents() == ["words"]
    bars = page.locator("#probe-chart g.row.pair rect.bar")
    assert set(bars.evaluate_all("bs => bs.map(b => b.getAttribute('class'))")) == {"bar all"}
    full = float(page.locator("#probe-chart rect.track").first.get_attribute("width") or 0)
    widths = bars.evaluate_all("bs => bs.map(b => Number(b.getAttribute('width')))")
    assert widths == [pytest.approx(max(rate * full, 1.5 if rate else 0)) for rate in rates.values()]
    drawn = page.locator("#probe-chart g.row g.ci").evaluate_all(
        "cs => cs.map(c => [Number(c.dataset.low), Number(c.dataset.high)])"
    )
    intervals = [result["hit_rate_interval"][word] for word in rates]
    assert drawn == [[iv["low"], iv["high"]] for iv in intervals]
    titles = page.locator("#probe-chart g.row.pair title").all_text_contents()
    assert all(
        re.fullmatch(r".+ \(target word\): word hit rate \d\.\d{3}( \(95% interval .+\))?", t) for t in titles
    )
    expect(page.locator("#probe-outcomes")).to_be_hidden()  # no shares in its view
    row = page.locator("#probe-table tbody tr", has=page.locator(f'a[href="v1/probes/{job["id"]}"]'))
    expect(row.locator("td.figures")).to_have_text(job["summary"])
    assert_clean(watch)
