"""The README's live probe, walked as a user walks it: a gateway serves a repository
without probe sets; the README's polling snippet, run then, stops with the API's error (non-zero, the
error on stderr, well within its deadline); ``compcap probesets`` (what ``make probesets`` runs) builds
them in another process while the gateway serves; without a restart, the set is served, the page's
probe launcher runs a probe that succeeds, and the same snippet prints the probe's summary."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import Watch
from tests.browser.test_demo_page import api_get, assert_clean, open_demo
from tests.browser.test_demo_views import run_probe_in_page
from tests.integration.conftest import free_port, serving
from tests.reload_repo import repo_without_probe_sets

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
SNIPPET_DEADLINE_S = 600  # the README's loop gives up after 600 tries a second apart


def readme_probe_snippet() -> str:
    """The README's curl-only probe block (the one that polls)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```sh\n(.*?)```", text, flags=re.S)
    (snippet,) = [b for b in blocks if "/v1/probes/$id" in b]
    return snippet


def run_snippet(url: str, timeout_s: float) -> tuple[int, str, str, float]:
    start = time.monotonic()
    done = subprocess.run(
        ["bash", "-c", readme_probe_snippet()],
        env={**os.environ, "COMPCAP_URL": url},
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    return done.returncode, done.stdout, done.stderr, time.monotonic() - start


def test_the_readme_probe_path_works_without_a_restart(
    tiny_repo: Path, tmp_path: Path, browser_page: tuple[Any, Watch]
) -> None:
    from playwright.sync_api import expect

    work = tiny_repo.with_name(tiny_repo.name + ".work")
    if not (work / "data" / "train" / "captions.json").is_file():
        pytest.skip("the tiny repository's work folder is not there (COMPCAP_TEST_REPO without it)")
    repo = repo_without_probe_sets(tiny_repo, tmp_path / "model_repo")
    port = free_port()
    cmd = [sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--repo", str(repo)]
    env = {**os.environ, "COMPCAP_INTRA_OP_THREADS": "1", "COMPCAP_STATE_URL": ""}  # the default watch
    with serving(cmd, env, port, tmp_path / "serve.log") as url:
        assert api_get(url, "/v1/probe-sets")["probe_sets"] == []
        # the snippet before the probe sets exist: the API's error, shown, and a non-zero exit
        rc, out, err, seconds = run_snippet(url, timeout_s=SNIPPET_DEADLINE_S)
        assert rc != 0 and out == "", (rc, out, err)
        assert "probe set" in err and "error" in err, err
        assert seconds < SNIPPET_DEADLINE_S

        page, watch = browser_page
        open_demo(page, url)
        expect(page.locator("#probe_kind option[value=systematicity]")).to_be_disabled()

        # `make probesets` in another terminal (the command it runs), the gateway left running
        probesets = ["probesets", "--repo", str(repo), "--work", str(work), "--kind", "systematicity"]
        built = subprocess.run(
            [sys.executable, "-m", "service.cli", *probesets],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert built.returncode == 0, built.stderr[-2000:]
        deadline = time.monotonic() + 60  # a hang guard: the watch looks every 2 s
        while not api_get(url, "/v1/probe-sets")["probe_sets"]:
            assert time.monotonic() < deadline, "the gateway did not pick the probe sets up"
            time.sleep(0.2)

        page.reload()  # what a user does to see the new sets
        job = run_probe_in_page(page, url)
        assert job["result"]["pairs"], job
        assert_clean(watch)

        rc, out, err, _ = run_snippet(url, timeout_s=SNIPPET_DEADLINE_S)
        assert rc == 0, (rc, out, err)
        jobs = api_get(url, "/v1/probes")["jobs"]
        assert len(jobs) == 2 and out.strip() == jobs[0]["summary"] and jobs[0]["status"] == "succeeded"
