"""The web demo at ``/``: one static page (HTML, CSS, vanilla JavaScript modules) that calls the public
API — click a sample SceneWorld image or upload one, pick the model, beam size, re-ranking and hooks,
read what the model knows, the n-best list, scores, timings and the caption's in-domain flag, explain
the caption word by word (methods that cannot run here greyed out, with the reason); launch a probe and
watch its Recall@K, held out against seen; compare configurations on the same images, most
discrepant first. Everything it loads comes from the app itself (``static/``, the samples in
``static/samples``; no CDN, no web fonts); its Content-Security-Policy forbids any other origin."""

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
