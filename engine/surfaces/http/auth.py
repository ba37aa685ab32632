"""Who is calling: the admin token, a token bound to one user, or nobody.

* `/api/*` (and the docs) need the admin token, `api_token`, when one is set.
* An MCP session (`/mcp`) is bound to one user by its credentials, never by a tool argument: a
  user token (`user_tokens`) binds its own user; the admin token (or any caller of a server
  without an `api_token`) names the user in the `X-Convsearch-User` header, percent-encoded UTF-8
  (HTTP reads header bytes as Latin-1, so "é😀" could not be named otherwise; an id without '%' or
  non-ASCII characters goes as it is).
The bound user goes into the ASGI scope as `convsearch.user` for the MCP surface to read.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Callable
from urllib.parse import quote, unquote

from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from engine.config import Settings
from engine.errors import AuthError, ConvsearchError, ForbiddenError, InvalidInputError
from engine.text_rules import cut

__all__ = ["Auth", "Caller", "identify", "caller_of", "mcp_user", "named_user", "misencoded_hint", "error_response",
           "USER_HEADER", "MCP_PATH", "SCOPE_USER"]

OPEN_PATHS = frozenset({"/healthz"})
USER_HEADER = "X-Convsearch-User"
MCP_PATH = "/mcp"
SCOPE_USER = "convsearch.user"


@dataclass(frozen=True, slots=True)
class Caller:
    admin: bool
    user_id: str | None = None  # the user a user token is bound to


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The one error body of the HTTP surface (docs/reference/http.md)."""
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


def identify(authorization: str, settings: Settings) -> Caller | None:
    """The caller behind an Authorization header; None: refused."""
    scheme, _, credentials = authorization.partition(" ")
    return caller_of(credentials.strip() if scheme.lower() == "bearer" else "", settings)


def caller_of(token: str, settings: Settings) -> Caller | None:
    """The caller a token stands for (compared in constant time), from a header or the web page's cookie."""
    presented = token.encode()
    if settings.api_token and hmac.compare_digest(presented, settings.api_token.encode()):
        return Caller(admin=True)
    bound = [user for known, user in settings.user_tokens.items() if hmac.compare_digest(presented, known.encode())]
    if bound:
        return Caller(admin=False, user_id=bound[0])
    return None if settings.api_token else Caller(admin=True)  # no api_token: an open (loopback) server


def named_user(headers: Headers) -> str | None:
    """The user the X-Convsearch-User header names, percent-decoded as UTF-8 (a literal '%' is sent as %25)."""
    named = headers.get(USER_HEADER)
    if named is None:
        return None
    try:
        return unquote(named, errors="strict")
    except UnicodeDecodeError:
        raise InvalidInputError(f"the {USER_HEADER} header {cut(named)!r} is not percent-encoded UTF-8: encode the "
                                "user id's UTF-8 bytes (e.g. 'é' as %C3%A9)") from None


def misencoded_hint(headers: Headers) -> str:
    """For an unknown user named by a header holding raw non-ASCII bytes: how to send the id instead."""
    named = headers.get(USER_HEADER) or ""
    if named.isascii():
        return ""
    try:
        meant = named.encode("latin-1").decode("utf-8")  # raw UTF-8 bytes, read as Latin-1 by HTTP
    except (UnicodeEncodeError, UnicodeDecodeError):
        meant = named
    return (f"; the {USER_HEADER} header held bytes outside ASCII, which HTTP reads as Latin-1: send the id "
            f"percent-encoded as UTF-8 ({cut(meant)!r} is {cut(quote(meant, safe=''))})")


def mcp_user(caller: Caller, headers: Headers) -> str:
    """The one user an MCP request acts for."""
    named = named_user(headers)
    if caller.user_id is not None:
        if named and named != caller.user_id:
            raise ForbiddenError(f"this token is bound to user {caller.user_id!r}; it cannot act for {cut(named)!r}")
        return caller.user_id
    if not named:
        raise AuthError(f"an MCP session needs its user: send a user token (CONVSEARCH_USER_TOKENS) or name the "
                        f"user in the {USER_HEADER} header (percent-encoded UTF-8)")
    return named


class Auth:
    """Checks every path but the open ones before any body is read; binds MCP requests to their user."""

    def __init__(self, app: ASGIApp, settings: Settings, checks_itself: Callable[[str], bool] = lambda path: False) -> None:
        # `checks_itself`: paths that do their own check (the web page reads its cookie, engine.surfaces.web)
        self.app, self.settings, self.checks_itself = app, settings, checks_itself

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS or self.checks_itself(scope["path"]):
            return await self.app(scope, receive, send)
        headers = Headers(scope=scope)
        try:
            self._admit(scope, headers)
        except ConvsearchError as exc:
            challenge = {"WWW-Authenticate": "Bearer"} if exc.http_status == 401 else None
            return await error_response(exc.http_status, exc.code, exc.message, challenge)(scope, receive, send)
        await self.app(scope, receive, send)

    def _admit(self, scope: Scope, headers: Headers) -> None:
        caller = identify(headers.get("authorization", ""), self.settings)
        if caller is None:
            raise AuthError("missing or wrong bearer token: send 'Authorization: Bearer <CONVSEARCH_API_TOKEN>' "
                            "(or a user token from CONVSEARCH_USER_TOKENS, for /mcp)")
        path = scope["path"]
        if path == MCP_PATH or path.startswith(MCP_PATH + "/"):
            scope[SCOPE_USER] = mcp_user(caller, headers)
        elif not caller.admin:
            raise ForbiddenError(f"this token opens MCP sessions (/mcp) for user {caller.user_id!r} only; "
                                 "other routes need CONVSEARCH_API_TOKEN")
