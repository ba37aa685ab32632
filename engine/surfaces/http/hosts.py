"""Host header check for a server without a token: a DNS-rebinding page (evil.example resolving to
127.0.0.1) reaches a loopback server with its own Host header, so only the bound names pass."""

from __future__ import annotations

import ipaddress
from typing import Iterable

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["HostGuard", "allowed_hosts", "is_loopback"]

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def allowed_hosts(bind: str) -> frozenset[str] | None:
    """The Host names a server bound to `bind` answers; None (any) for an all-interfaces bind."""
    if bind in ("0.0.0.0", "::", ""):
        return None
    names = {bind.strip("[]").lower()}
    if is_loopback(bind):
        names |= set(LOOPBACK_NAMES)
    return frozenset(names)


def _host_name(header: str) -> str:
    """'example.com:8000' -> 'example.com'; '[::1]:8000' -> '::1'."""
    if header.startswith("["):
        return header[1:].split("]", 1)[0].lower()
    return header.rsplit(":", 1)[0].lower() if header.count(":") == 1 else header.lower()


class HostGuard:
    """421 with a JSON error for a Host header that is not one of the bound names."""

    def __init__(self, app: ASGIApp, hosts: Iterable[str]) -> None:
        self.app, self.hosts = app, frozenset(hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or _host_name(Headers(scope=scope).get("host", "")) in self.hosts:
            return await self.app(scope, receive, send)
        message = ("Host header is not an address this server listens on (a DNS-rebinding guard): use "
                   f"one of {', '.join(sorted(self.hosts))}, or set CONVSEARCH_API_TOKEN to serve other names")
        await JSONResponse({"error": {"code": "wrong_host", "message": message}}, status_code=421)(scope, receive, send)
