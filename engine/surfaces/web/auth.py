"""Who is looking at the web page: one function reads the token, another decides what it may see.

With no API token configured (loopback use), everyone is an admin. With one, the page keeps the
token in an HttpOnly, SameSite=Strict cookie set by the login form; the API's bearer token is an
admin token (it may look at any user). A token bound to one user (`user_tokens`) sees that user only.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

from engine.config import Settings
from engine.surfaces.http.auth import caller_of

__all__ = ["COOKIE", "Viewer", "resolve_token", "viewer_of", "auth_on"]

COOKIE = "convsearch_token"


@dataclass(frozen=True, slots=True)
class Viewer:
    admin: bool  # may pick any user
    user_id: str | None = None  # the only user a bound token sees (None for an admin)


def auth_on(settings: Settings) -> bool:
    return bool(settings.api_token)


def resolve_token(settings: Settings, token: str | None) -> Viewer | None:
    """The viewer a token stands for, or None when it is missing or wrong (compared in constant time)."""
    if not auth_on(settings):
        return Viewer(admin=True)
    if not token:
        return None
    caller = caller_of(token.strip(), settings)  # the API's rule: admin token, or a token bound to one user
    return None if caller is None else Viewer(admin=caller.admin, user_id=caller.user_id)


def viewer_of(request: Request) -> Viewer | None:
    """The viewer of this request, from its cookie (None: send them to the login form)."""
    return resolve_token(request.app.state.engine.settings, request.cookies.get(COOKIE))
