"""/docs: Swagger UI from the assets shipped in the fastapi-offline package (no CDN, works offline).

The page and its assets hold no data, so they need no token; the page asks for the token once
(or reads it from `/docs#token=...`, a fragment the browser never sends) and adds it to every
request it makes, /openapi.json included.
"""

from __future__ import annotations

import json
from importlib.resources import files

from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

__all__ = ["DOCS_PATH", "STATIC_PREFIX", "add_docs_page"]

DOCS_PATH = "/docs"
STATIC_PREFIX = "/docs/static/"
_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>{title} - API docs</title>
<link rel="stylesheet" href="{static}swagger-ui.css"><link rel="icon" href="{static}favicon.png"></head>
<body><div id="swagger-ui"></div>
<script src="{static}swagger-ui-bundle.js"></script>
<script>
const needsToken = {needs_token};
const fromHash = new URLSearchParams(location.hash.slice(1)).get("token");
if (fromHash) {{ sessionStorage.setItem("convsearch-token", fromHash); history.replaceState(null, "", location.pathname); }}
let token = sessionStorage.getItem("convsearch-token");
if (needsToken && !token) {{
  token = prompt("API token (CONVSEARCH_API_TOKEN)") || "";
  sessionStorage.setItem("convsearch-token", token);
}}
SwaggerUIBundle({{
  url: {openapi}, dom_id: "#swagger-ui",
  requestInterceptor: (request) => {{ if (token) request.headers.Authorization = "Bearer " + token; return request; }},
}});
</script></body></html>
"""


def add_docs_page(app: FastAPI, *, needs_token: bool) -> None:
    """Serve Swagger UI at /docs with its assets under /docs/static/ (the app was built with docs_url=None)."""
    assets = files("fastapi_offline") / "static"
    app.mount(STATIC_PREFIX.rstrip("/"), StaticFiles(directory=str(assets)), name="docs-static")
    page = _PAGE.format(title=app.title, static=STATIC_PREFIX, needs_token=json.dumps(needs_token),
                        openapi=json.dumps(app.openapi_url))

    @app.get(DOCS_PATH, include_in_schema=False)
    def docs() -> HTMLResponse:
        return HTMLResponse(page)
