"""``/docs`` (Swagger UI) and ``/redoc`` that work with no internet: their JavaScript, CSS and favicon
are the files the pinned ``fastapi-offline`` wheel ships (Swagger UI 5, ReDoc 2), served by the app
itself under ``/docs-static`` instead of from a CDN."""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

STATIC_URL = "/docs-static"
# no online validator badge: the page makes no request beyond the app
SWAGGER_UI_PARAMETERS = {"validatorUrl": None, "tryItOutEnabled": True}


def install_docs(app: FastAPI) -> None:
    """Serve the assets and the two pages; create the app with ``docs_url=None, redoc_url=None``."""
    directory = files("fastapi_offline") / "static"
    app.mount(STATIC_URL, StaticFiles(directory=str(directory)), name="docs-static")
    openapi_url = app.openapi_url or "/openapi.json"

    def urls(request: Request) -> tuple[str, str]:
        """The OpenAPI document's URL and the assets' folder, below the app's root path."""
        root = request.scope.get("root_path", "")
        return f"{root}{openapi_url}", f"{root}{STATIC_URL}"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        document, assets = urls(request)
        return get_swagger_ui_html(
            openapi_url=document,
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{assets}/swagger-ui-bundle.js",
            swagger_css_url=f"{assets}/swagger-ui.css",
            swagger_favicon_url=f"{assets}/favicon.png",
            swagger_ui_parameters=SWAGGER_UI_PARAMETERS,
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        document, assets = urls(request)
        return get_redoc_html(
            openapi_url=document,
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{assets}/redoc.standalone.js",
            redoc_favicon_url=f"{assets}/favicon.png",
            with_google_fonts=False,
        )
