"""The web console (DESIGN §12): static files the HTTP app serves at `/`.

Plain HTML, CSS and JavaScript modules, shipped as package data: nothing is built at
install. The console is a client of the HTTP API and nothing else (`static/api.js`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.staticfiles import StaticFiles

STATIC = Path(__file__).parent / "static"


def mount(app: Starlette) -> None:
    """Serve the console: `/` is its page, `/console/*` its assets (ES modules, CSS)."""
    app.add_route("/", index, methods=["GET"], include_in_schema=False)
    app.mount("/console", Assets(directory=STATIC), name="console")


class Assets(StaticFiles):
    """The console's files, revalidated on each load (an ETag makes that a 304): after an
    upgrade no browser runs a cached module next to a new one."""

    def file_response(self, *args: Any, **kwargs: Any) -> Response:
        response = super().file_response(*args, **kwargs)
        response.headers["Cache-Control"] = "no-cache"
        return response


async def index(request: Request) -> Response:
    # no-cache: a new version of the console is picked up at the next load (it revalidates)
    return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})
