"""Safe server defaults: without a token only the bound names are answered (DNS rebinding), a
non-loopback bind needs a token or --insecure, /docs works offline, with a token too, and a
kept-alive connection gets its answers without waiting for ACKs."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from engine.api import ConversationEngine
from engine.surfaces.cli import main
from engine.surfaces.cli.service_commands import _listen
from engine.config import Settings
from tests.support import live

TOKEN = "d0cs-token"


@pytest.fixture(scope="module")
def open_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    with ConversationEngine(tmp_path_factory.mktemp("open") / "home", embedder=None) as engine:
        engine.add_user("alice", "UTC")
        yield from live(engine)


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    settings = Settings(api_token=TOKEN)
    with ConversationEngine(tmp_path_factory.mktemp("tok") / "home", embedder=None, settings=settings) as engine:
        engine.add_user("alice", "UTC")
        yield from live(engine)


def test_without_a_token_a_foreign_host_header_is_refused(open_api: httpx.Client) -> None:
    body = {"user_id": "alice", "text": "x"}
    for host in ("evil.example", "evil.example:8000", "127.0.0.1.evil.example"):
        answer = open_api.post("/api/search_session_history", json=body, headers={"Host": host})
        assert answer.status_code == 421 and answer.json()["error"]["code"] == "wrong_host", host
        assert "CONVSEARCH_API_TOKEN" in answer.json()["error"]["message"]
    port = open_api.base_url.port
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}"):
        assert open_api.post("/api/search_session_history", json=body, headers={"Host": host}).status_code == 200


def test_with_a_token_the_token_is_the_guard(guarded: httpx.Client) -> None:
    body = {"user_id": "alice", "text": "x"}
    headers = {"Host": "convsearch.internal", "Authorization": f"Bearer {TOKEN}"}
    assert guarded.post("/api/search_session_history", json=body, headers=headers).status_code == 200
    assert guarded.post("/api/search_session_history", json=body).status_code == 401


def test_docs_are_served_from_the_package_without_a_cdn(open_api: httpx.Client) -> None:
    page = open_api.get("/docs")
    assert page.status_code == 200 and "swagger-ui-bundle.js" in page.text
    assert "http://" not in page.text and "https://" not in page.text  # nothing fetched from elsewhere
    script = open_api.get("/docs/static/swagger-ui-bundle.js")
    assert script.status_code == 200 and len(script.content) > 100_000 and "SwaggerUIBundle" in script.text
    assert open_api.get("/docs/static/swagger-ui.css").status_code == 200
    assert open_api.get("/redoc").status_code == 404  # one docs page, the offline one


def test_docs_are_reachable_with_a_token(guarded: httpx.Client) -> None:
    page = guarded.get("/docs")  # a browser cannot send a bearer header for the page itself
    assert page.status_code == 200 and "const needsToken = true" in page.text
    assert "request.headers.Authorization" in page.text  # the page sends the token on every call
    assert guarded.get("/docs/static/swagger-ui-bundle.js").status_code == 200
    assert guarded.get("/openapi.json").status_code == 401
    assert guarded.get("/openapi.json", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.10", "example.com"])
def test_serve_refuses_a_non_loopback_bind_without_a_token(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch, host: str) -> None:
    monkeypatch.delenv("CONVSEARCH_API_TOKEN", raising=False)
    assert main(["--home", str(tmp_path / "home"), "serve", "--host", host]) == 3  # invalid input
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"refusing to serve {host} without a token" in err and "--insecure" in err
    assert not (tmp_path / "home").exists()  # refused before opening anything


def test_serves_connections_with_nodelay() -> None:
    """`serve` hands uvicorn its own listener; asyncio sets TCP_NODELAY on what it accepts only when
    the listener's proto is TCP. Without it, every answer after the first on a kept-alive connection
    (httpx.Client, an agent's connection pool) waited ~40 ms: Nagle against the delayed ACK."""

    async def accepted_nodelay() -> int:
        listener = _listen("127.0.0.1", 0)
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Accept(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                sock = transport.get_extra_info("socket")
                accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        server = await asyncio.get_running_loop().create_server(Accept, sock=listener)
        async with server:
            _, writer = await asyncio.open_connection(*listener.getsockname()[:2])
            nodelay = await asyncio.wait_for(accepted, timeout=10)
            writer.close()
        return nodelay

    assert asyncio.run(accepted_nodelay()) != 0
