"""The browser tier: a real ``compcap serve`` on an OS-assigned 127.0.0.1 port (the integration tier's
``serving``), and Debian's headless ``chromium`` driven by playwright's sync API with every request to
another host aborted and recorded. Skipped, with the reason, where chromium or playwright is missing
(playwright's own browser download cannot work here)."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.integration.conftest import free_port, serving

CHROMIUM = Path(os.environ.get("COMPCAP_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
LOCAL_SCHEMES = frozenset({"data", "blob", "about"})


def browser_missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if not CHROMIUM.is_file():
        return f"no Chromium at {CHROMIUM} (apt-get install chromium, or set COMPCAP_CHROMIUM)"
    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed (pip install playwright; no browser download needed)"
    return None


def is_local(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in LOCAL_SCHEMES or (parts.hostname or "") in LOCAL_HOSTS


@dataclass
class Watch:
    """What one browser context did that a test must see: requests to other hosts (aborted), console
    errors and uncaught page exceptions."""

    blocked: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def demo_server(tiny_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a ready ``compcap serve`` on ``tiny_repo``, shared by one test module."""
    port = free_port()
    cmd = [sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--repo", str(tiny_repo)]
    env = {**os.environ, "COMPCAP_INTRA_OP_THREADS": "1", "COMPCAP_STATE_URL": ""}
    log = tmp_path_factory.mktemp("browser") / "serve.log"
    with serving(cmd, env, port, log) as url:
        yield url


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """A headless Debian Chromium (a playwright ``Browser``) for one test module."""
    reason = browser_missing()
    if reason:
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def browser_page(chromium: Any) -> Iterator[tuple[Any, Watch]]:
    """A fresh page (its own context, light colour scheme, 1280x900) whose requests to any host but
    this machine are aborted and recorded, with its console errors and page exceptions."""
    watch = Watch()
    context = chromium.new_context(
        viewport={"width": 1280, "height": 900}, color_scheme="light", service_workers="block"
    )

    def guard(route: Any) -> None:
        if is_local(route.request.url):
            route.continue_()
        else:
            watch.blocked.append(route.request.url)
            route.abort("blockedbyclient")

    context.route("**/*", guard)
    page = context.new_page()
    page.on("console", lambda msg: watch.console_errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: watch.page_errors.append(str(exc)))
    page.set_default_timeout(30_000)
    try:
        yield page, watch
    finally:
        context.close()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "browser: drives headless Chromium against a real compcap serve")
