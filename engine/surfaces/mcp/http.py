"""MCP over streamable HTTP, served by `convsearch serve` at /mcp beside the HTTP API.

Each request reaches this app already bound to one user by its credentials (engine.surfaces.http.auth).
Every user gets an MCP server of their own (the same tools as stdio, bound to that user) with its
own session manager, started on the user's first request: a session opened for one user is unknown
to every other user's manager, so no session can change hands, and no tool takes a user id. Every
request checks that its user still exists: after a user is deleted, its manager (and every session
of it) is stopped, and a new session is refused as for any unknown user.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import anyio
import anyio.to_thread
from anyio.abc import TaskGroup, TaskStatus
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.datastructures import Headers
from starlette.types import Receive, Scope, Send

from engine.errors import ConvsearchError, UnknownUserError
from engine.surfaces.http.auth import SCOPE_USER, error_response, misencoded_hint
from engine.surfaces.mcp.server import build_server

__all__ = ["McpSessions"]


class McpSessions:
    """The ASGI app at /mcp: dispatches each request to its user's session manager."""

    def __init__(self, engine: Any, *, host: str = "127.0.0.1") -> None:
        self.engine, self.host = engine, host
        self._managers: dict[str, tuple[StreamableHTTPSessionManager, anyio.CancelScope]] = {}
        self._lock = anyio.Lock()
        self._group: TaskGroup | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Run for the app's lifetime (its lifespan); every session ends with it."""
        async with anyio.create_task_group() as group:
            self._group = group
            try:
                yield
            finally:
                group.cancel_scope.cancel()
                self._group, self._managers = None, {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            manager = await self._manager(scope[SCOPE_USER])
        except ConvsearchError as exc:
            hint = misencoded_hint(Headers(scope=scope)) if isinstance(exc, UnknownUserError) else ""
            return await error_response(exc.http_status, exc.code, exc.message + hint)(scope, receive, send)
        await manager.handle_request(scope, receive, send)

    async def _manager(self, user_id: str) -> StreamableHTTPSessionManager:
        try:
            await anyio.to_thread.run_sync(self.engine.users, user_id)  # an unknown (or deleted) user is an error
        except UnknownUserError:
            await self._stop(user_id)
            raise
        async with self._lock:
            if user_id not in self._managers:
                if self._group is None:
                    raise ConvsearchError("the MCP endpoint is not running (the server is starting or stopping)")
                server = build_server(self.engine, user_id)
                server.streamable_http_app(host=self.host)  # creates the server's session manager
                manager = server.session_manager
                self._managers[user_id] = (manager, await self._group.start(_serve, manager))
        return self._managers[user_id][0]

    async def _stop(self, user_id: str) -> None:
        """A deleted user's manager and its sessions end: none outlives the user."""
        async with self._lock:
            stopped = self._managers.pop(user_id, None)
        if stopped is not None:
            stopped[1].cancel()


async def _serve(manager: StreamableHTTPSessionManager, *, task_status: TaskStatus[anyio.CancelScope]) -> None:
    with anyio.CancelScope() as scope:
        async with manager.run():
            task_status.started(scope)
            await anyio.sleep_forever()
