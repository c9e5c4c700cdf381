"""The web demo at ``/``: one static page (HTML, CSS, vanilla JavaScript) that calls the public API —
upload or drop an image, pick the model, beam size, re-ranking and hooks, read the n-best list,
scores and timings, and the recent probe jobs. Everything it loads comes from the app itself (no
CDN, no web fonts); its Content-Security-Policy forbids any other origin."""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

STATIC_URL = "/demo-static"
# The page talks to its own origin only: scripts, styles, fetches and images (blob: for the preview).
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def static_dir() -> str:
    """The page's files, shipped inside the package (``service/web/static``)."""
    return str(files("service.web") / "static")


def install_web(app: FastAPI) -> None:
    """Serve ``index.html`` at ``GET /`` and its assets under ``STATIC_URL`` (neither in the schema)."""
    directory = static_dir()
    app.mount(STATIC_URL, StaticFiles(directory=directory), name="demo-static")
    index = f"{directory}/index.html"

    @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
    async def demo() -> FileResponse:
        return FileResponse(index, media_type="text/html; charset=utf-8", headers=HEADERS)
