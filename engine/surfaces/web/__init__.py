"""The web page (seed 003, section 3): server-rendered HTML over the same facade and process as the API.

`mount(app)` adds the pages, the login form and the static files (no build step, no CDN, no
script: folding uses <details>, jumping to a message uses the URL fragment). Web paths carry their
own cookie check, so the API's bearer middleware lets them through (`is_web_path`).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from engine.surfaces.web.routes import router
from engine.surfaces.web.session import login_router

__all__ = ["mount", "is_web_path"]

STATIC = "/static"
_PATHS = frozenset(route.path for r in (router, login_router) for route in r.routes)  # type: ignore[attr-defined]


def is_web_path(path: str) -> bool:
    return path in _PATHS or path.startswith(STATIC + "/")


def mount(app: FastAPI) -> None:
    app.include_router(router)
    app.include_router(login_router)
    app.mount(STATIC, StaticFiles(directory=Path(__file__).with_name("static")), name="static")
