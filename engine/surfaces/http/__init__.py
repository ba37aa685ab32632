"""The HTTP surface (FastAPI); `create_app(engine)` builds it.

Imported lazily, so `engine.surfaces.http.schemas` (shared with the MCP server and the CLI) never pulls
in FastAPI.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from engine.surfaces.http.app import create_app

        return create_app
    raise AttributeError(name)
