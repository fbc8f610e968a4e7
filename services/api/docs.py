"""Swagger UI (`/docs`) and ReDoc (`/redoc`) from assets served by the app itself, so both work on a machine
without internet: FastAPI's defaults load their JavaScript, CSS, favicon and fonts from CDNs, and render a blank
page offline. The assets are the ones the `fastapi-offline` wheel ships (its `static/` folder); only the pages
here are this project's (FastAPI documents this self-hosting: `docs_url=None` plus its own routes)."""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

DOCS = "/docs"
REDOC = "/redoc"
ASSETS = "/docs-assets"
"""Where the Swagger UI and ReDoc files are served: `swagger-ui-bundle.js`, `swagger-ui.css`,
`redoc.standalone.js`, `favicon.png`."""


def install_docs(app: FastAPI) -> None:
    """Serve `/docs`, `/redoc` and their assets from this app (create it with `docs_url=None, redoc_url=None`)."""
    app.mount(ASSETS, StaticFiles(directory=str(files("fastapi_offline") / "static")), name="docs-assets")

    @app.get(DOCS, include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{root}{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS}/favicon.png",
        )

    @app.get(REDOC, include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS}/favicon.png",
            with_google_fonts=False,
        )
