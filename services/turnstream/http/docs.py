"""The API's docs page at `/docs` (Swagger UI), its scripts and styles served from the
`fastapi-offline` package's copy, not from a CDN: the page works without internet."""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.staticfiles import StaticFiles

ASSETS = "/docs/assets"


def mount(app: FastAPI) -> None:
    """`/docs` and `/docs/assets/*` (create the app with `docs_url=None`)."""
    static = files("fastapi_offline") / "static"
    app.mount(ASSETS, StaticFiles(directory=str(static)), name="docs-assets")

    async def docs(request: Request) -> Response:
        return page(app)

    app.add_route("/docs", docs, methods=["GET"], include_in_schema=False)


def page(app: FastAPI) -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url=app.openapi_url or "/openapi.json",
        title=f"{app.title} API",
        swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
        swagger_css_url=f"{ASSETS}/swagger-ui.css",
        swagger_favicon_url=f"{ASSETS}/favicon.png",
        oauth2_redirect_url=None,
    )
