"""The web page (seed 003, section 3): server-rendered HTML over the same facade and process as the API.

`mount(app)` adds the pages, the login form and the static files (no build step, no CDN, no
script: folding uses <details>, jumping to a message uses the URL fragment). Web paths carry their
own cookie check, so the API's bearer middleware lets them through (`is_web_path`).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles

from engine.surfaces.http.auth import MCP_PATH
from engine.surfaces.http.docs_page import DOCS_PATH
from engine.surfaces.web.routes import router
from engine.surfaces.web.session import error_page, login_router

__all__ = ["mount", "is_web_path", "wants_page", "missing_page"]

STATIC = "/static"
_PATHS = frozenset(route.path for r in (router, login_router) for route in r.routes)  # type: ignore[attr-defined]


def is_web_path(path: str) -> bool:
    return path in _PATHS or path.startswith(STATIC + "/")


def wants_page(request: Request) -> bool:
    """A browser asking for a page (not the API, MCP or the docs): its 404 is a page too."""
    path = request.url.path
    return (request.method == "GET" and "text/html" in request.headers.get("accept", "")
            and not path.startswith(("/api/", MCP_PATH, DOCS_PATH, STATIC + "/")))


def missing_page(request: Request) -> Response:
    message = f"There is no page at {request.url.path[:80]}: open a day, Threads, Search or Settings from the menu."
    return error_page(request, message, "not_found", 404)


def mount(app: FastAPI) -> None:
    app.include_router(router)
    app.include_router(login_router)
    app.mount(STATIC, StaticFiles(directory=Path(__file__).with_name("static")), name="static")
